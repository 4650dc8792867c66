use super::*;
use sluice_core::Unit;

/// The stock fills at the reserved rate only inside its window, whole tokens at a time,
/// capped at a second of the rate, and stops at the next call's send time.
#[test]
fn the_stock_fills_at_the_reserved_rate_inside_its_window() {
    let rate = Rate::per_unit(100, Unit::Second);
    let mut r = RateLease::starting(0);
    // 10 a second, answered 1 ms after being sent at 0, for 10 s.
    r.granted(&rate, 10_000, 0, 1_000, 10_000_000, 0.0);
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
        r.sending(0, 20_000_000, false),
        89_000,
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
    r.granted(&rate, 80_000, 0, 0, 10_000_000, 0.0);
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
        r.sending(0, sent, false);
        r.granted(&rate, granted, sent, answered, 10_000_000, 0.0);
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
    r.sending(3, 1_000, false);
    assert_eq!(r.ask(&rate), 0, "3 seen in a millisecond: not yet measured");
    r.sending(47, 2_000_000, false);
    assert!((r.demand - 25.0).abs() < 0.1, "{}", r.demand);
    assert_eq!(r.ask(&rate), with_headroom(25.0));
    let mut thin = RateLease::starting(0);
    thin.sending(2, 1_500_000, false);
    assert_eq!(thin.ask(&rate), 0, "two hits are not a measurement");
    thin.sending(1, 4_000_000, false);
    assert_eq!(thin.ask(&rate), 0, "nor three in 4 s");
    thin.sending(1, 8_000_000, false);
    assert!((thin.demand - 0.5).abs() < 0.01, "{}", thin.demand);
    assert_eq!(
        thin.ask(&rate),
        0,
        "half a token a second: tokens, not a reservation"
    );
}

/// A call from an empty stock gives back the fraction of a token it filled when the last
/// answer showed the bucket drained (under three quarters of its burst) and the stock has not
/// yet filled a whole token, in thousandths with the whole tokens a full stock dropped; from a
/// full bucket, a stock that still holds a token, or one that has filled one, it is kept.
#[test]
fn an_empty_stock_gives_back_its_fraction_only_to_a_drained_bucket() {
    let rate = Rate {
        burst: 100,
        ..Rate::per_unit(100, Unit::Second)
    };
    // 10 a second from 0: 0.999 of a token by 99.9 ms, and 2 dropped whole tokens.
    let fresh = |remaining: f64| {
        let mut r = RateLease::starting(0);
        r.granted(&rate, 10_000, 0, 0, 10_000_000, remaining);
        let mut lease = 0;
        r.fill(&rate, &mut lease, 99_900);
        assert_eq!(lease, 0);
        r.dropped = 2;
        r
    };
    let mut full = fresh(80.0);
    assert_eq!(full.sending(0, 99_900, true), 2_000, "a full bucket: kept");
    assert!((full.carry - 0.999).abs() < 1e-9, "{}", full.carry);
    let mut holding = fresh(10.0);
    assert_eq!(holding.sending(0, 99_900, false), 2_000, "a token in stock");
    let mut drained = fresh(74.9);
    assert_eq!(
        drained.sending(0, 99_900, true),
        2_999,
        "2 tokens and 0.999"
    );
    assert!(
        drained.carry < 0.001 && drained.carry >= 0.0,
        "{}",
        drained.carry
    );
    assert_eq!(drained.sending(0, 99_900, true), 0, "nothing twice");
    // A stock that filled a whole token (spent since) is in step with its demand: it keeps
    // its fraction, until a reservation begins again from none.
    let mut r = RateLease::starting(0);
    r.granted(&rate, 10_000, 0, 0, 10_000_000, 10.0);
    let mut lease = 0;
    r.fill(&rate, &mut lease, 199_900);
    assert_eq!(lease, 1);
    assert_eq!(r.sending(0, 199_900, true), 0, "in step: kept");
    r.granted(&rate, 0, 199_900, 199_900, 10_000_000, 10.0);
    r.granted(&rate, 10_000, 200_000, 200_000, 10_000_000, 10.0);
    assert_eq!(
        r.sending(0, 200_000, true),
        999,
        "a new reservation's stock gives it back"
    );
    // So does one renewed after its reservation lapsed (sent past the old one's end).
    let mut r = RateLease::starting(0);
    r.granted(&rate, 10_000, 0, 0, 1_000_000, 10.0);
    let mut lease = 0;
    r.fill(&rate, &mut lease, 199_900);
    assert!(r.filled_a_token);
    r.granted(&rate, 10_000, 900_000, 900_000, 1_000_000, 10.0);
    assert!(r.filled_a_token, "renewed in time: still in step");
    r.granted(&rate, 10_000, 2_000_000, 2_000_000, 1_000_000, 10.0);
    assert!(
        !r.filled_a_token,
        "lapsed at 1.9 s, renewed at 2 s: a new stock"
    );
}

/// A call that fails (refused, timed out, cut off at the decision's deadline) leaves the
/// reservation as the sidecar knows it: the stock, stopped when the call was sent, fills on to
/// the reservation's end, and no further.
#[test]
fn a_failed_call_leaves_the_stock_filling_to_its_reservations_end() {
    let rate = Rate::per_unit(100, Unit::Second);
    let mut r = RateLease::starting(0);
    // 40 a second from 0 for 10 s.
    r.granted(&rate, 40_000, 0, 0, 10_000_000, 100.0);
    let mut lease = 0;
    r.fill(&rate, &mut lease, 1_000_000);
    assert_eq!(lease, 40);
    lease = 0;
    r.sending(0, 1_000_000, false);
    r.fill(&rate, &mut lease, 2_000_000);
    assert_eq!(lease, 0, "stopped at the send");
    r.failed();
    r.fill(&rate, &mut lease, 2_000_000);
    assert_eq!(lease, 40, "filled on, the second since the send");
    lease = 0;
    r.fill(&rate, &mut lease, 30_000_000);
    assert_eq!(lease, 40, "up to its cap, and none after its end at 10 s");
    assert!(!r.live(10_000_000));
}

/// The sweep ends an unused key's lease of rate once no request came for as long as 8 take at
/// its measured demand, at least the ttl (`LeaseState::rate_lease_unused`): at 22 a second
/// after the ttl of 1 s, at 2 a second after 4 s; with none measured yet, after 8 s.
#[test]
fn a_lease_of_rate_is_unused_once_its_demand_cannot_explain_the_silence() {
    let rate = Rate::per_unit(100, Unit::Second);
    let mut state = super::super::LeaseState::new(sluice_core::config::Mode::Strict, &rate, 0);
    assert!(!state.rate_lease_unused(u64::MAX, 0), "no lease of rate");
    state.rare_mut().rate_lease = Some(RateLease::starting(0));
    assert!(!state.rate_lease_unused(8_000_000, 1_000_000));
    assert!(state.rate_lease_unused(8_000_001, 1_000_000));
    for (demand, unused_after) in [(22.0, 1_000_000), (2.0, 4_000_000)] {
        state.rare_mut().rate_lease.as_mut().expect("lease").demand = demand;
        assert!(
            !state.rate_lease_unused(unused_after, 1_000_000),
            "{demand}"
        );
        assert!(
            state.rate_lease_unused(unused_after + 1, 1_000_000),
            "{demand}"
        );
    }
}
