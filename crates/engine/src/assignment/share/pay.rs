//! How a share's strategies are paid for: the pool, leases through the engine, the quotes of
//! new shares and renewals, and the unpaid fallback while the store is down.

use sluice_core::config::Fallback;

use super::super::{Quote, Strategy, TokenBucket};
use super::{NEW_TTL, RENEW_BEFORE, SLACK, Share, Step};

/// The shortest TTL of a new share: Envoy 1.40's shortest, two ticks (with 1 s ticks a 1 s TTL
/// lapsed at every tick, and each lapse restarts Envoy's bucket full: 82.4% of `B + L·t` in
/// `loadtest/rlqs.sh`; ticks are 0.5 s since).
const MIN_NEW_TTL: u32 = 1;
use crate::store::StoreError;

impl Share {
    pub(super) fn sent(&mut self, strategy: Strategy, ttl: u32, now: u64, unpaid: bool) -> Step {
        tracing::debug!(key = %self.funds.payee.store_key, ?strategy, ttl, pool = self.pool, demand = ?self.demand,
            saturated = self.saturated, unpaid, entitled = self.entitled, everyone = ?self.everyone, "RLQS assignment");
        self.prepaid.commit(strategy, ttl, now);
        self.unpaid = unpaid;
        Step::Send(strategy, ttl)
    }

    pub(super) fn fallback(&mut self, now: u64, instances: u64) -> Step {
        let strategy = match self.funds.fallback {
            Fallback::Allow => Strategy::AllowAll,
            Fallback::Deny => Strategy::DenyAll,
            Fallback::LocalShare => self.prepaid.distinct(Strategy::Bucket(
                self.token_bucket(self.rate_per_sec() / instances.max(1) as f64),
            )),
        };
        if self.prepaid.strategy() == Some(strategy) && self.unpaid && !self.lapsing(now) {
            return Step::Keep;
        }
        self.sent(strategy, NEW_TTL, now, true)
    }

    /// The token bucket Envoy surely still holds when a response sent now arrives.
    pub(super) fn live_bucket(&self, now: u64) -> Option<TokenBucket> {
        match self.prepaid.strategy() {
            Some(Strategy::Bucket(tb)) if self.prepaid.live(now) && !self.unpaid => Some(tb),
            _ => None,
        }
    }

    pub(super) fn quote_rate(&self, rate: f64, now: u64) -> Quote {
        let s = self
            .prepaid
            .distinct(Strategy::Bucket(self.token_bucket(rate)));
        self.prepaid.quote(s, self.new_ttl(), now)
    }

    /// Leases `tokens` (rounded up, so what was asked for pays what it was asked for; at least
    /// 1, at most the burst) into the pool.
    pub(super) async fn lease(&mut self, tokens: f64) -> Result<(), StoreError> {
        let want = tokens.ceil().clamp(1.0, self.funds.payee.rate.burst as f64) as u64;
        match self.funds.lease(want).await {
            Ok(l) => {
                tracing::debug!(key = %self.funds.payee.store_key, want, kept = l.kept, left = l.left, "RLQS lease");
                self.pool += l.kept as f64;
                self.entitled -= l.kept as f64;
                self.left = Some(l.left);
                Ok(())
            }
            Err(e) => {
                tracing::debug!(key = %self.funds.payee.store_key, error = %e, "RLQS lease failed");
                Err(e)
            }
        }
    }

    /// Sends a new share of `rate` if the pool pays for it with some TTL: the longest up to
    /// `NEW_TTL`, down to `MIN_NEW_TTL`. A new bucket gets its fair share at once with the TTL the
    /// pool affords (the TTL then grows a second per renewal as the pool allows) rather than a
    /// smaller share at a longer TTL: prepaying 3 s of a share before Envoy may use it held
    /// shares back for seconds from a cold start (87.6% of `B + L·t` over 60 s).
    pub(super) fn try_share(&mut self, rate: f64, now: u64) -> Option<Step> {
        let s = self
            .prepaid
            .distinct(Strategy::Bucket(self.token_bucket(rate)));
        let ttl = (MIN_NEW_TTL..=self.new_ttl())
            .rev()
            .find(|&ttl| self.try_pay(s, ttl, now))?;
        Some(self.sent(s, ttl, now, false))
    }

    /// The largest share up to `rate` the pool pays for as a new strategy, if any (with the
    /// credit of what Envoy holds now): tried from the estimate down in small steps, as each
    /// change restarts Envoy's bucket and a share too small costs seconds to grow.
    pub(super) fn largest_share(&mut self, rate: f64, now: u64) -> Option<Step> {
        let mut r = self.affordable_rate(rate, now);
        for tries in 0..40 {
            if r < self.min_rate() {
                break;
            }
            if let Some(step) = self.try_share(r, now) {
                return Some(step);
            }
            r *= if tries < 8 { 0.98 } else { 0.8 };
        }
        None
    }

    /// About the largest share up to `rate` the pool pays for as a new strategy at `now`, with
    /// the credit of what Envoy holds now.
    pub(super) fn affordable_rate(&self, rate: f64, now: u64) -> f64 {
        let credit = self.prepaid.credit_on_abandon(now);
        rate.min(self.affordable(self.pool + credit, MIN_NEW_TTL))
    }

    /// Pays for `strategy` from the pool if it can.
    pub(super) fn try_pay(&mut self, strategy: Strategy, ttl: u32, now: u64) -> bool {
        let q = self.prepaid.quote(strategy, ttl, now);
        if self.pool + q.credit + SLACK < q.cost {
            return false;
        }
        self.pool += q.credit - q.cost;
        true
    }

    /// Whether the assignment in force lapses before the next tick can renew it.
    pub(super) fn lapsing(&self, now: u64) -> bool {
        !self.prepaid.live(now.saturating_add(RENEW_BEFORE))
    }
}
