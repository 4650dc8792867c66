use super::*;
use crate::Unit;
use proptest::prelude::*;

const SEC: u64 = 1_000_000;
/// A time well after the epoch, inside a window (as real clocks are).
const T0: u64 = 1_700_000_000 * SEC + 250_000;

fn rate(algorithm: Algorithm, per_second: u64) -> Rate {
    Rate {
        requests_per_unit: per_second,
        unit: Unit::Second,
        unit_multiplier: 1,
        burst: per_second,
        algorithm,
    }
}

#[test]
fn a_fixed_window_holds_its_limit_until_the_window_ends_then_starts_full() {
    let r = rate(Algorithm::FixedWindow, 10);
    let mut b = BucketState::full(&r, T0);
    assert_eq!(b.take_up_to(&r, T0, 100), 10);
    assert_eq!(
        b.take_up_to(&r, T0 + 700_000, 1),
        0,
        "no refill within the window"
    );
    assert_eq!(until_window_end(&r, T0 + 700_000), 50_000);
    assert_eq!(
        r.micros_until_at(0.0, 1.0, T0 + 700_000),
        Some(50_000),
        "the window's end"
    );
    assert_eq!(
        b.take_up_to(&r, T0 + 750_000, 100),
        10,
        "a new window, all of it at once"
    );
    assert_eq!(r.window(T0 + 750_000), r.window(T0) + 1);
}

#[test]
fn a_sliding_window_counts_the_previous_window_as_it_fades() {
    let r = rate(Algorithm::SlidingWindow, 10);
    let start = 1_700_000_000 * SEC; // a window's first instant
    let mut b = BucketState::full(&r, start);
    assert_eq!(b.take_up_to(&r, start, 10), 10);
    // A quarter into the next window, three quarters of the previous 10 still count.
    let quarter = start + SEC + 250_000;
    assert_eq!(b.available_at(&r, quarter), 2.5);
    assert_eq!(b.take_up_to(&r, quarter, 100), 2);
    assert_eq!(b.available_at(&r, start + SEC + 500_000), 3.0);
    // Two windows on, nothing carries over.
    assert_eq!(b.available_at(&r, start + 3 * SEC), 10.0);
}

#[test]
fn tokens_given_back_go_only_into_the_window_they_came_from() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let r = rate(algorithm, 10);
        let mut b = BucketState::full(&r, T0);
        assert_eq!(b.take_up_to(&r, T0, 4), 4);
        let window = r.window(T0);
        b.give_back(&r, T0 + 1, 4, window);
        assert_eq!(
            b.available_at(&r, T0 + 1),
            10.0,
            "{algorithm:?}: same window"
        );
        assert_eq!(b.take_up_to(&r, T0 + 2, 4), 4);
        b.give_back(&r, T0 + SEC, 4, window);
        assert!(
            b.available_at(&r, T0 + SEC) <= 10.0,
            "{algorithm:?}: never past the limit"
        );
        assert_eq!(
            b.tokens, 10.0,
            "{algorithm:?}: the old window's tokens are dropped"
        );
    }
}

#[test]
fn a_fixed_window_forgets_its_debt_when_the_window_ends() {
    let r = rate(Algorithm::FixedWindow, 10);
    let mut b = BucketState::full(&r, T0);
    assert_eq!(b.charge(&r, T0, 25, 100), 25);
    assert_eq!(b.available_at(&r, T0 + 1), -15.0);
    assert_eq!(b.available_at(&r, T0 + SEC), 10.0, "as a counter expires");
}

proptest! {
    /// Over any schedule, every algorithm admits at most its limit in each aligned window, and
    /// a sliding window at most `L + f·previous` (under `2L`) in any trailing period.
    #[test]
    fn windows_never_admit_past_their_bounds(
        algorithm in prop::sample::select(vec![Algorithm::FixedWindow, Algorithm::SlidingWindow]),
        limit in 1u64..200,
        multiplier in 1u32..4,
        steps in proptest::collection::vec((0u64..700_000, 1u64..40), 1..120),
    ) {
        let r = Rate { unit_multiplier: multiplier, ..rate(algorithm, limit) };
        let period = r.period_micros();
        let mut b = BucketState::full(&r, T0);
        let (mut now, mut grants) = (T0, Vec::new());
        for (dt, want) in steps {
            now += dt;
            let got = b.take_up_to(&r, now, want);
            grants.push((now, got));
            let window = now / period;
            let in_window: u64 = grants.iter().filter(|(t, _)| t / period == window).map(|g| g.1).sum();
            prop_assert!(in_window <= limit, "{in_window} in one window of {limit}");
            if algorithm == Algorithm::SlidingWindow {
                let trailing: u64 = grants.iter().filter(|(t, _)| t + period > now).map(|g| g.1).sum();
                let previous: u64 = grants.iter().filter(|(t, _)| t / period + 1 == window).map(|g| g.1).sum();
                let f = (now % period) as f64 / period as f64;
                let bound = limit as f64 + f * previous as f64;
                prop_assert!(trailing as f64 <= bound + 1e-9, "{trailing} trailing > {bound}");
                prop_assert!(trailing < 2 * limit);
            }
        }
    }

    /// No lockout: after at most two periods of silence any window admits its whole limit, and
    /// `micros_until_at` never promises too early for a fixed window.
    #[test]
    fn windows_come_back_whole(
        algorithm in prop::sample::select(vec![Algorithm::FixedWindow, Algorithm::SlidingWindow]),
        limit in 1u64..200,
        spend in 0u64..400,
        at in 0u64..3 * SEC,
    ) {
        let r = rate(algorithm, limit);
        let mut b = BucketState::full(&r, T0);
        b.take_up_to(&r, T0 + at, spend);
        let now = T0 + at;
        if algorithm == Algorithm::FixedWindow {
            let available = b.available_at(&r, now);
            let wait = r.micros_until_at(available, limit as f64, now).expect("reachable");
            prop_assert!(b.available_at(&r, now + wait) >= limit as f64);
        }
        prop_assert_eq!(b.take_up_to(&r, now + 2 * SEC, limit), limit);
    }
}
