//! Token-bucket math: pure functions of (state, rate, now).
//!
//! A limit of `L` requests per unit `T` with burst `B` refills continuously at `L/T` tokens per
//! microsecond up to `B`. The same arithmetic (f64 tokens, integer microseconds, refill computed as
//! `tokens + elapsed * L / T`) runs in the in-memory store, in local-mode buckets and in the Redis
//! Lua scripts, so every backend agrees to the last bit on the same inputs.
//!
//! The types it works on, [`Rate`], [`Algorithm`] and [`BucketState`], live in `rate.rs` (below
//! this module and [`crate::window`], which both use them) and are re-exported here.

pub use crate::rate::{Algorithm, BucketState, MAX_PERIOD_SECS, Rate};

impl Rate {
    /// The window `now` falls in (its index since the clock's origin); 0 for a token bucket,
    /// which has none.
    pub fn window(&self, now_micros: u64) -> u64 {
        if self.algorithm.is_window() {
            crate::window::window_of(self, now_micros).0
        } else {
            0
        }
    }

    /// Microseconds until a bucket holding `tokens` (as available now) holds `target`, at `now`:
    /// [`micros_until`](Self::micros_until) for a token bucket; for a fixed window, the window's
    /// end; for a sliding window an estimate: the previous window's hits fade out over the
    /// period, at most `L` per period, so the time for `L/T` to free the missing tokens (exact
    /// when the previous window used its whole limit, as under steady overload; too early
    /// otherwise, and a caller asking again then is told again). `None` if it never will.
    pub fn micros_until_at(&self, tokens: f64, target: f64, now_micros: u64) -> Option<u64> {
        match self.algorithm {
            Algorithm::TokenBucket | Algorithm::Concurrency => {
                return self.micros_until(tokens, target);
            }
            _ if tokens >= target => return Some(0),
            _ if target > self.burst as f64 => return None,
            _ => {}
        }
        let window_end = crate::window::until_window_end(self, now_micros);
        if self.algorithm == Algorithm::SlidingWindow && self.burst > 0 {
            let fading =
                ((target - tokens) * self.period_micros() as f64 / self.burst as f64).ceil();
            // Never past the end of the next window, when every hit counted now is forgotten.
            let sure = window_end.saturating_add(self.period_micros());
            return Some((fading as u64).min(sure));
        }
        Some(window_end)
    }

    /// Microseconds until a bucket holding `tokens` (as available now) is full again: for a
    /// fixed window, the window's end; for a sliding window, the end of the next window (when
    /// the hits counted so far stop counting); 0 when full.
    pub fn micros_until_full_at(&self, tokens: f64, now_micros: u64) -> u64 {
        match self.algorithm {
            Algorithm::TokenBucket | Algorithm::Concurrency => self.micros_until_full(tokens),
            _ if tokens >= self.burst as f64 => 0,
            Algorithm::FixedWindow => crate::window::until_window_end(self, now_micros),
            Algorithm::SlidingWindow => crate::window::until_window_end(self, now_micros)
                .saturating_add(self.period_micros()),
        }
    }

    /// Tokens after `tokens` has refilled for `elapsed_micros`, capped at the burst.
    pub fn refill(&self, tokens: f64, elapsed_micros: u64) -> f64 {
        let added =
            elapsed_micros as f64 * self.requests_per_unit as f64 / self.period_micros() as f64;
        (tokens + added).min(self.burst as f64)
    }

    /// Microseconds until a bucket holding `tokens` holds at least `target`; 0 if it already does,
    /// `None` if it never will (a zero rate, or a target above the burst).
    pub fn micros_until(&self, tokens: f64, target: f64) -> Option<u64> {
        if tokens >= target {
            return Some(0);
        }
        if self.requests_per_unit == 0 || target > self.burst as f64 {
            return None;
        }
        let missing = target - tokens;
        let micros = missing * self.period_micros() as f64 / self.requests_per_unit as f64;
        Some(micros.ceil() as u64)
    }

    /// Microseconds until a bucket holding `tokens` is full again (0 when full, or for a zero rate
    /// whose burst is zero).
    pub fn micros_until_full(&self, tokens: f64) -> u64 {
        self.micros_until(tokens, self.burst as f64).unwrap_or(0)
    }
}

impl BucketState {
    /// Brings `tokens` up to `now_micros`: a token bucket refills; a window starts anew when
    /// its window is over. A `now` earlier than the last update (clock skew) adds nothing
    /// rather than removing tokens.
    pub fn refill(&mut self, rate: &Rate, now_micros: u64) {
        if rate.algorithm.is_window() {
            crate::window::shift(self, rate, now_micros);
            return;
        }
        let elapsed = now_micros.saturating_sub(self.updated_micros);
        self.tokens = rate.refill(self.tokens, elapsed);
        self.updated_micros = self.updated_micros.max(now_micros);
    }

    /// Tokens that can be spent at the last update: `tokens`, less a sliding window's weighted
    /// previous hits.
    pub fn available(&self, rate: &Rate) -> f64 {
        crate::window::available(self, rate)
    }

    /// Tokens available at `now`, without changing the bucket.
    pub fn available_at(&self, rate: &Rate, now_micros: u64) -> f64 {
        let mut b = *self;
        b.refill(rate, now_micros);
        b.available(rate)
    }

    /// Refills, then takes `min(want, whole tokens available)`; returns what it took.
    pub fn take_up_to(&mut self, rate: &Rate, now_micros: u64, want: u64) -> u64 {
        self.take_keeping_half(rate, now_micros, want, want)
    }

    /// Refills, then takes up to `want` whole tokens, of which only `least` may leave the
    /// bucket below half its burst: `min(want, whole tokens, max(least, whole tokens above half
    /// the burst))`. A cold lease (tokens taken ahead of demand) takes its extra only from a
    /// bucket far from its limit, so the leases of a fleet never strand the burst. `lease.lua`
    /// computes the same, bit for bit.
    pub fn take_keeping_half(
        &mut self,
        rate: &Rate,
        now_micros: u64,
        want: u64,
        least: u64,
    ) -> u64 {
        self.refill(rate, now_micros);
        let available = self.available(rate);
        let whole = |t: f64| t.floor().max(0.0) as u64;
        let above_half = whole(available - rate.burst as f64 / 2.0);
        let granted = want.min(whole(available)).min(least.max(above_half));
        self.tokens -= granted as f64;
        granted
    }

    /// Refills, then takes exactly `n` tokens if there are that many; returns whether it did.
    pub fn try_take(&mut self, rate: &Rate, now_micros: u64, n: u64) -> bool {
        self.refill(rate, now_micros);
        if self.available(rate) >= n as f64 {
            self.tokens -= n as f64;
            true
        } else {
            false
        }
    }

    /// Refills, then charges `n` tokens whatever is left (usage reported after the fact, which
    /// has happened and must not be lost): the bucket may go into debt, down to `-max_debt`, and
    /// refills out of it. Returns what was charged: `n`, or less only where the debt bound clamps
    /// it (an absurd report cannot lock a key out for longer than `(B + max_debt) / L`). Never
    /// wraps: `n` may be `u64::MAX`.
    pub fn charge(&mut self, rate: &Rate, now_micros: u64, n: u64, max_debt: u64) -> u64 {
        self.refill(rate, now_micros);
        let floor = -(max_debt as f64);
        // What a sliding window's previous hits hold back (0 for the others).
        let held = self.tokens - self.available(rate);
        // Whole tokens that can still be charged before the floor (0 when at or below it).
        let room = (self.tokens - held - floor).floor().max(0.0);
        let charged = if (n as f64) <= room { n } else { room as u64 };
        self.tokens = (self.tokens - charged as f64).max((floor + held).min(self.tokens));
        charged
    }

    /// Refills, then closes window `window` (nothing left in it, debt kept) if it is still the
    /// bucket's current one: a fixed window's denial counted as envoyproxy/ratelimit counts it.
    /// Otherwise (another algorithm, a later window) the bucket is left exactly as it was, not
    /// even refilled, as `close.lua` leaves it: a refill stored here and not there rounds
    /// differently later, near 2^53 tokens (found by the Lua = Rust property suite).
    pub fn close(&mut self, rate: &Rate, now_micros: u64, window: u64) {
        if rate.algorithm != Algorithm::FixedWindow {
            return;
        }
        let mut closed = *self;
        closed.refill(rate, now_micros);
        if rate.window(closed.updated_micros) == window {
            closed.tokens = closed.tokens.min(0.0);
            *self = closed;
        }
    }

    /// Refills, then puts `n` unspent tokens back, capped at the burst. For a window, only into
    /// the window they were taken from (`window`, see [`Rate::window`]): tokens of a window that
    /// is over are not given back, or the new window would get more than `L`.
    pub fn give_back(&mut self, rate: &Rate, now_micros: u64, n: u64, window: u64) {
        self.refill(rate, now_micros);
        if rate.algorithm.is_window() && rate.window(self.updated_micros) != window {
            return;
        }
        self.tokens = (self.tokens + n as f64).min(rate.burst as f64);
    }

    /// Refills, then puts `milli` thousandths of a token back into a token bucket, capped at
    /// the burst (`lease.lua` adds `milli / 1000`, the same `f64`).
    pub fn give_back_milli(&mut self, rate: &Rate, now_micros: u64, milli: u64) {
        self.refill(rate, now_micros);
        self.tokens = (self.tokens + milli as f64 / 1000.0).min(rate.burst as f64);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn close_leaves_other_buckets_exactly_as_they_were() {
        use super::{Algorithm, BucketState, Rate};
        use crate::unit::Unit;
        // The property suite's case: 2^53 tokens of debt, a close a day later, a read a day
        // after that. A refill stored by the close rounded to another f64 than Lua's.
        let mut rate = Rate::per_unit(300_961, Unit::Month);
        rate.unit_multiplier = 27;
        rate.burst = 0;
        let day = 86_400_000_000;
        let mut b = BucketState::full(&rate, 0);
        b.tokens = -(2f64.powi(53));
        let before = b;
        b.close(&rate, day, rate.window(day));
        assert_eq!(
            (b.tokens, b.updated_micros),
            (before.tokens, before.updated_micros)
        );
        let mut fixed = rate;
        fixed.algorithm = Algorithm::FixedWindow;
        fixed.burst = 10;
        let mut w = BucketState::full(&fixed, day);
        w.close(&fixed, day + 1, fixed.window(day) + 1);
        assert_eq!(
            w.tokens, 10.0,
            "a later window than the bucket's is not closed"
        );
        w.close(&fixed, day + 1, fixed.window(day));
        assert_eq!(w.tokens, 0.0);
    }

    use super::*;
    use crate::unit::Unit;
    use proptest::prelude::*;

    const SEC: u64 = 1_000_000;

    /// A cold lease takes beyond `least` only what lies above half the burst, and never less
    /// than `least` where there is that much.
    #[test]
    fn taking_keeping_half_leaves_half_the_burst_but_pays_least() {
        let rate = Rate::per_unit(100, Unit::Second);
        let mut b = BucketState::full(&rate, 0);
        assert_eq!(
            b.take_keeping_half(&rate, 0, 80, 1),
            50,
            "only what is above half"
        );
        assert_eq!(
            b.take_keeping_half(&rate, 0, 80, 1),
            1,
            "below half: `least`"
        );
        assert_eq!(
            b.take_keeping_half(&rate, 0, 80, 60),
            49,
            "`least`, up to what is left"
        );
        assert_eq!(b.take_keeping_half(&rate, 0, 80, 60), 0);
        // 10 ms later: 1 token.
        assert_eq!(b.take_keeping_half(&rate, 10_000, 5, 5), 1);
        let mut full = BucketState::full(&rate, 0);
        assert_eq!(
            full.take_keeping_half(&rate, 0, 30, 30),
            30,
            "least = want: a lease"
        );
        assert_eq!(full.take_keeping_half(&rate, 0, u64::MAX, 0), 20);
    }

    #[test]
    fn starts_full_and_refills_at_the_rate() {
        let rate = Rate::per_unit(10, Unit::Second);
        let mut b = BucketState::full(&rate, 0);
        assert_eq!(b.take_up_to(&rate, 0, 100), 10);
        assert_eq!(b.take_up_to(&rate, 0, 1), 0);
        // 10/s = one token per 100 ms.
        assert_eq!(b.take_up_to(&rate, 99_999, 1), 0);
        assert_eq!(b.take_up_to(&rate, 100_000, 1), 1);
        assert_eq!(rate.micros_until(b.tokens, 1.0), Some(100_000));
        assert_eq!(
            b.take_up_to(&rate, 10 * SEC, 100),
            10,
            "capped at the burst"
        );
    }

    #[test]
    fn a_report_after_the_fact_is_charged_in_full_into_bounded_debt() {
        let rate = Rate::per_unit(10, Unit::Second);
        let mut b = BucketState::full(&rate, 0);
        assert_eq!(b.charge(&rate, 0, 50, 100), 50, "beyond what is left");
        assert_eq!(b.tokens, -40.0);
        assert!(!b.try_take(&rate, 0, 1), "checks are denied while in debt");
        assert_eq!(
            rate.micros_until(b.tokens, 1.0),
            Some(4_100_000),
            "time to repay"
        );
        assert_eq!(
            b.charge(&rate, 0, u64::MAX, 100),
            60,
            "clamped at the debt bound"
        );
        assert_eq!(b.tokens, -100.0);
        assert_eq!(b.charge(&rate, 0, 1, 100), 0);
        assert!(b.try_take(&rate, 10_100_000, 1), "repaid at the rate");
    }

    #[test]
    fn burst_above_rate_allows_a_larger_first_burst() {
        let rate = Rate {
            requests_per_unit: 60,
            unit: Unit::Minute,
            unit_multiplier: 1,
            burst: 100,
            algorithm: crate::bucket::Algorithm::TokenBucket,
        };
        let mut b = BucketState::full(&rate, 0);
        assert!(b.try_take(&rate, 0, 100));
        assert!(!b.try_take(&rate, 0, 1));
        assert!(b.try_take(&rate, SEC, 1), "one per second after that");
    }

    #[test]
    fn zero_rate_never_admits_and_never_promises() {
        let rate = Rate::per_unit(0, Unit::Hour);
        let mut b = BucketState::full(&rate, 0);
        assert!(!b.try_take(&rate, 3_600 * SEC, 1));
        assert_eq!(rate.micros_until(0.0, 1.0), None);
        assert_eq!(rate.micros_until_full(0.0), 0);
    }

    #[test]
    fn clock_going_backwards_adds_nothing() {
        let rate = Rate::per_unit(10, Unit::Second);
        let mut b = BucketState {
            updated_micros: 5 * SEC,
            ..BucketState::empty(0)
        };
        b.refill(&rate, SEC);
        assert_eq!(b.tokens, 0.0);
        assert_eq!(b.updated_micros, 5 * SEC);
    }

    #[test]
    fn give_back_is_capped_at_the_burst() {
        let rate = Rate::per_unit(5, Unit::Second);
        let mut b = BucketState::full(&rate, 0);
        assert_eq!(b.take_up_to(&rate, 0, 2), 2);
        b.give_back(&rate, 0, 10, 0);
        assert_eq!(b.tokens, 5.0);
    }

    proptest! {
        /// Over any schedule of requests, a bucket never admits more than `B + L·t`.
        #[test]
        fn never_admits_more_than_burst_plus_rate_times_time(
            rpu in 0u64..2_000,
            burst in 0u64..2_000,
            steps in proptest::collection::vec((0u64..300_000, 1u64..50), 1..200),
        ) {
            let rate = Rate { requests_per_unit: rpu, unit: Unit::Second, unit_multiplier: 1, burst , algorithm: Algorithm::TokenBucket };
            let mut b = BucketState::full(&rate, 0);
            let (mut now, mut admitted) = (0u64, 0u64);
            for (dt, want) in steps {
                now += dt;
                admitted += b.take_up_to(&rate, now, want);
                let ideal = burst as f64 + rpu as f64 * now as f64 / SEC as f64;
                prop_assert!(admitted as f64 <= ideal + 1e-6, "admitted {admitted} > ideal {ideal}");
                prop_assert!(b.tokens >= 0.0 && b.tokens <= burst as f64);
            }
        }

        /// Charges after the fact keep the bucket within `[-max_debt, B]`, charge everything the
        /// bound allows (nothing lost below it), never admit a check while in debt, and never
        /// lock a key out: `(B + max_debt) / L` after the last charge, a full burst passes.
        #[test]
        fn charges_go_into_bounded_debt_and_refill_out_of_it(
            rpu in 1u64..2_000,
            burst in 1u64..2_000,
            max_debt in 0u64..5_000,
            steps in proptest::collection::vec(
                (0u64..300_000, prop_oneof![0u64..100, Just(u64::MAX), 0u64..u64::MAX], any::<bool>()),
                1..100,
            ),
        ) {
            let rate = Rate { requests_per_unit: rpu, unit: Unit::Second, unit_multiplier: 1, burst , algorithm: Algorithm::TokenBucket };
            let mut b = BucketState::full(&rate, 0);
            let mut now = 0u64;
            for (dt, n, report) in steps {
                now += dt;
                if report {
                    let before = { let mut c = b; c.refill(&rate, now); c.tokens };
                    let charged = b.charge(&rate, now, n, max_debt);
                    prop_assert!(charged <= n);
                    if charged < n {
                        prop_assert!(b.tokens - 1.0 < -(max_debt as f64) + 1e-9,
                            "clamped only at the bound: {} left after {charged} of {n}", b.tokens);
                    }
                    prop_assert!((before - charged as f64 - b.tokens).abs() < 1e-6
                        || b.tokens == before, "charged exactly what it says");
                } else {
                    let in_debt = { let mut c = b; c.refill(&rate, now); c.tokens < 1.0 };
                    let took = b.try_take(&rate, now, 1);
                    prop_assert!(!(took && in_debt));
                }
                prop_assert!(b.tokens >= -(max_debt as f64) - 1e-9 && b.tokens <= burst as f64);
            }
            let wait = rate.micros_until(b.tokens, burst as f64).expect("reachable");
            prop_assert!(wait as f64 <= (burst + max_debt) as f64 * SEC as f64 / rpu as f64 + 1.0);
            prop_assert!(b.try_take(&rate, now + wait + 1, burst), "no lockout");
        }

        /// Waiting exactly `micros_until` makes the tokens available.
        #[test]
        fn micros_until_is_enough(rpu in 1u64..10_000, tokens in 0.0f64..50.0, want in 1u64..50) {
            let rate = Rate { requests_per_unit: rpu, unit: Unit::Minute, unit_multiplier: 1, burst: 100 , algorithm: Algorithm::TokenBucket };
            let wait = rate.micros_until(tokens, want as f64).expect("reachable");
            prop_assert!(rate.refill(tokens, wait) >= want as f64 - 1e-9);
        }
    }
}
