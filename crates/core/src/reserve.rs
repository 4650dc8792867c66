//! Leases of rate (issue 42): a global token bucket's rate `L` shared out as reservations.
//!
//! A holder (one sluice instance) reserves `r` of `L` until an expiry. While reservations `R`
//! are live the global bucket refills at `L − R` (piecewise: `R` falls at each expiry), and
//! each holder fills a stock of its own at its `r`, from when the grant reaches it until its
//! own send time plus the ttl: a window inside the store's `[grant, grant + ttl]` whatever the
//! two clocks read, since only the ttl (a duration) crosses the wire. A renewal ends the old
//! reservation at the store's `now` and the holder stops its old stock at its send time, which
//! is earlier. So what the bucket grants plus what every stock fills is at most
//! `B + ∫(L − R) + ∫R = B + L·t`, whatever the holders ask; the burst never leaves the store.
//!
//! Amounts are in thousandths of a token per period ([`PER_MILLE`]), so a thin slice (a
//! sidecar of a thousand on a limit of 100 a second) is still a reservation. `lease.lua` and
//! `bucket.lua` keep the same state in the bucket's hash and compute the same numbers, bit for
//! bit (the Lua = Rust property suite, `crates/redis/tests/conformance_props.rs`).

use crate::rate::{Algorithm, BucketState, Rate};

/// Reservations are counted in thousandths of a token per period.
pub const PER_MILLE: u64 = 1_000;

/// Of `L`, at most this many thousandths are reserved: the rest always refills the bucket, so
/// the requests a stock cannot pay (a slice's ups and downs, a sidecar that just joined) find
/// tokens in the store, and what stocks drop when full (their reservation outran their demand)
/// is never all of the rate.
pub const RESERVABLE_PER_MILLE: u64 = 800;

/// Asks summing to this many thousandths of `L` (one and a half times it) mark a starved key:
/// its holders spend all their stocks fill, so reserving takes nothing another would have used,
/// and [`reservable`] grants the whole reservable part whatever the bucket holds.
pub const STARVED_ASKS_PER_MILLE: u64 = 1_500;

/// The longest a reservation lasts (an hour): a holder renews long before, and `now + ttl`
/// stays far below 2^53 µs, where Lua's numbers stop being exact.
pub const MAX_TTL_MICROS: u64 = 3_600_000_000;

/// Rates whose `L·1000` reaches this are not reserved (every grant is 0): Lua's numbers are
/// exact integers only below 2^53.
const EXACT_BELOW: f64 = 9_007_199_254_740_992.0;

/// One holder's reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The holder (an instance's number).
    pub holder: u64,
    /// Thousandths of a token per period granted.
    pub granted: u64,
    /// Thousandths of a token per period asked for (proportional shares weigh by it).
    pub asked: u64,
    /// When it lapses, by the store's clock (µs).
    pub until: u64,
}

/// The live reservations of one global bucket, and their sums.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reservations {
    held: Vec<Held>,
    /// `R`: every live grant, summed.
    granted: u64,
    /// Every live ask, summed.
    asked: u64,
    /// A time no reservation lapses after (`bucket.lua`'s `z`): the latest expiry granted since
    /// the reservations were last empty. An upper bound, not the latest live expiry: a renewal
    /// to an earlier end leaves it where it was, so the Lua never reads every holder to answer
    /// it. What a lease answer tells a sidecar `R` holds until ([`ends_in`](Self::ends_in)).
    end: Option<u64>,
}

impl Reservations {
    /// Whether no holder has a reservation (asked or granted).
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// `R`, in thousandths of a token per period.
    pub fn granted(&self) -> u64 {
        self.granted
    }

    /// `holder`'s reservation, if it has one.
    pub fn held_by(&self, holder: u64) -> Option<&Held> {
        self.held.iter().find(|h| h.holder == holder)
    }

    /// Microseconds from `now` until every reservation has lapsed, at the latest (0: none is
    /// live). Until then the bucket refills at `L − R` or faster; after it, at `L`.
    pub fn ends_in(&self, now: u64) -> u64 {
        if self.held.is_empty() {
            return 0;
        }
        self.end.map_or(0, |end| end.saturating_sub(now))
    }

    /// When the last reservation lapses (`None`: there is none).
    pub fn latest_until(&self) -> Option<u64> {
        self.held.iter().map(|h| h.until).max()
    }

    /// Brings `bucket` (a token bucket of `rate`) up to `now`: refilled at `L − R` up to each
    /// expiry in turn, where that reservation goes, then to `now`. With no reservation this is
    /// [`BucketState::refill`] itself, so a bucket that never had one refills as before.
    pub fn advance(&mut self, bucket: &mut BucketState, rate: &Rate, now: u64) {
        let mut lapsed: Vec<Held> = self
            .held
            .iter()
            .filter(|h| h.until <= now)
            .copied()
            .collect();
        lapsed.sort_by_key(|h| h.until);
        for h in lapsed {
            refill_reduced(bucket, rate, self.granted, h.until);
            self.granted -= h.granted;
            self.asked -= h.asked;
            self.held.retain(|x| x.holder != h.holder);
        }
        if self.held.is_empty() {
            self.end = None;
        }
        refill_reduced(bucket, rate, self.granted, now);
    }

    /// Replaces `holder`'s reservation (after [`advance`](Self::advance) to `now`) by one of
    /// `asked` thousandths of a token per period for `ttl` µs (at most [`MAX_TTL_MICROS`]);
    /// returns what is granted: `min(asked, C − R of the others, C·asked / W)` with `W` every
    /// live ask (this one's included) when they are more than `C`, so shares follow demand once
    /// every holder has renewed (each against the `C` of its own call), and `C` what may be
    /// reserved now ([`reservable`]: the reservable part of `L` while the bucket, `tokens`
    /// after this call's take, shows slack or the asks show a starved key; less as it drains).
    /// An ask of 0 (or a ttl of 0) gives the reservation back. Only token buckets are
    /// reserved; other algorithms get 0 and keep nothing.
    pub fn reserve(
        &mut self,
        rate: &Rate,
        holder: u64,
        asked: u64,
        ttl: u64,
        now: u64,
        tokens: f64,
    ) -> u64 {
        if let Some(at) = self.held.iter().position(|h| h.holder == holder) {
            let old = self.held.swap_remove(at);
            self.granted -= old.granted;
            self.asked -= old.asked;
            if self.held.is_empty() {
                self.end = None;
            }
        }
        let most = rate.requests_per_unit as f64 * RESERVABLE_PER_MILLE as f64;
        if asked == 0
            || ttl == 0
            || rate.algorithm != Algorithm::TokenBucket
            || most == 0.0
            || most >= EXACT_BELOW
        {
            return 0;
        }
        // Whether the asks mark a starved key counts this one as asked: one sidecar asking for
        // more than may be reserved is a key over its limit (a hot pod among 1 000).
        let total = reservable(rate, tokens, self.asked as f64 + asked as f64);
        let asked = asked.min(most as u64);
        let all_asked = self.asked + asked;
        let fair = if all_asked > total {
            (total as f64 * asked as f64 / all_asked as f64).floor() as u64
        } else {
            asked
        };
        let granted = asked.min(fair).min(total.saturating_sub(self.granted));
        let until = now.saturating_add(ttl.min(MAX_TTL_MICROS));
        self.held.push(Held {
            holder,
            granted,
            asked,
            until,
        });
        self.end = Some(self.end.map_or(until, |end| end.max(until)));
        self.granted += granted;
        self.asked = all_asked;
        granted
    }
}

/// What may be reserved in all (thousandths of a token per period), when the bucket holds
/// `tokens` (after the call's own take) and the live asks sum to `asks` (the call's own as it
/// asked, before it is capped at the reservable part; in `f64`, as `bucket.lua` adds): the
/// reservable part of `L` ([`RESERVABLE_PER_MILLE`]) while the bucket holds three quarters of
/// its burst or more, none below a quarter, in proportion between; all of it while the asks
/// mark a starved key ([`STARVED_ASKS_PER_MILLE`]).
///
/// Why: a stock is spent only by its own holder. Under the limit the bucket is full and its
/// refill would overflow, so what is reserved costs no one anything. At the limit the burst is
/// what absorbs the ups and downs of every sidecar's demand; reserved, most of it sat in 32
/// stocks of about 3 tokens while the bucket emptied, and 1.8% of a fleet's requests at 100% of
/// `L` were denied that an exact limiter admits (0.3% now, with token leases' store calls there:
/// simulated, `loadtest/RESULTS.md`). Over the limit every stock is spent as it fills, so a
/// starved key keeps its reservations (a hot pod among 128 starved sidecars: 23 calls a second
/// with them, 58 without).
pub fn reservable(rate: &Rate, tokens: f64, asks: f64) -> u64 {
    let most = rate.requests_per_unit as f64 * RESERVABLE_PER_MILLE as f64;
    if asks >= rate.requests_per_unit as f64 * STARVED_ASKS_PER_MILLE as f64 {
        return most as u64;
    }
    if rate.burst == 0 {
        return 0;
    }
    let burst = rate.burst as f64;
    let share = ((4.0 * tokens - burst) / (2.0 * burst)).clamp(0.0, 1.0);
    (most * share).floor() as u64
}

/// Whether a bucket of `rate` holding `tokens` shows slack: three quarters of its burst or
/// more, where [`reservable`] grants the whole reservable part. Below it the key nears its
/// limit, and the engine changes what it does there: a new, empty stock gives back the
/// fraction of a token it filled, and the requests waiting for a key's call no longer ask for
/// all of them in one call (`sluice_engine`'s `RateLease::sending` and `waiting::counts`).
pub fn slack(rate: &Rate, tokens: f64) -> bool {
    4.0 * tokens >= 3.0 * rate.burst as f64
}

/// Refills `bucket` to `to` at `L − R` (`reserved` = `R`, thousandths); at `L` itself, with
/// [`Rate::refill`]'s arithmetic, when nothing is reserved. A `to` before the last update adds
/// nothing (clock skew), as [`BucketState::refill`].
pub fn refill_reduced(bucket: &mut BucketState, rate: &Rate, reserved: u64, to: u64) {
    let elapsed = to.saturating_sub(bucket.updated_micros);
    bucket.tokens = if reserved == 0 {
        rate.refill(bucket.tokens, elapsed)
    } else {
        let per_mille = rate.requests_per_unit as f64 * PER_MILLE as f64 - reserved as f64;
        let added = elapsed as f64 * per_mille / (rate.period_micros() as f64 * PER_MILLE as f64);
        (bucket.tokens + added).min(rate.burst as f64)
    };
    bucket.updated_micros = bucket.updated_micros.max(to);
}

/// Tokens a holder's stock fills with at `granted` thousandths per period of `rate` over
/// `micros` (fractional).
pub fn filled(rate: &Rate, granted: u64, micros: u64) -> f64 {
    micros as f64 * granted as f64 / (rate.period_micros() as f64 * PER_MILLE as f64)
}

#[cfg(test)]
mod tests;
