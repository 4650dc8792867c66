//! One Envoy bucket on one RLQS stream: its demand, the assignment sluice paid for, and the
//! tokens leased for it but not yet assigned.
//!
//! Every tick (and after each usage report) [`Share::next`] picks the strategy to send:
//! - **Fair share from demand**: the reported requests per second (allowed + denied over
//!   `time_elapsed`) goes to the store with every report, and every second while Envoy denies;
//!   the store answers every sidecar's, and the share is their max-min fair split of
//!   `CONTENDED` of the rule's rate with `HEADROOM` (what uncontended buckets leave is split among
//!   them). Before Envoy reported a duration the stream claims the whole rate and takes the rate
//!   over the sidecars sharing it. A share is kept while its fair share stays within 70–105% of it
//!   (98–102% while contended; grown only while Envoy denies), since a changed strategy restarts
//!   Envoy's bucket full.
//! - **Paid first**: the strategy's [`Quote`] is taken from the pool, in one store call a tick
//!   at most: what the tick spends, and beyond it (a larger share, `LOOKAHEAD` seconds) only from
//!   what the rule's bucket had left at the last lease (contended: only what the share falls
//!   short of its fair one by), never more than the stream's entitlement (its fair share per
//!   second, with `ENTITLEMENT_SLACK`). What cannot be paid is not sent: the share Envoy holds is
//!   renewed (shorter if need be: a TTL within what is paid costs nothing), else the largest
//!   share the pool pays for, else `DENY_ALL` until the global bucket refills.
//! - **Renewed every tick** (`TICK`, 0.5 s). While the rule is contended (Envoy denies, or the
//!   demand reported exceeds the rule) with a 1 s TTL (`CONTENDED_TTL`): what is paid ahead is
//!   admitted by no one yet, and with 6 s of it two Envoys reached 87.8% of `B + L·t` from a cold
//!   start. Otherwise a new strategy gets the longest TTL up to `NEW_TTL` the pool pays for and
//!   renewals grow it a second at a time to `TTL`, so a stream that drops keeps Envoy enforcing
//!   a paid share until Envoy reconnects (at its next report, 5 s in Envoy 1.40).
//! - **Store down**: a paid assignment runs on until it would lapse; then the rule's fallback,
//!   unpaid: `allow` → `ALLOW_ALL`, `deny` → `DENY_ALL`, `local_share` → a token bucket at the
//!   rule's rate over the live sidecars.

use std::sync::Arc;

use sluice_core::Entry;

use super::funds::Funds;
use super::{Prepaid, Strategy};
use crate::store::StoreError;

mod pay;
mod sizing;

/// TTL of a strategy when it is first sent (seconds).
pub const NEW_TTL: u32 = 3;
/// The shortest TTL of a renewal (seconds): long enough that Envoy still holds the share if one
/// tick's renewal cannot be paid.
const RENEWED_TTL: u32 = 3;
/// The longest TTL (seconds), reached one second per renewal while the pool pays for it:
/// longer than Envoy 1.40's 5 s between reconnect attempts, so a stream that drops and reopens
/// finds Envoy still enforcing a paid share.
pub const TTL: u32 = 6;
/// How often the stream looks at every bucket (and renews what Envoy holds): twice a TTL of
/// `CONTENDED_TTL`, so one late tick does not lapse it.
pub const TICK: std::time::Duration = std::time::Duration::from_millis(500);
/// An assignment that is not surely live this long after now lapses before the next tick
/// (a tick and a fifth of one for jitter, microseconds): with more, a 1 s TTL would count as
/// lapsing the moment it is sent, and a renewal a moment later that the pool cannot pay yet
/// would replace it with a smaller share.
pub(super) const RENEW_BEFORE: u64 = TICK.as_micros() as u64 * 6 / 5;
/// A share grows to its target only by at least this factor (each change restarts Envoy's
/// bucket full), and half-way to it only by at least `HALF_STEP`.
pub(super) const MIN_STEP: f64 = 1.05;
const HALF_STEP: f64 = 1.5;
/// How long a demand counts in the store without a new report (three of Envoy's 5 s reports).
const DEMAND_TTL: std::time::Duration = std::time::Duration::from_secs(15);
/// Slack for float rounding in sums of fractional costs (never a whole token).
pub(super) const SLACK: f64 = 1e-9;
/// Seconds of the share leased ahead with each store call (fewer store calls per bucket).
pub(super) const LOOKAHEAD: f64 = 2.0;
/// The longest TTL while the rule is contended (seconds): the shortest Envoy 1.40 takes (it
/// reads whole seconds), renewed every `TICK`. Every second longer is a second of the share
/// paid ahead that no one admits when the run ends (with `TTL`, 6 s of the rule's rate sat paid
/// and unused: 87.8% of `B + L·t` from a cold start in `loadtest/rlqs.sh`).
const CONTENDED_TTL: u32 = 1;
/// Seconds of the share leased ahead while contended (about one store call a tick).
const CONTENDED_LOOKAHEAD: f64 = 0.5;

/// What to send for a bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// Nothing: the assignment Envoy holds is paid and not about to lapse.
    Keep,
    /// Send this strategy with this TTL.
    Send(Strategy, u32),
}

/// What Envoy reported for a bucket, in all (limited or not).
#[derive(Debug, Clone, Copy)]
pub struct Reported {
    /// Requests Envoy admitted.
    pub allowed: u64,
    /// Requests Envoy denied.
    pub denied: u64,
    /// When Envoy last reported traffic (engine clock, µs); the bucket's start before that.
    pub last_traffic: u64,
}

impl Reported {
    /// Nothing reported yet, at `now`.
    pub fn new(now: u64) -> Self {
        Self {
            allowed: 0,
            denied: 0,
            last_traffic: now,
        }
    }

    /// Adds one report (saturating); returns its requests.
    pub fn add(&mut self, allowed: u64, denied: u64, now: u64) -> u64 {
        self.allowed = self.allowed.saturating_add(allowed);
        self.denied = self.denied.saturating_add(denied);
        let requests = allowed.saturating_add(denied);
        if requests > 0 {
            self.last_traffic = now;
        }
        requests
    }
}

/// One bucket of one stream.
pub struct Share {
    /// The bucket id as Envoy sent it (answers must name it so), sorted by key; shared with
    /// the stream's index of its buckets, so it is held once.
    pub entries: Arc<[Entry]>,
    /// The rule's label (metrics, Quota API).
    pub rule: String,
    funds: Funds,
    prepaid: Prepaid,
    /// Tokens leased (or credited) and not yet assigned.
    pool: f64,
    /// Requests per second Envoy last reported (allowed + denied), once a report had a duration.
    demand: Option<f64>,
    /// Whether the last report had denials.
    saturated: bool,
    /// This stream's id: its demand's name in the store.
    client: u64,
    /// Every client's demand for the rule's bucket (requests per second), as the store last
    /// answered; `None` before the first answer.
    everyone: Option<Vec<f64>>,
    /// A report brought a demand the store has not seen yet.
    demand_unsent: bool,
    /// When the store last heard this stream's demand.
    shared_at: u64,
    /// Tokens this stream may still lease (see [`Bucket::entitle`]).
    entitled: f64,
    /// When `entitled` was last topped up.
    entitled_at: u64,
    /// What the rule's bucket had left after this stream's last lease: more than a tick needs
    /// is only taken from that, split among the sharers (never from others' renewals).
    left: Option<f64>,
    /// What Envoy reported, in all.
    pub reported: Reported,
    /// Whether the strategy in force was sent unpaid (store down).
    pub unpaid: bool,
    /// Whether the last lease found no room for the key (`engine.max_keys`).
    pub no_room: bool,
}

impl Share {
    /// A bucket first reported at `now`.
    pub fn new(entries: Arc<[Entry]>, rule: String, funds: Funds, client: u64, now: u64) -> Self {
        Self {
            entries,
            rule,
            funds,
            prepaid: Prepaid::default(),
            pool: 0.0,
            demand: None,
            saturated: false,
            client,
            everyone: None,
            demand_unsent: true,
            shared_at: 0,
            // A new bucket may lease its share of the burst at once.
            entitled: f64::INFINITY,
            entitled_at: now,
            left: None,
            reported: Reported::new(now),
            unpaid: false,
            no_room: false,
        }
    }

    /// The store key of the rule's bucket.
    pub fn key(&self) -> &str {
        &self.funds.payee.store_key
    }

    /// Takes a usage report in.
    pub fn report(&mut self, allowed: u64, denied: u64, elapsed_secs: u64, now: u64) {
        let requests = self.reported.add(allowed, denied, now);
        // Envoy 1.40's first report of a bucket says 0 s: it tells that the bucket exists.
        if elapsed_secs > 0 {
            self.demand = Some(requests as f64 / elapsed_secs as f64);
            self.saturated = denied > 0;
            self.demand_unsent = true;
        }
    }

    /// The strategy in force, as last sent.
    pub fn strategy(&self) -> Option<Strategy> {
        self.prepaid.strategy()
    }

    /// Requests per second last reported.
    pub fn demand(&self) -> Option<f64> {
        self.demand
    }

    /// Decides what to send at `now` and pays for it; `instances` is the live sidecar count.
    pub async fn next(&mut self, now: u64, instances: u64) -> Step {
        self.no_room = false;
        // Everyone's demand: after each report, and every tick while Envoy denies requests (so
        // a sidecar whose Envoys just started reporting is heard within a second, not a report).
        if self.demand_unsent || (self.saturated && now >= self.shared_at + 1_000_000) {
            self.share_demand(now).await;
        }
        let current = self.live_bucket(now);
        let target = self.target(current, instances);
        // The TTL grows a second per renewal (to at least `RENEWED_TTL` at once, so one missed
        // renewal does not lapse), but not past that while the pool is saved for a new share.
        let renewal = current.map(|tb| {
            let step = u32::from(target.is_none());
            let max = self.max_ttl();
            let ttl = (self.prepaid.ttl_secs() + step).clamp(RENEWED_TTL.min(max), max);
            (Strategy::Bucket(tb), ttl)
        });
        // One store call at most. What this tick cannot do without (the renewal of the share
        // Envoy holds, or with none, the new share), and beyond that (a larger share, `LOOKAHEAD`
        // seconds more) only a part of what the rule's bucket had left at the last lease: with
        // every sharer asking for more than its renewal at once, one renewal goes unpaid, its
        // share lapses and restarts smaller, and contended shares oscillate (measured).
        let new_cost = target.map(|rate| {
            let q = self.quote_rate(rate, now);
            q.cost - q.credit
        });
        let renew_cost = renewal.map(|(s, ttl)| self.prepaid.quote(s, ttl, now).cost);
        let base = renew_cost.or(new_cost).unwrap_or(0.0);
        // The most this tick may have to pay: the renewal or the new share, whichever costs more.
        let need = base.max(new_cost.unwrap_or(0.0));
        let rate = target.or(current.map(|tb| tb.rate())).unwrap_or(0.0);
        let wanted = need + rate * self.lookahead();
        self.entitle(now, instances);
        let spare = match self.left {
            None => f64::INFINITY,
            // What a contended rule leaves beyond the shares in force is what the shares below
            // their fair one fall short by: each takes its own shortfall a tick, so the first to
            // ask does not grow at the expense of the others (measured: it did, for 10 s).
            Some(left) if self.contended() => {
                let short = self.fair_rate(instances) - current.map_or(0.0, |tb| tb.rate());
                left.min(short.max(0.0) * TICK.as_secs_f64() + 1.0)
            }
            Some(left) => left / self.sharers(instances),
        }
        .max(0.0);
        let short = need > self.pool + SLACK;
        // The pool grows by at most `spare` a tick beyond what the tick spends.
        let want = (wanted - self.pool).min(base + spare).min(self.entitled);
        if short && want >= 1.0 {
            match self.lease(want).await {
                Ok(()) => {}
                // No room for the key (`engine.max_keys`): nothing unpaid is ever sent; what
                // the pool pays for is, then DENY_ALL below, as RLS denies such a key.
                Err(StoreError::Full) => self.no_room = true,
                // The store is down: a paid assignment runs on while it can, then the fallback.
                Err(_) => {
                    if current.is_some() && !self.lapsing(now) {
                        return Step::Keep;
                    }
                    return self.fallback(now, instances);
                }
            }
        }
        // A new share: the target, or the largest the pool pays for if that is a large step
        // (each change restarts Envoy's bucket, so a share grows in few large steps while the
        // pool saves up, not many small ones); with none in force, the largest share the pool
        // pays for.
        if let Some(rate) = target {
            match current {
                Some(tb) if rate > tb.rate() => {
                    let have = tb.rate();
                    if let Some(step) = self.try_share(rate, now) {
                        return step;
                    }
                    let r = self.affordable_rate(rate, now);
                    if r >= have * HALF_STEP
                        && let Some(step) = self.largest_share(r, now)
                    {
                        return step;
                    }
                }
                _ => {
                    if let Some(step) = self.largest_share(rate, now) {
                        return step;
                    }
                }
            }
        }
        // Renew the share Envoy holds: a second longer if the pool pays for it, else as long,
        // else shorter (a TTL that ends before what is paid costs nothing: Envoy keeps its bucket
        // while the pool refills).
        if let Some((s, ttl)) = renewal {
            for t in (1..=ttl).rev() {
                if self.try_pay(s, t, now) {
                    return self.sent(s, t, now, false);
                }
            }
            if !self.lapsing(now) {
                return Step::Keep;
            }
            // About to lapse unpaid: a smaller share the pool pays for.
            if let Some(step) = self.largest_share(s_rate(s) * 0.98, now) {
                return step;
            }
        }
        // Nothing paid is left: DENY_ALL, renewed every tick, until the global bucket refills.
        let q = self.prepaid.quote(Strategy::DenyAll, TTL, now);
        self.pool += q.credit;
        self.sent(Strategy::DenyAll, TTL, now, false)
    }

    /// Tells the store this stream's demand and reads everyone's (one call per report).
    async fn share_demand(&mut self, now: u64) {
        self.demand_unsent = false;
        self.shared_at = now;
        // Before Envoy reported a duration, claim the whole rate: others then split it evenly
        // with this stream at once instead of a report later.
        let mine = milli(self.demand.unwrap_or_else(|| self.rate_per_sec()));
        let f = &self.funds;
        match f
            .engine
            .share_demand(&f.payee, self.client, mine, DEMAND_TTL)
            .await
        {
            Ok(all) => {
                self.everyone = Some(all.into_iter().map(|m| m as f64 / 1000.0).collect());
            }
            Err(e) => {
                tracing::debug!(key = %f.payee.store_key, error = %e, "RLQS demand not shared")
            }
        }
    }

    /// Withdraws this stream's demand (the bucket is abandoned or the stream ended).
    pub async fn withdraw(&self) {
        if self.everyone.is_some() {
            let f = &self.funds;
            let _ = f
                .engine
                .share_demand(&f.payee, self.client, 0, DEMAND_TTL)
                .await;
        }
    }

    /// Gives back what Envoy can no longer admit once an abandon sent at `now` arrives, with the
    /// pool: tokens for the store to take back.
    pub fn abandon(&mut self, now: u64) -> u64 {
        let back = self.pool + self.prepaid.credit_on_abandon(now);
        self.pool = 0.0;
        self.prepaid = Prepaid::default();
        back.max(0.0).floor() as u64
    }

    /// Tokens leased and unassigned (a stream that ends returns them).
    pub fn take_pool(&mut self) -> u64 {
        let back = self.pool.max(0.0).floor() as u64;
        self.pool = 0.0;
        back
    }

    /// Where the share's tokens came from, to return them to.
    pub fn funds(&self) -> &Funds {
        &self.funds
    }

    /// The tokens per second of the strategy in force (0 for DENY_ALL, the rule's rate for
    /// ALLOW_ALL).
    pub fn assigned_rate(&self) -> f64 {
        match self.prepaid.strategy() {
            Some(Strategy::Bucket(tb)) => tb.rate(),
            Some(Strategy::AllowAll) => self.rate_per_sec(),
            _ => 0.0,
        }
    }
}

/// Requests per second in milli-requests, bounded (a report can claim any count).
fn milli(rps: f64) -> u64 {
    (rps * 1000.0).clamp(0.0, 1e15) as u64
}

fn s_rate(s: Strategy) -> f64 {
    match s {
        Strategy::Bucket(tb) => tb.rate(),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests;
