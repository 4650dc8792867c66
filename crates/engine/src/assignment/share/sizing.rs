//! How large a bucket's share is: the fair share of the rule's rate from everyone's demand, the
//! entitlement that bounds its leases, and the token bucket Envoy is sent for a rate.

use super::super::{TokenBucket, fair_share};
use super::{LOOKAHEAD, MIN_STEP, Share};

/// A stream may lease this much more than its fair share, so that timing jitter (a late tick, a
/// lease rounded down) does not starve a share it is entitled to.
const ENTITLEMENT_SLACK: f64 = 1.25;

/// The part of a rule's rate that shares may use in all.
const CONTENDED: f64 = 0.97;

/// Envoy's bucket holds this many seconds of its share.
const BUCKET_SECS: f64 = 0.2;

/// Share above reported demand.
const HEADROOM: f64 = 1.2;

/// Demand below this fraction of the share shrinks it.
const SHRINK_BELOW: f64 = 0.7;

/// Fill intervals are chosen so that a share has this many steps per interval at the rule's rate.
const STEPS: f64 = 100.0;

impl Share {
    /// The share to move to, if any: from demand (or an even split before Envoy reported any),
    /// with hysteresis around `current`; `None` keeps the share Envoy holds.
    pub(super) fn target(&self, current: Option<TokenBucket>, instances: u64) -> Option<f64> {
        let want = self.fair_rate(instances);
        let Some(tb) = current else {
            return Some(want);
        };
        let have = tb.rate();
        // Before Envoy reported a duration, grow toward the even split as the pool allows.
        let grow = want >= have * MIN_STEP && (self.saturated || self.demand.is_none());
        let shrink = want < have * SHRINK_BELOW;
        (grow || shrink).then_some(want)
    }

    /// This stream's fair share of the rule's rate: from every client's reported demand, or an
    /// even split over the live sidecars before there is any.
    pub(super) fn fair_rate(&self, instances: u64) -> f64 {
        let max = self.rate_per_sec();
        match self.demand {
            Some(d) => {
                let everyone = self.everyone.as_deref().unwrap_or(std::slice::from_ref(&d));
                // Shares of a contended rule leave a little of it unassigned, for what changes
                // and jitter cost; without it, one late renewal starves a share.
                fair_share(max * CONTENDED, d, everyone, HEADROOM).clamp(self.min_rate(), max)
            }
            None => (max / self.sharers(instances)).max(self.min_rate()),
        }
    }

    /// How many share the bucket: the live sidecars, or the clients that reported demand.
    pub(super) fn sharers(&self, instances: u64) -> f64 {
        let reported = self.everyone.as_ref().map_or(0, Vec::len);
        instances.max(reported as u64).max(1) as f64
    }

    /// Adds what this stream may lease since the last time: its fair share per second, kept up
    /// to its share of the burst or `LOOKAHEAD` and a second of its share. So no sidecar leases
    /// another's share away (the store grants whoever asks first).
    pub(super) fn entitle(&mut self, now: u64, instances: u64) {
        let rate = self.fair_rate(instances) * ENTITLEMENT_SLACK;
        let elapsed = now.saturating_sub(self.entitled_at) as f64 / 1e6;
        self.entitled_at = now;
        let burst_share = self.funds.payee.rate.burst as f64 / self.sharers(instances);
        if self.entitled.is_infinite() {
            // A new bucket starts with its share of the burst, so the first sidecar to ask
            // does not take the whole burst.
            self.entitled = burst_share;
            return;
        }
        let cap = burst_share.max(rate * (LOOKAHEAD + 1.0));
        self.entitled = (self.entitled + rate * elapsed).min(cap);
    }

    pub(super) fn rate_per_sec(&self) -> f64 {
        let r = &self.funds.payee.rate;
        r.requests_per_unit as f64 * 1e6 / r.period_micros() as f64
    }

    /// The fill interval for this rule: whole seconds, long enough that a share has `STEPS`
    /// steps per interval at the rule's rate (1 s for 100/s and above).
    pub(super) fn fill_interval(&self) -> u32 {
        let secs = (STEPS / self.rate_per_sec().max(1e-9)).ceil();
        secs.clamp(1.0, f64::from(86_400u32)) as u32
    }

    pub(super) fn min_rate(&self) -> f64 {
        1.0 / f64::from(self.fill_interval())
    }

    /// A token bucket refilling at about `rate` per second, holding `BUCKET_SECS` of it (at
    /// least one token, at most the rule's burst): each new strategy costs its size again.
    pub(super) fn token_bucket(&self, rate: f64) -> TokenBucket {
        let interval = self.fill_interval();
        let per_fill = (rate * f64::from(interval))
            .round()
            .clamp(1.0, f64::from(u32::MAX));
        let burst = self.funds.payee.rate.burst.clamp(1, u64::from(u32::MAX)) as f64;
        let max_tokens = (rate * BUCKET_SECS).ceil().clamp(1.0, burst);
        TokenBucket {
            max_tokens: max_tokens as u32,
            tokens_per_fill: per_fill as u32,
            fill_interval_secs: interval,
        }
    }
}
