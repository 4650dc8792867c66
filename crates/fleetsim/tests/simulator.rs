//! The simulator itself (CI runs these; the full grids are `loadtest/fleetsim.sh`): a run is
//! the same for a seed, and sluice's engines never admit beyond `B + L·t` on any of a small
//! grid of fleets, loads and arrival patterns; a fleet that can only be wrong by accident (two
//! sidecars well under the limit) is never denied.

use sluice_fleetsim::run::run;
use sluice_fleetsim::scenario::{Case, parse};

fn cases(yaml: &str) -> Vec<Case> {
    parse(yaml)
        .expect("scenario")
        .scenarios
        .iter()
        .flat_map(|g| g.cases())
        .collect()
}

#[test]
fn a_run_is_the_same_for_a_seed_and_differs_for_another() {
    let case = cases(
        "scenarios:\n  - {name: d, sidecars: [8], demand: [1.5], arrivals: [poisson], burst: [20], limit: 100, seconds: 5, rtt_ms: 1, jitter_ms: 1, seed: 3}\n",
    )
    .remove(0);
    let first = run(&case);
    assert_eq!(first, run(&case));
    let mut other = case.clone();
    other.seed = 4;
    assert_ne!(first.requests, run(&other).requests);
}

#[test]
fn never_over_the_bound_on_a_small_grid() {
    let grid = cases(
        "scenarios:
  - name: ci
    sidecars: [2, 32, 128]
    demand: [0.2, 0.8, 4.0]
    arrivals: [poisson, step, hot, churn]
    burst: [100]
    limit: 100
    seconds: 11
    rtt_ms: 1
    jitter_ms: 1
    seed: 11
    leases: [tokens, rates]
  - name: thin
    sidecars: [32]
    demand: [0.8, 4.0]
    arrivals: [poisson, step]
    burst: [10]
    limit: 100
    seconds: 11
    rtt_ms: 1
    jitter_ms: 1
    seed: 12
",
    );
    let mut failures = Vec::new();
    for case in &grid {
        let o = run(case);
        if o.over > 0.0 {
            failures.push(format!("{case:?}: {:.1} over B + L·t", o.over));
        }
        assert!(o.admitted <= o.requests);
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// What leases of rate are for (issue 42): 32 sidecars at 80% of the limit, every sidecar's
/// requests in the same microsecond, each slice 2.5 a second. Token leases deny none but ask
/// the store for every request (a lease of `B/2n` is one token); reservations fill each stock
/// with its slice, so the store sees a few calls a second, and still none is denied. (The first
/// seconds are token leases while each sidecar measures its demand over 8 hits; over 20 s that
/// warm-up was a fifth of the calls.)
#[test]
fn leases_of_rate_cost_a_fraction_of_the_calls_without_a_denial() {
    let [tokens, rates] = [
        "tokens", "rates",
    ]
    .map(|leases| {
        let case = cases(&format!(
            "scenarios:\n  - {{name: r, sidecars: [32], demand: [0.8], arrivals: [step], burst: [100], limit: 100, seconds: 60, rtt_ms: 1, jitter_ms: 1, seed: 9, leases: [{leases}]}}\n"
        ))
        .remove(0);
        run(&case)
    });
    for o in [&tokens, &rates] {
        assert_eq!(o.exact_admitted, o.requests, "{o:?}");
        assert_eq!(o.false_denials, 0, "{o:?}");
        assert!(o.over <= 0.0, "{o:?}");
    }
    assert!(
        rates.store_calls * 5 < tokens.store_calls,
        "rates {} calls, tokens {}",
        rates.store_calls,
        tokens.store_calls
    );
}

/// At the limit the burst is what absorbs each sidecar's ups and downs, so the store reserves
/// only from slack (`sluice_core::reserve::reservable`): 32 sidecars at 100% of `L`, Poisson,
/// 20 s. Reserving from a drained bucket put most of the burst in 32 stocks, each usable only
/// by its own sidecar, and 58 of 2 066 requests the exact limiter admits were denied (token
/// leases: none); reserving from slack, 4.
#[test]
fn at_the_limit_leases_of_rate_leave_the_burst_to_the_fleet() {
    let o = run(&cases(
        "scenarios:\n  - {name: l, sidecars: [32], demand: [1.0], arrivals: [poisson], burst: [100], limit: 100, seconds: 20, rtt_ms: 1, jitter_ms: 1, seed: 42, leases: [rates]}\n",
    )
    .remove(0));
    assert_eq!(o.exact_admitted, o.requests, "{o:?}");
    assert!(o.false_denials * 200 <= o.requests, "over 0.5%: {o:?}");
    assert!(o.over <= 0.0, "{o:?}");
}

#[test]
fn two_sidecars_well_under_the_limit_are_never_denied() {
    for case in cases(
        "scenarios:\n  - {name: u, sidecars: [2], demand: [0.2, 0.5], arrivals: [poisson, step, hot], burst: [100], limit: 100, seconds: 20, rtt_ms: 2, jitter_ms: 1, seed: 5}\n",
    ) {
        let o = run(&case);
        assert_eq!(o.exact_admitted, o.requests, "{case:?}");
        assert_eq!(o.false_denials, 0, "{case:?}: {o:?}");
    }
}

#[test]
fn an_outage_is_decided_by_the_fallback_and_counted() {
    let case = cases(
        "scenarios:\n  - {name: o, sidecars: [4], demand: [0.5], arrivals: [poisson], burst: [100], limit: 100, seconds: 10, rtt_ms: 1, outages: [[3, 6]], seed: 2}\n",
    )
    .remove(0);
    let o = run(&case);
    // While the store is out, calls fail at once (a real store's breaker is open) and the
    // fallback decides: a key at half its limit is still admitted, and none waits a timeout.
    assert_eq!(o.admitted, o.requests, "{o:?}");
    assert_eq!(o.timed_out, 0, "{o:?}");
    assert!(o.failed > 0, "{o:?}");
    let quiet = run(&Case {
        outages: Vec::new(),
        ..case
    });
    assert_eq!(quiet.failed, 0, "{quiet:?}");
}
