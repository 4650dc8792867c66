//! How large a bucket's share is: the fair share of the rule's rate from everyone's demand, the
//! entitlement that bounds its leases, and the token bucket Envoy is sent for a rate.

use super::super::{MARGIN_MICROS, TokenBucket, fair_share};
use super::{CONTENDED_LOOKAHEAD, CONTENDED_TTL, LOOKAHEAD, MIN_STEP, NEW_TTL, Share, TTL};

/// A stream may lease this much more than its fair share, so that timing jitter (a late tick, a
/// lease rounded down) does not starve a share it is entitled to.
const ENTITLEMENT_SLACK: f64 = 1.25;

/// The part of a contended rule's rate that shares may use in all: a little is left for what
/// changes cost (each new strategy restarts Envoy's bucket full) and for a renewal a tick late.
const CONTENDED: f64 = 0.99;

/// Envoy's bucket holds this many seconds of its share.
const BUCKET_SECS: f64 = 0.2;

/// How far above its fair share a contended share is kept (each change restarts Envoy's bucket).
const OVER_FAIR: f64 = 1.02;

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
        // Contended, a share a little short of its fair one is a loss for as long as it runs.
        let step = if self.contended() {
            OVER_FAIR
        } else {
            MIN_STEP
        };
        let grow = want >= have * step && (self.saturated || self.demand.is_none());
        // A contended rule's shares sum to what it refills: one kept above its fair share
        // takes what another's renewal needs.
        let shrink = want < have * SHRINK_BELOW || (self.contended() && have > want * OVER_FAIR);
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
            None => (max * CONTENDED / self.sharers(instances)).max(self.min_rate()),
        }
    }

    /// Whether the rule is starved: Envoy denies, everyone's demand (with headroom) exceeds what
    /// shares may use, or nothing is known yet. Then every second of a share paid ahead is a
    /// second of the rule's rate that no one admits, so TTLs and leases stay short.
    pub(super) fn contended(&self) -> bool {
        let Some(d) = self.demand else {
            return true;
        };
        let everyone = self.everyone.as_deref().unwrap_or(std::slice::from_ref(&d));
        self.saturated || everyone.iter().sum::<f64>() * HEADROOM > self.rate_per_sec() * CONTENDED
    }

    /// The longest TTL to send now: short while contended.
    pub(super) fn max_ttl(&self) -> u32 {
        if self.contended() { CONTENDED_TTL } else { TTL }
    }

    /// The TTL of a new strategy.
    pub(super) fn new_ttl(&self) -> u32 {
        NEW_TTL.min(self.max_ttl())
    }

    /// Seconds of the share to lease ahead.
    pub(super) fn lookahead(&self) -> f64 {
        if self.contended() {
            CONTENDED_LOOKAHEAD
        } else {
            LOOKAHEAD
        }
    }

    /// How many share the bucket: the live sidecars, or the clients that reported demand.
    pub(super) fn sharers(&self, instances: u64) -> f64 {
        let reported = self.everyone.as_ref().map_or(0, Vec::len);
        instances.max(reported as u64).max(1) as f64
    }

    /// Adds what this stream may lease since the last time: its fair share per second, kept up
    /// to its share of the burst or a second of its share and what is leased ahead. So no
    /// sidecar leases another's share away over time (the store grants whoever asks first);
    /// within a tick, `Share::next` asks beyond what it cannot do without only from what the
    /// bucket had left.
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
        let cap = burst_share.max(rate * (self.lookahead() + 1.0));
        self.entitled = (self.entitled + rate * elapsed).min(cap);
    }

    pub(super) fn rate_per_sec(&self) -> f64 {
        self.funds.payee.rate.per_second()
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

    /// About the largest share a new strategy with `ttl` could have that `funds` pay for at
    /// once (its bucket and its refill until the TTL and the margin).
    pub(super) fn affordable(&self, funds: f64, ttl: u32) -> f64 {
        funds / (BUCKET_SECS + f64::from(ttl) + MARGIN_MICROS as f64 / 1e6)
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
