//! RLQS assignments as prepaid leases: what a token-bucket assignment lets Envoy admit, and so
//! what it must cost the global bucket before it is sent.
//!
//! Envoy's rate limit quota filter (1.40, `global_client_impl.cc`) keeps, per bucket, a token
//! bucket built from the last `token_bucket` strategy it received: it starts **full**
//! (`max_tokens`), refills continuously at `tokens_per_fill / fill_interval` (whole seconds), and is
//! **kept** when a response repeats an equal strategy (Envoy compares `max_tokens`,
//! `tokens_per_fill` and only the `nanos` of `fill_interval`), else replaced by a new full one.
//! Every response restarts the assignment's expiry timer at `assignment_time_to_live` (whole
//! seconds) from when Envoy *receives* it; once expired, the bucket falls back and a later
//! strategy starts a new full bucket.
//!
//! So by time `t` an assignment can admit at most `max_tokens + rate × (t − start)`. sluice pays
//! the global bucket for all of it up to the assignment's expiry before sending it ([`Prepaid`]):
//! a new strategy costs `max_tokens + rate × (ttl + MARGIN)`; repeating it costs only the refill
//! between the old paid expiry and the new one; replacing it gives back the refill paid past the
//! moment the replacement surely arrived. `MARGIN` covers the time between sending a response and
//! Envoy applying it: a response delayed longer than that could let Envoy refill unpaid for the
//! difference (a localhost stream delivers in well under a millisecond).

mod funds;
mod share;

pub use funds::Funds;
pub use share::{NEW_TTL, Reported, Share, Step, TICK, TTL};

/// Time allowed between sluice sending a response and Envoy applying it, in microseconds.
pub const MARGIN_MICROS: u64 = 250_000;

const MICROS_PER_SEC: f64 = 1_000_000.0;

/// A `token_bucket` strategy as sluice sends it (whole-second fill interval: Envoy 1.40 turns a
/// sub-second one into a division by zero, which fails open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenBucket {
    /// Envoy's bucket size; also what a new bucket starts with.
    pub max_tokens: u32,
    /// Tokens added per fill interval (continuously, in Envoy).
    pub tokens_per_fill: u32,
    /// Whole seconds, at least 1.
    pub fill_interval_secs: u32,
}

impl TokenBucket {
    /// Tokens per second.
    pub fn rate(&self) -> f64 {
        f64::from(self.tokens_per_fill) / f64::from(self.fill_interval_secs.max(1))
    }

    /// Whether Envoy would keep its existing bucket for `other` (it ignores the seconds of the
    /// fill interval when comparing).
    pub fn envoy_equal(&self, other: &TokenBucket) -> bool {
        self.max_tokens == other.max_tokens && self.tokens_per_fill == other.tokens_per_fill
    }
}

/// What an assignment tells Envoy to do with a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// `blanket_rule: DENY_ALL`: admits nothing, costs nothing.
    DenyAll,
    /// `blanket_rule: ALLOW_ALL`: only a rule's `fallback: allow` while the store is down; unpaid.
    AllowAll,
    /// `token_bucket`.
    Bucket(TokenBucket),
}

/// The price of sending a strategy now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quote {
    /// Tokens the global bucket must have paid for it (fractional: refills are continuous).
    pub cost: f64,
    /// Tokens paid for the previous strategy that Envoy can no longer admit once this one
    /// arrives: reusable.
    pub credit: f64,
    /// Whether Envoy keeps its current bucket (a renewal).
    pub renewal: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Sent {
    strategy: Strategy,
    sent_at: u64,
    ttl_secs: u32,
    /// Until when Envoy's admissions under `strategy` are paid for.
    paid_until: u64,
}

/// One Envoy bucket's assignment as sluice has paid for it (times in the engine clock's
/// microseconds).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prepaid {
    last: Option<Sent>,
}

impl Prepaid {
    /// The strategy last sent.
    pub fn strategy(&self) -> Option<Strategy> {
        self.last.map(|s| s.strategy)
    }

    /// The TTL last sent, in seconds.
    pub fn ttl_secs(&self) -> u32 {
        self.last.map_or(0, |s| s.ttl_secs)
    }

    /// Whether Envoy surely still applies the last strategy when a response sent at `now`
    /// arrives (it cannot have expired in between).
    pub fn live(&self, now: u64) -> bool {
        self.last.is_some_and(|s| {
            now.saturating_add(MARGIN_MICROS) < s.sent_at.saturating_add(secs(s.ttl_secs))
        })
    }

    /// `strategy`, changed if needed so that Envoy cannot mistake it for the last one when it is
    /// not (same size and fill, other interval: Envoy would keep the old rate).
    pub fn distinct(&self, strategy: Strategy) -> Strategy {
        match (self.strategy(), strategy) {
            (Some(Strategy::Bucket(old)), Strategy::Bucket(mut new))
                if old != new && old.envoy_equal(&new) =>
            {
                new.max_tokens = new.max_tokens.saturating_add(1);
                Strategy::Bucket(new)
            }
            _ => strategy,
        }
    }

    /// What sending `strategy` with `ttl_secs` at `now` costs.
    pub fn quote(&self, strategy: Strategy, ttl_secs: u32, now: u64) -> Quote {
        let new_paid = now
            .saturating_add(secs(ttl_secs))
            .saturating_add(MARGIN_MICROS);
        if let (Some(last), Strategy::Bucket(tb)) = (self.last, strategy)
            && last.strategy == strategy
            && self.live(now)
        {
            return Quote {
                cost: tb.rate() * span(last.paid_until, new_paid),
                credit: 0.0,
                renewal: true,
            };
        }
        let credit = match self.last {
            Some(Sent {
                strategy: Strategy::Bucket(old),
                paid_until,
                ..
            }) => old.rate() * span(now.saturating_add(MARGIN_MICROS), paid_until),
            _ => 0.0,
        };
        let cost = match strategy {
            Strategy::Bucket(tb) => f64::from(tb.max_tokens) + tb.rate() * span(now, new_paid),
            Strategy::DenyAll | Strategy::AllowAll => 0.0,
        };
        Quote {
            cost,
            credit,
            renewal: false,
        }
    }

    /// Records that `strategy` was sent at `now` (after paying its [`quote`](Self::quote)).
    pub fn commit(&mut self, strategy: Strategy, ttl_secs: u32, now: u64) {
        let new_paid = now
            .saturating_add(secs(ttl_secs))
            .saturating_add(MARGIN_MICROS);
        let renewal = self.quote(strategy, ttl_secs, now).renewal;
        let paid_until = match self.last {
            Some(last) if renewal => last.paid_until.max(new_paid),
            _ => new_paid,
        };
        self.last = Some(Sent {
            strategy,
            sent_at: now,
            ttl_secs,
            paid_until,
        });
    }

    /// Tokens paid for refills Envoy can no longer admit once an abandon sent at `now` arrives.
    pub fn credit_on_abandon(&self, now: u64) -> f64 {
        self.quote(Strategy::DenyAll, 0, now).credit
    }
}

/// The max-min fair share of `capacity` (tokens per second) for a client wanting `mine`, among
/// every client's demand `all` (`mine` included), each wanted with `headroom`: wants below an
/// even split are met in full and what they leave is split evenly among the rest (Doorman's fair
/// share). When every want fits, each also gets an even part of what is left, so a client far
/// from the limit is not held to the rate it last reported.
pub fn fair_share(capacity: f64, mine: f64, all: &[f64], headroom: f64) -> f64 {
    let want = mine * headroom;
    let total: f64 = all.iter().map(|d| d * headroom).sum();
    if total <= capacity {
        return want + (capacity - total) / all.len().max(1) as f64;
    }
    let mut sorted: Vec<f64> = all.iter().map(|d| d * headroom).collect();
    sorted.sort_by(f64::total_cmp);
    let (mut left, mut n) = (capacity, sorted.len());
    for w in sorted {
        let level = left / n as f64;
        if w > level {
            return want.min(level);
        }
        left -= w;
        n -= 1;
    }
    want
}

fn secs(s: u32) -> u64 {
    u64::from(s) * 1_000_000
}

/// Seconds from `from` to `to` (0 if `to` is earlier).
fn span(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / MICROS_PER_SEC
}

#[cfg(test)]
mod tests;
