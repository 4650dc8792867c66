//! A key's lease of rate on this instance (issue 42; the store's side is
//! [`sluice_core::reserve`]): what the store reserved for it, the stock that fills at that rate,
//! and the demand the next ask is sized by.
//!
//! The stock fills from when the grant reached this instance until the call's send time plus the
//! ttl, and stops at the send time of the next call: both inside the store's own window, so what
//! it fills is never more than the store kept back from the bucket's refill.

use sluice_core::bucket::Rate;
use sluice_core::reserve;

/// Tokens a second a stock may hold beyond: one second of its reserved rate (at least one token).
/// Beyond it what fills is dropped: under the limit the store's bucket is full anyway, and over
/// it every stock is spent before it fills.
const STOCK_SECONDS: f64 = 1.0;

/// The least demand a lease of rate is asked for, as the stock it makes (tokens): below it a
/// stock of one token is full between most requests and empty at the next, so what fills is
/// given back more often than it is spent, and the slice costs as many calls as with token
/// leases (1 000 sidecars at 80% of 100/s, 0.08 a second each: 17% of requests denied with
/// reservations, none with token leases; simulated).
const MIN_STOCK: f64 = 2.0;

/// Demand is measured over at least this long (µs), so one request a round trip after the first
/// lease does not read as thousands a second.
const MEASURE_MICROS: u64 = 1_000_000;

/// A measurement also waits for this many hits (or [`MEASURE_LONGEST`]): a Poisson count's
/// relative error is `1/√n`, and a thin slice read from two hits asks for many times its
/// demand. 1 000 sidecars starved at 0.4 a second each, with two hits in a second read as 2 a
/// second: a few dozen reserved 2 a second each, dropped most of it while they waited for
/// their turn, and the fleet got 65% of `L` for 100 s (simulated). With 8, a slice of 0.4 a
/// second reads as 2 about once in 3 000 measurements.
const MEASURE_HITS: u64 = 8;

/// The longest a measurement waits for [`MEASURE_HITS`] (µs): a slice this thin is below
/// [`MIN_STOCK`] whatever it saw.
const MEASURE_LONGEST: u64 = 8_000_000;

/// Asks are this much above the measured demand. 1: a stock's ups and downs are the store's
/// (what a full stock drops is rate lost to every sidecar). 1.2, with every call losing the
/// fraction of a token filled so far, put a fleet at 80% of `L` on all of the reservable rate;
/// not measured again since.
pub const HEADROOM: f64 = 1.0;

/// One key's lease of rate, in its state's rare part (`Rare::rate_lease`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RateLease {
    /// Thousandths of a token per period reserved (0: none).
    pub per_mille: u64,
    /// The stock has filled up to here (engine clock, µs).
    pub filled_to: u64,
    /// It fills until here: the last call's send time plus its ttl, or the next call's send
    /// time once that call is sent.
    pub until: u64,
    /// The last call's send time plus its ttl, never cut: where the reservation the store holds
    /// ends at the earliest, on this instance's clock.
    pub ends: u64,
    /// The ttl of the reservation (renewed before its last quarter).
    pub ttl: u64,
    /// A fraction of a token filled, not yet whole.
    pub carry: f64,
    /// Hits seen (spent and denied) since `counted_from`.
    pub seen: u64,
    /// Where the current measurement began.
    pub counted_from: u64,
    /// Smoothed demand, tokens a second (0: none measured yet).
    pub demand: f64,
    /// What the last call asked for (thousandths of a token per period).
    pub asked: u64,
    /// Whole tokens filled while the stock was full, not yet given back to the store. Dropped,
    /// they were rate no sidecar got: at 128 sidecars on 80 a second, half of what filled
    /// (stocks of one token) in the simulator, and the store's bucket ran dry.
    pub dropped: u64,
}

impl RateLease {
    /// A key's first lease of rate: demand counted from `now`, nothing reserved yet.
    pub fn starting(now: u64) -> Self {
        Self {
            counted_from: now,
            ..Self::default()
        }
    }

    /// Fills `lease` (the instance's tokens of the key) up to `now`, at most to the stock's cap;
    /// whole tokens beyond it are kept aside to give back to the store with the next call.
    pub fn fill(&mut self, rate: &Rate, lease: &mut u64, now: u64) {
        let to = now.min(self.until);
        if self.per_mille == 0 || to <= self.filled_to {
            return;
        }
        let added = reserve::filled(rate, self.per_mille, to - self.filled_to) + self.carry;
        self.filled_to = to;
        let whole = added.floor();
        self.carry = added - whole;
        let whole = whole as u64;
        let kept = whole.min(self.cap(rate).saturating_sub(*lease));
        *lease += kept;
        self.dropped = self.dropped.saturating_add(whole - kept);
    }

    /// The most the stock fills to: [`STOCK_SECONDS`] of the reserved rate, at least a token.
    fn cap(&self, rate: &Rate) -> u64 {
        let per_sec = reserve::filled(rate, self.per_mille, 1_000_000);
        ((per_sec * STOCK_SECONDS).ceil() as u64).max(1)
    }

    /// A call is sent at `now`: the stock stops filling then (the store ends the reservation at
    /// its own now, which is later). `seen` hits since the last call count toward the demand.
    /// Returns the tokens to give back with it (lost if the call fails: stricter, never looser).
    pub fn sending(&mut self, seen: u64, now: u64) -> u64 {
        self.until = self.until.min(now);
        self.seen = self.seen.saturating_add(seen);
        let span = now.saturating_sub(self.counted_from);
        if span >= MEASURE_MICROS && (self.seen >= MEASURE_HITS || span >= MEASURE_LONGEST) {
            let sample = self.seen as f64 * 1e6 / span as f64;
            self.demand = if self.demand == 0.0 {
                sample
            } else {
                0.5 * self.demand + 0.5 * sample
            };
            self.seen = 0;
            self.counted_from = now;
        }
        std::mem::take(&mut self.dropped)
    }

    /// What to ask for: the measured demand and [`HEADROOM`], in thousandths of a token per
    /// period of `rate`; nothing before a whole measurement ([`MEASURE_HITS`]).
    pub fn ask(&mut self, rate: &Rate) -> u64 {
        let demand = self.demand;
        // A slice thinner than a stock of MIN_STOCK tokens leases tokens instead (see there).
        if demand * STOCK_SECONDS < MIN_STOCK {
            self.asked = 0;
            return 0;
        }
        let period_secs = rate.period_micros() as f64 / 1e6;
        self.asked = (demand * HEADROOM * period_secs * reserve::PER_MILLE as f64).ceil() as u64;
        self.asked
    }

    /// The store answered a call sent at `sent`, at `arrived`: the stock fills at `per_mille`
    /// from the arrival until `sent + ttl`. The fraction of a token filled so far is kept (it
    /// was filled inside the old reservation's window; dropped at every call, it cost a
    /// starved key's two sidecars 6 tokens a second in the simulator).
    ///
    /// The round trip between `sent` and `arrived` fills too, at the lesser of the old and the
    /// new rate, up to where either ends: at any moment of it the store held the old
    /// reservation (before it took the call) or the new one (after), so that rate was kept from
    /// its refill. Unfilled, every renewal lost `R·RTT`: a starved key's 2 sidecars settled at
    /// 99.2% of `L` with a 1 ms round trip and 97.5% with 5 ms (simulated), 100% with tokens.
    pub fn granted(&mut self, rate: &Rate, per_mille: u64, sent: u64, arrived: u64, ttl: u64) {
        let ends = sent.saturating_add(ttl);
        // From where the stock has filled to, if later: a decision's `sent` (its own start) can
        // be before the previous call's answer, which it waited for, and the stock filled from
        // that answer on (counted twice, 2 sidecars at 100% went 1.5 tokens over B + L·t).
        let from = sent.max(self.filled_to);
        let gap_end = arrived.min(self.ends).min(ends);
        if self.per_mille > 0 && per_mille > 0 && gap_end > from {
            self.carry += reserve::filled(rate, self.per_mille.min(per_mille), gap_end - from);
        }
        self.per_mille = per_mille;
        self.filled_to = arrived;
        self.until = ends;
        self.ends = ends;
        self.ttl = ttl;
    }

    /// Whether to renew: the reservation is in its last quarter (or over while it had one), its
    /// stock dropped a stock's worth (at least 2 tokens) that the renewal gives back, or
    /// the demand seen since the last measurement (`unsent`: hits since the last call) is
    /// clearly not what the last ask was sized for: more than three standard deviations of a
    /// Poisson count away (and 2 hits), over at least a second. Noise on a thin slice then
    /// costs no call; a slice that doubles is renewed within about a second.
    pub fn due(&self, rate: &Rate, now: u64, unsent: u64) -> bool {
        if self.per_mille == 0 {
            return false;
        }
        if now.saturating_add(self.ttl / 4) >= self.until || self.dropped >= self.cap(rate).max(2) {
            return true;
        }
        let span = now.saturating_sub(self.counted_from);
        if span < MEASURE_MICROS {
            return false;
        }
        let seen = self.seen.saturating_add(unsent) as f64;
        let expected = reserve::filled(rate, self.asked, span) / HEADROOM;
        (seen - expected).abs() > 3.0 * expected.sqrt() + 2.0
    }

    /// Whether the store keeps this holder's reservation: a grant, or an ask granted nothing
    /// (the store reserves from slack only, `sluice_core::reserve::reservable`). An ask left in
    /// the store counts toward every share and toward the sum that marks a key starved until
    /// it lapses (a pod that left: up to the ttl), so it is ended as a grant is.
    pub fn recorded(&self) -> bool {
        self.per_mille > 0 || self.asked > 0
    }

    /// Whether a reservation fills the stock now.
    pub fn live(&self, now: u64) -> bool {
        self.per_mille > 0 && now < self.until
    }
}

/// A key's state and its lease of rate (in the boxed rare part: most keys have none).
impl super::LeaseState {
    /// Fills the lease from a lease of rate's stock up to `now` (nothing without one).
    pub fn fill(&mut self, rate: &Rate, now: u64) {
        if let Some(rare) = self.rare.as_deref_mut()
            && let Some(r) = rare.rate_lease.as_mut()
        {
            r.fill(rate, &mut self.lease, now);
        }
    }

    /// Ends this key's lease of rate, if the store keeps one for it: the stock stops filling
    /// now. Returns the tokens it kept aside to give back ([`RateLease::dropped`]).
    pub fn end_rate_lease(&mut self) -> Option<u64> {
        let lease = self.rare.as_deref_mut()?.rate_lease.take()?;
        lease.recorded().then_some(lease.dropped)
    }

    /// Whether the store keeps a reservation for this key on this instance, to be ended when
    /// the key goes idle or its pod leaves ([`RateLease::recorded`]).
    pub fn rate_lease_recorded(&self) -> bool {
        self.rare()
            .rate_lease
            .as_ref()
            .is_some_and(RateLease::recorded)
    }

    /// Whether this key has a lease of rate (filling now or lapsed), which ending would tell
    /// the store about.
    pub fn has_rate_lease(&self) -> bool {
        self.rare()
            .rate_lease
            .as_ref()
            .is_some_and(|r| r.per_mille > 0)
    }

    /// Whether a lease of rate fills this key's stock now.
    pub fn rate_leased(&self, now: u64) -> bool {
        self.rare().rate_lease.as_ref().is_some_and(|r| r.live(now))
    }

    /// Whether this key's lease of rate is due for renewal ([`RateLease::due`]).
    pub fn rate_lease_due(&self, rate: &Rate, now: u64) -> bool {
        let unsent = self.seen_since_lease();
        self.rare()
            .rate_lease
            .as_ref()
            .is_some_and(|r| r.due(rate, now, unsent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::Unit;

    /// The stock fills at the reserved rate only inside its window, whole tokens at a time,
    /// capped at a second of the rate, and stops at the next call's send time.
    #[test]
    fn the_stock_fills_at_the_reserved_rate_inside_its_window() {
        let rate = Rate::per_unit(100, Unit::Second);
        let mut r = RateLease::starting(0);
        // 10 a second, answered 1 ms after being sent at 0, for 10 s.
        r.granted(&rate, 10_000, 0, 1_000, 10_000_000);
        let mut lease = 0;
        r.fill(&rate, &mut lease, 500_000);
        assert_eq!(lease, 4, "4.99 tokens filled in 499 ms");
        r.fill(&rate, &mut lease, 60_000_000);
        assert_eq!(lease, 10, "capped at a second of the rate");
        assert!(
            r.due(&rate, 9_000_000, 0),
            "a stock's worth dropped: renew to give it back"
        );
        lease = 0;
        assert_eq!(
            r.sending(0, 20_000_000),
            89,
            "95 more filled by 10 s, 6 kept"
        );
        r.fill(&rate, &mut lease, 30_000_000);
        assert_eq!(lease, 0, "nothing after the window");
        assert!(r.due(&rate, 30_000_000, 0) && !r.live(30_000_000));
    }

    /// A renewal's round trip fills at the lesser of the old and the new rate, up to where the
    /// old reservation ends; a first grant, a renewal after the old one ended, or a grant of 0
    /// fills nothing before the answer.
    #[test]
    fn a_renewal_fills_its_round_trip_at_the_lesser_rate() {
        let rate = Rate::per_unit(100, Unit::Second);
        let mut r = RateLease::starting(0);
        r.granted(&rate, 80_000, 0, 0, 10_000_000);
        assert_eq!(r.carry, 0.0, "a first grant: nothing before its answer");
        // (sent, answered, granted, carry gained, why); every ttl 10 s.
        let renewals = [
            (
                1_000_000,
                1_050_000,
                10_000,
                0.5,
                "50 ms at the lesser 10 a second",
            ),
            (
                10_990_000,
                11_040_000,
                40_000,
                0.1,
                "10 ms: the old one ended at 11.0 s",
            ),
            (
                30_000_000,
                30_050_000,
                40_000,
                0.0,
                "the old one ended at 20.99 s",
            ),
            (31_000_000, 31_050_000, 0, 0.0, "given back: nothing"),
        ];
        for (sent, answered, granted, gained, why) in renewals {
            r.carry = 0.0;
            r.sending(0, sent);
            r.granted(&rate, granted, sent, answered, 10_000_000);
            assert!((r.carry - gained).abs() < 1e-9, "{why}: {}", r.carry);
        }
    }

    /// Demand is measured over at least a second and [`MEASURE_HITS`] hits: three requests a
    /// millisecond after the first lease ask for nothing, not three thousand a second; nor do
    /// two in half a second (a thin slice's noise); a slice under [`MIN_STOCK`] a second asks
    /// for nothing (it leases tokens).
    #[test]
    fn demand_is_measured_over_at_least_a_second_and_a_few_hits() {
        let rate = Rate::per_unit(100, Unit::Second);
        let with_headroom = |per_sec: f64| (per_sec * 1_000.0 * HEADROOM).ceil() as u64;
        let mut r = RateLease::starting(0);
        r.sending(3, 1_000);
        assert_eq!(r.ask(&rate), 0, "3 seen in a millisecond: not yet measured");
        r.sending(47, 2_000_000);
        assert!((r.demand - 25.0).abs() < 0.1, "{}", r.demand);
        assert_eq!(r.ask(&rate), with_headroom(25.0));
        let mut thin = RateLease::starting(0);
        thin.sending(2, 1_500_000);
        assert_eq!(thin.ask(&rate), 0, "two hits are not a measurement");
        thin.sending(1, 4_000_000);
        assert_eq!(thin.ask(&rate), 0, "nor three in 4 s");
        thin.sending(1, 8_000_000);
        assert!((thin.demand - 0.5).abs() < 0.01, "{}", thin.demand);
        assert_eq!(
            thin.ask(&rate),
            0,
            "half a token a second: tokens, not a reservation"
        );
    }
}
