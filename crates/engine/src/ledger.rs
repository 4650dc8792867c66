//! The ledger: how a request is paid for, as a pure function of its buckets' states and `now`.
//!
//! [`settle`] is the only place tokens are spent. It takes the request's buckets already locked
//! (in a fixed order, by the caller) and decides all of them together: either every enforcing
//! bucket can pay and all pay, or none is charged. It does no I/O and reads no clock, so every
//! rule below is a property test away (governor's `gcra.rs` is the model).
//!
//! The invariants it keeps, for any input (`crates/engine/tests/ledger.rs` tests them):
//! - **Conservation**: a bucket spends only tokens it holds (its lease, or its local bucket), so a
//!   key never admits more than its global bucket granted: `B + L·t` over any interval `t`.
//! - **All or nothing**: nothing is spent unless every enforcing bucket of the request can pay.
//!   Quotas (`quota_mode`) are the one exception, by their definition: a quota that cannot pay
//!   blocks the request only when every quota of the request cannot; otherwise the request
//!   passes and the quotas that can pay are charged (the empty ones are not: they hold nothing).
//! - **No lockout**: a cost above the burst can never be paid, so it is denied as such
//!   ([`Denial::CostAboveBurst`]) without touching the bucket or asking the store; any cost up to
//!   the burst passes once the bucket has refilled.

use sluice_core::config::Mode;
use smallvec::SmallVec;

use crate::decision::Denial;

pub use owed::Owed;
pub use state::{LeaseState, Reading};
pub use terms::{StoreStatus, Terms};

/// One bucket's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// Why this bucket denies (`None`: it paid, or could have). Shadow rules report it too.
    pub denial: Option<Denial>,
    /// Tokens left after the decision, as this instance knows them (0 while in debt).
    pub remaining: f64,
    /// Tokens owed after the decision (post-paid usage beyond what was left), as this instance
    /// knows them; 0 when not in debt.
    pub debt: f64,
    /// Reported usage dropped at the debt bound by this decision.
    pub clamped: u64,
    /// Microseconds until the bucket is full again.
    pub until_full: u64,
    /// When denied: microseconds until this request could pass; `None` if it never can.
    pub retry_after: Option<u64>,
    /// Decided by the rule's fallback because the global store was unavailable.
    pub fallback: bool,
    /// A leased bucket ran low while the store is up and the key is not starved: refill its
    /// lease in the background now, before requests have to wait for it.
    pub refill_ahead: bool,
    /// A leased fixed window denied this request and counts denials: close this window (its
    /// id) in the store too, so every sidecar denies until it ends.
    pub close_window: Option<u64>,
}

/// The outcome of [`settle`]. Returned on the stack once per decision: boxing the verdicts would
/// cost an allocation per request to save moving a few hundred bytes.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// Nothing was charged: a leased bucket came up short although its key is not starved (a
    /// concurrent request spent the tokens the lease call brought). Lease again and settle once
    /// more, with `may_retry` off.
    LeaseAgain,
    /// Decided: `allowed` if every enforcing bucket paid; one verdict per bucket, in order.
    Settled {
        /// Whether the request passes (and every bucket was charged).
        allowed: bool,
        /// Each bucket's answer.
        verdicts: SmallVec<[Verdict; 4]>,
    },
}

/// Decides a request over its distinct buckets: `terms[i]` is paid from `states[i]`. Charges all
/// of them, or none.
pub fn settle(
    terms: &[Terms],
    states: &mut [&mut LeaseState],
    now: u64,
    may_retry: bool,
) -> Settlement {
    debug_assert_eq!(terms.len(), states.len());
    for (t, s) in terms.iter().zip(states.iter_mut()) {
        s.expire(now);
        t.catch_up_fallback(s, now);
    }
    // Pass 1: can every enforcing bucket pay?
    let paid: SmallVec<[Result<(), Denial>; 4]> = terms
        .iter()
        .zip(states.iter())
        .map(|(t, s)| t.pays(s, now))
        .collect();
    // Quotas block only together: when every enforcing quota of the request is denied.
    let mut quotas = terms
        .iter()
        .zip(&paid)
        .filter(|(t, _)| t.quota && !t.shadow);
    let quotas_block = quotas.clone().next().is_some() && quotas.all(|(_, p)| p.is_err());
    let blocking = |(t, p): (&Terms, &Result<(), Denial>)| {
        p.is_err() && !t.shadow && (!t.quota || quotas_block)
    };
    let allowed = !terms.iter().zip(&paid).any(blocking);
    if !allowed && may_retry {
        // Leasing again helps only if every blocking bucket is a leased one that merely came up
        // short (not starved: `retry_at()` passed), and nothing blocks for good.
        let worth_it = terms
            .iter()
            .zip(&paid)
            .zip(states.iter())
            .all(|((t, p), s)| {
                !blocking((t, p)) || (t.leased() && *p == Err(Denial::Empty) && now >= s.retry_at())
            });
        if worth_it {
            return Settlement::LeaseAgain;
        }
    }
    // Pass 2: charge (all or nothing) and report.
    let verdicts = terms
        .iter()
        .zip(states.iter_mut())
        .zip(&paid)
        .map(|((t, s), p)| {
            let (mode, rate) = t.effective_reserving(s.store_reserved(now));
            let mut refill_ahead = false;
            if allowed && p.is_ok() && t.hits > 0 && !t.forced() {
                if let Some(instances) = t.owes_store() {
                    let rest = s.pay_from_lease(t.hits);
                    if rest > 0 {
                        s.spend(mode, &rate, now, rest);
                        s.owe(&t.rate, instances, rate.burst, now, rest);
                    }
                } else {
                    s.spend(mode, &rate, now, t.hits);
                }
                // Not for a starved key (`queued`): its next call is its turn, sized by the
                // demand it saw, which a refill ahead would cut short. Its lease of rate, when
                // due and its turn has come, is renewed all the same once its stock drops
                // tokens (full: its demand fell below the reservation, or a turn's grant
                // filled the lease): a key its stock pays makes no next call, and a reservation
                // granted while it was starved (80% of `L` to one sidecar at 2.9× the limit)
                // stayed with it after its demand fell to 20% of `L`, until its ttl, while a
                // fleet at 80% of `L` was denied half its requests (`engine/tests/fleet.rs`,
                // leases of rate). Not while its stock is spent as it fills: every starved
                // sidecar's renewal in the last quarter of its ttl doubled a starved key's
                // calls (128 sidecars at 4× `L`: 10 a second settled, 20 so; simulated).
                let strict_up = mode == Mode::Strict && t.store == StoreStatus::Up;
                let due = strict_up
                    && s.rate_lease_due(&t.rate, now)
                    && (!s.queued || s.rate_lease_dropped());
                refill_ahead = strict_up
                    && (s.lease_is_low() || due)
                    && now >= s.retry_at()
                    && (!s.queued || due);
            }
            if !allowed && *p == Err(Denial::Empty) && t.leased() {
                s.denied(t.hits);
            }
            // A fixed window counting denials: the hits it denied count, so it is closed until
            // it ends (here at once; in the store by the caller, for a leased rule).
            // The window denied in: the lease's (the store's count) while it lives, else ours.
            // Worked out only for a denial that may close it (off the common path).
            let denied_in = || {
                let rare = s.rare();
                if now < rare.lease_until && rare.lease_until != u64::MAX {
                    rare.lease_window
                } else {
                    rate.window(now)
                }
            };
            let window = (t.count_denied
                && *p == Err(Denial::Empty)
                && t.hits > 0
                && t.store == StoreStatus::Up)
                .then(denied_in)
                .filter(|w| s.rare().closed_window != w.saturating_add(1));
            if let Some(window) = window {
                s.rare_mut().closed_window = window.saturating_add(1);
                match t.mode {
                    Mode::Local => {
                        s.local.refill(&rate, now);
                        s.local.tokens = s.local.tokens.min(0.0);
                    }
                    Mode::Strict | Mode::Exact => {
                        // What is left of the lease counts as spent, like the rest of the window.
                        s.lease = 0;
                        s.global_remaining = s.global_remaining.min(0.0);
                        s.global_read_at = now;
                        // Not asking again at once keeps a request right behind this one from
                        // leasing what is left before the store closes the window; at most a
                        // second, as for any starved key, so a reset is seen soon.
                        let end = sluice_core::window::until_window_end(&rate, now);
                        s.set_retry_at(s.retry_at().max(now.saturating_add(end.min(1_000_000))));
                    }
                }
            }
            let clamped = if t.reported > 0 {
                t.report(s, mode, &rate, now)
            } else {
                0
            };
            let held = if t.owes_store().is_some() {
                s.lease as f64
            } else {
                0.0
            };
            // Below zero while in debt: waits count the time to repay it. Never below the debt
            // bound: usage pending for the store counts only as far as the store will charge it.
            let floor = -(t.max_debt.unwrap_or(0) as f64);
            let balance = (s.remaining(mode, &rate, now) + held).max(floor);
            let denial = p.err();
            let retry_after = match denial {
                Some(Denial::Empty) => rate.micros_until_at(balance, t.need() as f64, now),
                _ => None,
            };
            Verdict {
                denial,
                remaining: balance.max(0.0),
                debt: (-balance).max(0.0),
                clamped,
                until_full: rate.micros_until_full_at(balance, now),
                retry_after,
                fallback: matches!(t.store, StoreStatus::Down { .. }),
                refill_ahead,
                close_window: window.filter(|_| t.mode != Mode::Local),
            }
        })
        .collect();
    Settlement::Settled { allowed, verdicts }
}

mod demand;
pub mod held;
mod owed;
pub mod rate_lease;
mod state;
mod terms;
#[cfg(test)]
mod tests;
