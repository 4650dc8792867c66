//! The engine's side of holds (`crate::holds`): recording the holds an admitted request takes,
//! giving back the ones its releases name, and counting them.

use sluice_core::RuleSet;
use sluice_core::bucket::Algorithm;
use sluice_core::config::Mode;
use sluice_core::descriptor::Hold;
use smallvec::SmallVec;

use super::Engine;
use crate::decision::RateLimitRequest;
use crate::holds::{self, HeldFrom, HoldRecord};
use crate::key::Values;
use crate::ledger::{LeaseState, Terms, Verdict};
use crate::plan::{Plan, Settled, hold_keys};
use crate::table::Swept;

impl Engine {
    /// Gives back the holds the request's releases (`sluice-release: <token>`) name on the keys of
    /// their descriptors; returns how many were given back, and the reservations settled (a
    /// reservation gives back what the descriptor's reported usage left of it; the plan
    /// reports the usage beyond it). A token that holds nothing on
    /// those keys (released already, lapsed, never taken, or another key's) changes nothing:
    /// a client cannot release a slot it does not hold.
    pub(super) fn release_holds(
        &self,
        rules: &RuleSet,
        req: &RateLimitRequest<'_>,
        now: u64,
    ) -> (u32, SmallVec<[Settled; 1]>) {
        let mut released = 0u32;
        let mut settled = SmallVec::new();
        for (index, d) in req.descriptors.iter().enumerate() {
            let Hold::Release(token) = d.hold else {
                continue;
            };
            let used = d.hits_addend.unwrap_or(req.hits_addend);
            let mut found = false;
            for (identity, key) in hold_keys(rules, req.domain, d) {
                let Some(bucket) = self.table.get(identity, Values::Sent(&key)) else {
                    continue;
                };
                let given = holds::release(&mut bucket.lock(), &bucket.rate, token, used, now);
                let Some(reserved) = given else {
                    continue;
                };
                found = true;
                released = released.saturating_add(1);
                self.holds.remove(1);
                if bucket.rate.algorithm != Algorithm::Concurrency {
                    settled.push(Settled {
                        descriptor: index,
                        identity,
                        reserved,
                    });
                    self.leaser.metrics.reservation_error(reserved, used);
                }
            }
            let outcome = if found { "released" } else { "unknown" };
            let metrics = &self.leaser.metrics;
            metrics.hold_releases.with_label_values(&[outcome]).inc();
        }
        (released, settled)
    }

    /// Refuses the request's holds: `max_holds` are kept already.
    pub(super) fn refuse_holds(&self, plan: &mut Plan<'_>, now: u64) {
        plan.refuse_acquires();
        self.leaser.metrics.key_refused("holds", now);
    }

    /// Records a hold, under one new token, on each concurrency limit the admitted request
    /// acquired and paid (a shadow rule that would deny took nothing); returns the token, or
    /// `None` if nothing was held.
    pub(super) fn record_holds(
        &self,
        plan: &Plan<'_>,
        terms: &[Terms],
        states: &mut [&mut LeaseState],
        verdicts: &[Verdict],
        now: u64,
    ) -> Option<u64> {
        let token = new_token();
        let mut held = false;
        for (((charge, t), state), v) in plan.charges.iter().zip(terms).zip(states).zip(verdicts) {
            if !charge.acquire || v.denial.is_some() || charge.hits == 0 {
                continue;
            }
            let source = if t.forced() {
                HeldFrom::Nothing
            } else if t.effective().0 == Mode::Local {
                HeldFrom::Local
            } else {
                HeldFrom::Lease(state.rare().hold_epoch)
            };
            // A concurrency limit's slots live its period (the hold timeout); a reservation its
            // rule's `hold_timeout`.
            let lives = match charge.info.payment.reserve() {
                Some(r) if charge.info.rate.algorithm != Algorithm::Concurrency => r.hold_micros,
                _ => charge.info.rate.period_micros(),
            };
            holds::record(
                state,
                HoldRecord {
                    token,
                    slots: charge.hits,
                    until: now.saturating_add(lives),
                    source,
                },
            );
            self.holds.add(1);
            held = true;
        }
        held.then_some(token)
    }

    /// Publishes what a sweep found of holds: lapsed ones by rule, slots in flight by rule, and
    /// the count kept (which the sweep recounts, so holds dropped with their key, by a reset,
    /// are not counted forever).
    pub(super) fn count_holds(&self, swept: &Swept) {
        let metrics = &self.leaser.metrics;
        let rules = self.rules();
        let label = |identity: u64| {
            rules
                .rules()
                .iter()
                .find(|r| r.fingerprint == identity)
                .map_or("override", |r| r.label.as_str())
        };
        for (&identity, &n) in &swept.expired {
            metrics
                .holds_expired
                .with_label_values(&[label(identity)])
                .inc_by(n);
        }
        metrics.holds_in_flight.reset();
        for (&identity, &n) in &swept.in_flight {
            metrics
                .holds_in_flight
                .with_label_values(&[label(identity)])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        self.holds.set(swept.holds);
    }

    /// Holds kept on this instance now.
    pub fn holds_kept(&self) -> u64 {
        self.holds.get()
    }
}

/// A new hold token: 64 random bits from the operating system (never 0, which no token is), so
/// a client cannot guess another request's.
fn new_token() -> u64 {
    loop {
        let mut bytes = [0u8; 8];
        if getrandom::fill(&mut bytes).is_err() {
            // No OS randomness (never seen on Linux): a process-random hash of the time and a
            // counter, still unknown to clients.
            use std::hash::BuildHasher as _;
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let seed = std::time::Instant::now();
            bytes = foldhash::quality::RandomState::default()
                .hash_one((n, seed))
                .to_le_bytes();
        }
        let token = u64::from_le_bytes(bytes);
        if token != 0 {
            return token;
        }
    }
}
