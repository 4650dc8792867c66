//! The fleet's promises as properties over random fleets (issue 42): sidecars, load, arrival
//! pattern, limit, burst, store round trip and jitter, seed, all drawn at random, each run against
//! an exact limiter on the same arrivals.
//!
//! - Never over `B + L·t`, at any moment, whatever the fleet and its load: CI runs 16 fleets
//!   from a fixed seed; `never_over_the_bound_search` draws anew each run
//!   (`loadtest/properties.sh`; `PROPTEST_CASES=1500` passed). A CI run, when it drew anew,
//!   found a hot sidecar whose queued requests each called the store in turn until the queue
//!   was as long as the store's timeout, and the fallback, deciding the rest while the store
//!   was up, admitted beyond the bound: a case below
//!   (`a_starved_hot_key_makes_no_convoy_of_store_calls`).
//! - No false denial well under the limit (≤ 80 % of `L`) while the burst is at least the number
//!   of sidecars (`B ≥ n`, issue 42's target), token leases: in CI on 16 fleets drawn from a
//!   fixed seed; the same property with a new seed each run is `#[ignore]`d, a search
//!   (`PROPTEST_CASES=6000 cargo test --release -p sluice-fleetsim --test properties no_false
//!   -- --ignored`). Token leases passed 12 000 fleets since leases are sized by rounding
//!   (`Policy::lease_size`); rounded up, every 4 000-fleet run failed, on fleets in step with
//!   `n ≤ B < 2n` (34 sidecars at 74% of 229/s, burst 34: 8 of 1 190 denied, now a case
//!   below). The fleet found since (a sidecar alone at 61% of 22/s on a burst of 3: 1 of 57),
//!   whose first turn waited for all the demand it saw rather than the request it had, is a
//!   case below. A 20 000-fleet run then found 2 sidecars, one hot, at 34% of 129/s on a burst
//!   of 2 with a store 0.75 ms away and 2.2 ms of jitter (5 of 143, 1 admitted fewer in all).
//!   They call the store for every request, as the reference does, and with no jitter deny
//!   nothing: the store judges each call when it arrives, up to 2 ms after its request, on a
//!   bucket that refills a token every 7.75 ms, and the exact limiter here at the request's own
//!   time. A call that arrives late finds a token the exact limiter had not yet refilled, and
//!   the next request, whose call is quicker, finds none: a swap, as any remote limiter makes.
//!   A 3 000-fleet run then found 19 sidecars in step at 78% of 184/s on a burst of 21 (3 of
//!   1 007): leases of 1.5 requests a horizon, rounded to 2, took the top half of the burst
//!   before the step's last callers came, as rounding up had. With `n ≤ B < 2n` a lease now
//!   asks beyond what its request lacks only for its demand's share of `B − n`
//!   (`Policy::extra_cap`); a case below. The same searches found 3 sidecars, one hot, at
//!   56% of 97/s and at 79% of 83/s on a burst of 3 (1 of 178, 2 of 217): a clump put the key's
//!   callers in its queue of turns, and the hot sidecar waited for its turn behind one that
//!   went unused while the store held its token (not fixed; RESULTS.md).
//! - Leases of rate, the same: in CI on 16 fleets from a fixed seed; the search is
//!   `#[ignore]`d. It failed within 1 500 fleets while the store reserved from a drained
//!   bucket; reserving from slack only (`sluice_core::reserve::reservable`), it passed 4 of 6
//!   runs of 2 000. The fleets it found since (`B = n` in step; a hot pod's chain of one-token
//!   calls, with a lease of rate and before one) are cases below, each fixed; it then passed 6
//!   runs of 2 000 and one of 10 000. A lone sidecar on a burst of 1 (the late judge below)
//!   is the one other failure it has found.
//!
//!   The history: token leases passed 9 000 fleets in six runs once the demand estimate was
//!   weighted by time (`ledger::demand::decayed_demand`); before, half of a 500-fleet run's
//!   failures were theirs. The property found the fleets kept as cases below (each now
//!   decided without a false denial), then fleets where leases sized by an inflated first
//!   demand sample, or refills ahead near the limit, take the bottom half of the burst from
//!   requests elsewhere (40 sidecars at 67% of a limit of 24, burst 181: 2 of 154 denied).
//!   Leases of rate did not close it: drawing them alone over 256 fleets found 33 sidecars at
//!   77% of a limit of 37, burst 196, Poisson, with 2 of 199 denied. Two sidecars had reserved
//!   a slice their noisy first measurement overstated, and the others' refills ahead of 10
//!   tokens (5% of the burst, from its bottom half too) emptied the store: token leases'
//!   cause, in other timing. With turns paced by what they take it still found such fleets
//!   (43 sidecars at 72% of a limit of 97, burst 172, Poisson: 3 of 271 denied), which the
//!   estimate weighted by time fixed.
//!
//! Store outages are the simulator grid's (`loadtest/fleetsim/fleet.yaml`): during one the
//! rule's fallback decides, which may admit beyond the bound by design (docs/faults.md).

use proptest::prelude::*;
use sluice_fleetsim::run::{Outcome, run};
use sluice_fleetsim::scenario::{Arrivals, Case, Leases};

fn arrivals() -> impl Strategy<Value = Arrivals> {
    prop_oneof![
        Just(Arrivals::Poisson),
        Just(Arrivals::Step),
        Just(Arrivals::StepAnyOrder),
        Just(Arrivals::Hot),
        Just(Arrivals::Churn),
    ]
}

/// A fleet on a store with no outage.
#[allow(clippy::too_many_arguments)]
fn fleet(
    sidecars: usize,
    demand: f64,
    arrivals: Arrivals,
    limit: u64,
    burst: u64,
    seconds: u64,
    rtt_us: u64,
    jitter_us: u64,
    seed: u64,
) -> Case {
    Case {
        name: "property".into(),
        sidecars,
        demand,
        arrivals,
        limit,
        burst,
        seconds,
        rtt_us,
        jitter_us,
        timeout_us: 50_000,
        outages: Vec::new(),
        seed,
        leases: Leases::Tokens,
    }
}

/// Up to 48 sidecars, a limit of 1 to 400 a second, a burst of 1 to 2 000, 3 to 11 simulated
/// seconds (churn replaces a quarter of the fleet every 10 s, so only the longer runs see it), a
/// store 0.1 to 5 ms away with up to 3 ms of jitter.
fn case(
    demand: std::ops::Range<f64>,
    leases: impl Strategy<Value = Leases>,
) -> impl Strategy<Value = Case> {
    (
        1usize..=48,
        demand,
        arrivals(),
        1u64..=400,
        1u64..=2_000,
        3u64..=11,
        100u64..=5_000,
        0u64..=3_000,
        any::<u64>(),
        leases,
    )
        .prop_map(|(n, d, a, l, b, s, rtt, jitter, seed, leases)| Case {
            leases,
            ..fleet(n, d, a, l, b, s, rtt, jitter, seed)
        })
}

/// The fleet's requests run against the exact limiter's: none denied that it admits, for a
/// fleet under its burst (a wider one is rejected, not failed).
fn no_false_denial_while_the_burst_covers_the_fleet(case: &Case) -> Result<(), TestCaseError> {
    prop_assume!(case.burst >= case.sidecars as u64);
    let o = run(case);
    prop_assert_eq!(o.false_denials, 0, "{:?}", o);
    Ok(())
}

/// Asserts that sluice admitted at least `share` of what the exact limiter admitted.
fn admits_at_least(o: &Outcome, share: f64) {
    assert!(
        o.admitted as f64 >= share * o.exact_admitted as f64,
        "admitted {} of the exact limiter's {}: {o:?}",
        o.admitted,
        o.exact_admitted
    );
}

fn either_lease() -> impl Strategy<Value = Leases> {
    prop_oneof![Just(Leases::Tokens), Just(Leases::Rates)]
}

/// Never over `B + L·t`, and never more admitted than asked.
fn within_the_bound(case: &Case) -> Result<(), TestCaseError> {
    let o = run(case);
    prop_assert!(o.over <= 0.0, "{:.2} over B + L·t: {o:?}", o.over);
    prop_assert!(o.admitted <= o.requests);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// The bound on fleets drawn with a new seed each run: a search (`loadtest/properties.sh`;
    /// CI draws the property below from a fixed seed, so a run is the same every time).
    #[test]
    #[ignore = "a search with a new seed each run (loadtest/properties.sh)"]
    fn never_over_the_bound_search(case in case(0.05..6.0, either_lease())) {
        within_the_bound(&case)?;
    }

    /// The same as the CI property below, with a new seed each run: a search (token leases
    /// passed 12 000 fleets; see the file's doc for the one fleet found since).
    #[test]
    #[ignore = "a wider search than CI's; run with PROPTEST_CASES (see the file's doc)"]
    fn no_false_denial_well_under_the_limit_while_the_burst_covers_the_fleet(
        case in case(0.05..0.8, Just(Leases::Tokens))
    ) {
        no_false_denial_while_the_burst_covers_the_fleet(&case)?;
    }

    /// The same for leases of rate: a search (see the file's doc; it has found a lone sidecar
    /// on a burst of 1, the late judge, which token leases meet too).
    #[test]
    #[ignore = "a wider search than CI's, with a known failure; see the file's doc"]
    fn no_false_denial_well_under_the_limit_with_leases_of_rate(
        case in case(0.05..0.8, Just(Leases::Rates))
    ) {
        no_false_denial_while_the_burst_covers_the_fleet(&case)?;
    }
}

proptest! {
    // Fixed fleets, so a CI run is the same every time; the ignored property above searches.
    #![proptest_config(ProptestConfig {
        cases: 16,
        rng_seed: proptest::test_runner::RngSeed::Fixed(42),
        ..ProptestConfig::default()
    })]

    /// Never over `B + L·t`, on 16 fleets drawn from a fixed seed, both lease kinds.
    #[test]
    fn never_over_the_bound(case in case(0.05..6.0, either_lease())) {
        within_the_bound(&case)?;
    }

    /// Token leases well under the limit while the burst covers the fleet (`B ≥ n`): no false
    /// denial, on 16 fleets drawn from a fixed seed.
    #[test]
    fn no_false_denial_on_drawn_fleets_while_the_burst_covers_the_fleet(
        case in case(0.05..0.8, Just(Leases::Tokens))
    ) {
        no_false_denial_while_the_burst_covers_the_fleet(&case)?;
    }

    /// The same for leases of rate, on 16 fleets drawn from a fixed seed: a guard against
    /// regressions, not a proof (these 16 passed before the store reserved from slack only; the
    /// search above and the cases after this block found what they did not).
    #[test]
    fn no_false_denial_with_leases_of_rate_on_drawn_fleets_while_the_burst_covers_the_fleet(
        case in case(0.05..0.8, Just(Leases::Rates))
    ) {
        no_false_denial_while_the_burst_covers_the_fleet(&case)?;
    }
}

/// Fleets the leases-of-rate search found, each denied requests the exact limiter admits:
/// - 22 sidecars in step at 78% of 337 a second on a burst of 22 (16 of 792 while the store
///   reserved from a drained bucket, 5 once it reserved from slack only). Every sidecar's
///   measurement ends in the same step and the first 11 are granted 12 a second each, so the
///   store refills at `L − R` at once; at the next step each new stock had filled 0.997 of a
///   token, all 22 requests went to the store, and it had refilled 17. A call from a new,
///   empty stock now gives back the fraction it filled while the bucket is drained
///   (`RateLease::sending`).
/// - 21 sidecars, one hot, at 78% of 360 a second on a burst of 378: the hot pod's stock filled
///   a hair under its demand and it asked the store for one token a request, one round trip
///   after another; a request behind that chain waited out the store's timeout (1 of 1 085).
///   A rate-leased key now also asks for its share of the burst's top half.
/// - 43 sidecars, one hot, at 67% of 296 a second on a burst of 43, before any reservation
///   (token leases, one token a call at `B = n`): the same chain, 7 timeouts and 6 of 666; with
///   token leases alone, 14 and 10 of 666 (the token-lease hot pod at `B = n`). The requests
///   waiting for a key's call now say what they need while the bucket was at least three
///   quarters full at the last answer, and the next call asks for them all (665 store calls
///   for the 666 requests with token leases, 452 now).
#[test]
fn the_fleets_the_leases_of_rate_search_found_are_never_denied_under_the_limit() {
    let hot_at_a_burst_of_the_fleet = fleet(
        43,
        0.672_919_368_050_878_3,
        Arrivals::Hot,
        296,
        43,
        3,
        4_914,
        2_356,
        8_192_760_518_537_525_893,
    );
    let rates = |case: Case| Case {
        leases: Leases::Rates,
        ..case
    };
    for case in [
        rates(fleet(
            22,
            0.784_308_436_571_345_1,
            Arrivals::Step,
            337,
            22,
            3,
            100,
            0,
            0,
        )),
        rates(fleet(
            21,
            0.784_449_824_263_347_5,
            Arrivals::Hot,
            360,
            378,
            4,
            3_380,
            2_814,
            4_915_710_246_344_862_701,
        )),
        rates(hot_at_a_burst_of_the_fleet.clone()),
        hot_at_a_burst_of_the_fleet,
    ] {
        let o = run(&case);
        assert_eq!(o.exact_admitted, o.requests, "{o:?}");
        assert_eq!(o.false_denials, 0, "{o:?}");
        assert_eq!(o.timed_out, 0, "{o:?}");
        assert!(o.over <= 0.0, "{:.2} over B + L·t: {o:?}", o.over);
    }
}

/// The fleets the property above found, each a cause of false denials now fixed: a refill
/// ahead that found the store empty read as starvation (the sidecar then denied for a lease
/// horizon without asking); every sidecar asking at once for a lease of 7 from a burst of 128;
/// 34 sidecars in step on a burst of 34 whose demand read just over a request a horizon, and
/// whose leases of 2 (rounded up) left the step's last callers nothing (now rounded); 19 in step
/// on a burst of 21 whose demand read 1.5 requests a horizon, with the same effect (a burst
/// under twice the fleet now shares its slack `B − n` by demand).
#[test]
fn the_fleets_the_property_found_are_never_denied_under_the_limit() {
    for case in [
        fleet(7, 0.468, Arrivals::Step, 150, 21, 3, 100, 0, 0),
        fleet(32, 0.303, Arrivals::Step, 124, 128, 3, 100, 0, 0),
        fleet(
            34,
            0.743_382_940_372_226_4,
            Arrivals::Step,
            229,
            34,
            7,
            100,
            0,
            0,
        ),
        fleet(
            19,
            0.775_352_228_115_146,
            Arrivals::Step,
            184,
            21,
            7,
            100,
            0,
            0,
        ),
    ] {
        let o = run(&case);
        assert_eq!(o.exact_admitted, o.requests, "{o:?}");
        assert_eq!(o.false_denials, 0, "{o:?}");
    }
}

/// Two sidecars, one hot, at 43% of 12 a second on a burst of 2 (found by the property
/// above): a starved wait floored at a lease horizon ended 1 ms after a request the exact
/// limiter admitted. A caller with a turn in the key's queue now asks at its turn or when the
/// tokens it lacks are there.
#[test]
fn a_starved_caller_with_a_turn_asks_when_its_tokens_are_there() {
    let o = run(&fleet(
        2,
        0.432_808_914_738_475_66,
        Arrivals::Hot,
        12,
        2,
        10,
        100,
        0,
        168_061_786_341_592_684,
    ));
    assert!(o.exact_admitted > 40, "{o:?}");
    assert_eq!(o.false_denials, 0, "{o:?}");
}

/// A sidecar alone at 61% of 22 a second on a burst of 3, Poisson (found by the property
/// above): a clump of 3 requests put it in the key's queue, and its turn (the queue's first)
/// waited for the 3 tokens of the demand it had seen; a request 54 ms later, with 1.4 tokens in
/// the bucket, was denied. Below its limit, a sidecar's first turn now waits for what its
/// request lacks.
#[test]
fn below_its_limit_a_sidecar_waits_for_its_request_not_its_clump() {
    let o = run(&fleet(
        1,
        0.610_220_889_139_712_5,
        Arrivals::Poisson,
        22,
        3,
        4,
        100,
        0,
        4_284_055_571_994_145_119,
    ));
    assert!(o.exact_admitted > 40, "{o:?}");
    assert_eq!(o.false_denials, 0, "{o:?}");
}

/// A sidecar alone at 4× a limit of 324 a second on a burst of 1, with a store call taking
/// 2 ms of the simulated clock: a starved key's next ask was counted from when its request
/// came, not from when its call was sent, so for a request that had waited behind others' calls
/// it was over before it began. Every request queued behind the key's lock then called the
/// store in turn, a fifth of them waited out the store's timeout, and the calls it cut off lost
/// their tokens (in 20 s: 4 988 timed out; 64% of `B + L·t` admitted).
#[test]
fn a_starved_key_is_paced_from_its_calls_not_its_requests() {
    let o = run(&fleet(1, 4.0, Arrivals::Poisson, 324, 1, 20, 100, 0, 42));
    assert_eq!(o.timed_out, 0, "{o:?}");
    admits_at_least(&o, 0.95);
}

/// One sidecar on a burst of 1 at 324 a second, at 70% of it (found by the property above): a
/// starved wait of a lease horizon (200 ms) let the bucket overflow 64 times over, and 55% of
/// the requests an exact limiter admits were denied. A wait now ends when the bucket is full
/// again, the key's first starved caller gets its turn when its token is there, a caller with a
/// turn waits no horizon, and the wait counts from the call, not from a request that queued
/// behind others' calls: 402 of 710 admitted against the exact limiter's 404, 3 of them
/// denied that it admits. A store call here takes 2 ms of the simulated clock (whole
/// milliseconds each way), two thirds of a token's refill. (Counted from the request, 419 were
/// admitted and 13 denied that it admits: decisions that waited out calls admitted requests
/// late, a bucket's refill after the exact limiter had denied them.)
#[test]
fn a_small_burst_is_not_lost_to_waiting() {
    let o = run(&fleet(1, 0.698, Arrivals::Poisson, 324, 1, 3, 100, 0, 0));
    assert!(o.exact_admitted > 400, "{o:?}");
    admits_at_least(&o, 0.99);
    assert!(o.false_denials * 100 <= o.requests, "{o:?}");
}

/// A fleet wider than its burst, in step, in any order, under the limit: 128 sidecars at 80% of
/// 100 a second, burst 100, each step 128 requests at once. An exact limiter admits the first
/// 100 of each; so must sluice. Its 28 callers denied at one step used to wait for turns a
/// tenth of a second apart, through the next step, while the bucket refilled to full: 212 of
/// 1 536 requests denied that the exact limiter admits. Turns now span the refill of what each
/// caller asks for.
#[test]
fn callers_denied_at_one_step_are_not_denied_at_the_next() {
    let o = run(&fleet(
        128,
        0.8,
        Arrivals::StepAnyOrder,
        100,
        100,
        20,
        1_000,
        1_000,
        42,
    ));
    assert!(
        o.exact_admitted < o.requests,
        "each step is wider than the burst: {o:?}"
    );
    assert_eq!(o.false_denials, 0, "{o:?}");
    assert_eq!(o.admitted, o.exact_admitted, "{o:?}");
}

/// Three sidecars at 4.8× a limit of 364 a second, one hot, on a burst of 937, a store 3 ms
/// away with 2.8 ms of jitter, leases of rate (found by `never_over_the_bound` in CI): every
/// request queued behind the hot key's store call made a call of its own once the call before
/// it came back short, one round trip after another, so the queue grew to the store's timeout,
/// 5 055 of 8 824 decisions were decided by the fallback while the store was up, and the
/// fleet admitted 16 beyond `B + L·t`. A request that waited for a call that left the store
/// short of it is now denied as its own call would have been.
#[test]
fn a_starved_hot_key_makes_no_convoy_of_store_calls() {
    for leases in [Leases::Rates, Leases::Tokens] {
        let o = run(&Case {
            leases,
            ..fleet(
                3,
                4.833_458_403_492_031,
                Arrivals::Hot,
                364,
                937,
                5,
                3_022,
                2_764,
                7_894_487_667_246_591_495,
            )
        });
        assert!(o.over <= 0.0, "{o:?}");
        assert_eq!(o.timed_out, 0, "{o:?}");
        admits_at_least(&o, 0.99);
    }
}
