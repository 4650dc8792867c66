//! Holds under random operations: two sidecars on one store, acquires and releases with and
//! without caller overrides on every kind of concurrency key, time and sweeps.

use super::*;

/// The keys the property test acquires: (key, N, whether each sidecar has N of its own).
const KEYS: [(&str, usize, bool); 3] = [
    ("tenant", 3, false),
    ("local_tenant", 3, true),
    ("job", 2, false),
];

/// A caller `limit` override: requests per unit, unit.
type Override = Option<(u64, sluice_core::Unit)>;

/// One step of the property test.
#[derive(Debug, Clone)]
enum Op {
    /// Sidecar, key (in [`KEYS`]), value, override.
    Acquire(usize, usize, u8, Override),
    /// Which hold in flight (modulo), override.
    Release(usize, Override),
    /// A made-up token, on a sidecar.
    Bogus(usize, u64),
    Advance(u64),
    Sweep(usize),
}

fn overridden(d: Descriptor, o: Override) -> Descriptor {
    match o {
        Some((n, unit)) => with_override(d, n, unit),
        None => d,
    }
}

/// Runs `ops` through two sidecars on one store, checking after each that every admitted
/// acquire holds a slot and that no key has more than N in flight; at the end, that N fit again.
async fn two_sidecars(ops: Vec<Op>) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::{prop_assert, prop_assert_eq};
    let clock = ManualClock::at(1);
    let store = MemoryStore::new(clock.clone());
    let sidecar = || {
        Engine::new(
            parse_config(HOLDS).expect("config").rules,
            store.clone(),
            Arc::new(clock.clone()),
            EngineSettings::default(),
            EngineMetrics::unregistered(),
        )
    };
    let engines = [sidecar(), sidecar()];
    // Holds in flight: (engine, key, value, token, taken at).
    let mut live: Vec<(usize, usize, String, u64, u64)> = Vec::new();
    for op in ops {
        let now = clock.now_micros();
        // Holds past their timeout may have been given back by a sweep: as far as the limit
        // goes, they no longer count once a sweep ran (below).
        match op {
            Op::Acquire(i, k, t, o) => {
                let (key, value) = (KEYS[k].0, t.to_string());
                let dec = ask(&engines[i], &[overridden(acquire(key, &value), o)]).await;
                prop_assert_eq!(
                    dec.overall == Code::Ok,
                    dec.hold.is_some(),
                    "{}={} {:?}: a token iff admitted",
                    key,
                    value,
                    o
                );
                if let Some(token) = dec.hold {
                    live.push((i, k, value, token, now));
                }
            }
            Op::Release(at, o) if !live.is_empty() => {
                let (e, k, value, token, _) = live.remove(at % live.len());
                let key = KEYS[k].0;
                // Released on its own sidecar (Envoy calls the one it acquired on), with or
                // without an override; on the other, it finds nothing.
                let elsewhere = ask(&engines[1 - e], &[release(key, &value, token)]).await;
                prop_assert_eq!(elsewhere.released, 0);
                let released = overridden(release(key, &value, token), o);
                let _ = ask(&engines[e], &[released]).await;
            }
            Op::Release(..) => {}
            Op::Bogus(i, token) => {
                let real = live.iter().any(|l| l.3 == token);
                if !real {
                    prop_assert_eq!(give(&engines[i], "tenant", "0", token).await, 0);
                }
            }
            Op::Advance(ms) => clock.advance_millis(ms),
            Op::Sweep(i) => {
                engines[i].sweep().await;
                let now = clock.now_micros();
                live.retain(|l| l.0 != i || now - l.4 < 10_000_000);
            }
        }
        for (k, &(key, n, own)) in KEYS.iter().enumerate() {
            for value in ["0", "1"] {
                for e in 0..2 {
                    let held = live
                        .iter()
                        .filter(|l| l.1 == k && l.2 == value && (!own || l.0 == e))
                        .count();
                    prop_assert!(held <= n, "{}={}: {} in flight", key, value, held);
                }
            }
        }
    }
    // Everything given back (released, or lapsed and swept), leases returned: N fit. Twice 20 s:
    // the first sweep returns the leases of `job`'s rate, overrides' included, and the store
    // refills a bucket at the rate of the call that reads it, so a return from a slow override's
    // lease credits the time before it at that rate; the rule's own 5 a second then needs the
    // second wait to fill the rate again (what is checked here is the slots).
    for (e, k, value, token, _) in std::mem::take(&mut live) {
        give(&engines[e], KEYS[k].0, &value, token).await;
    }
    for _ in 0..2 {
        clock.advance_millis(20_000);
        for e in &engines {
            e.sweep().await;
        }
    }
    // And a second, what the rule's 5 a second takes to refill its burst after the last
    // sweep's returns: a return from an override of 1 a minute at that sweep left 1 token, and
    // the second acquire was refused by the rate, not the slots (a search found it).
    clock.advance_millis(1_000);
    for &(key, n, own) in &KEYS {
        let expected = if own { 2 * n } else { n };
        for value in ["0", "1"] {
            let mut fit = 0;
            for i in 0..expected + 2 {
                fit += usize::from(take(&engines[i % 2], key, value).await.is_some());
            }
            prop_assert_eq!(fit, expected, "{}={}", key, value);
        }
    }
    Ok(())
}

/// Two sidecars (engines) on one store: random acquires and releases (of real, released and
/// made-up tokens) on every kind of concurrency key (global, local, and one beside a rate limit),
/// each with or without a random caller `limit` override (Envoy sends one whenever a
/// `rate_limits` entry reads `limit` from dynamic metadata; 0 and 2^32 − 1 included), time,
/// sweeps. Every admitted acquire holds a slot (a token iff admitted); never more than N in
/// flight on a key (across both sidecars, or per sidecar for a local key); every hold given back
/// once; and once all are given back, N fit again (no slot lost).
///
/// CI draws its cases from a fixed seed, so a run is the same every time; the twin below
/// searches with a new seed each run.
#[test]
fn never_more_than_n_in_flight_and_no_slot_lost() {
    never_more_than_n_in_flight(proptest::test_runner::RngSeed::Fixed(0x401d5));
}

/// The property above with a new seed each run: a search (`loadtest/properties.sh`). Its
/// failures so far were the rule's rate refusing the final check's acquires after a slow
/// override's lease came back, not a slot lost (`a_slow_override_returned_at_the_last_sweep_…`).
#[test]
#[ignore = "a search with a new seed each run (loadtest/properties.sh)"]
fn never_more_than_n_in_flight_and_no_slot_lost_search() {
    never_more_than_n_in_flight(proptest::test_runner::RngSeed::Random);
}

fn never_more_than_n_in_flight(seed: proptest::test_runner::RngSeed) {
    use proptest::prelude::*;
    let unit = prop_oneof![
        Just(sluice_core::Unit::Second),
        Just(sluice_core::Unit::Minute),
        Just(sluice_core::Unit::Hour),
        Just(sluice_core::Unit::Day),
    ];
    let rpu = prop_oneof![Just(0u64), 1..5u64, 0..2_000u64, Just(u64::from(u32::MAX))];
    let limit = proptest::option::of((rpu, unit));
    let op = prop_oneof![
        4 => (0..2usize, 0..KEYS.len(), 0..2u8, limit.clone())
            .prop_map(|(e, k, t, o)| Op::Acquire(e, k, t, o)),
        3 => (any::<usize>(), limit).prop_map(|(i, o)| Op::Release(i, o)),
        1 => (0..2usize, any::<u64>()).prop_map(|(e, t)| Op::Bogus(e, t)),
        1 => (0..4_000u64).prop_map(Op::Advance),
        1 => (0..2usize).prop_map(Op::Sweep),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let config = ProptestConfig {
        // 64, or `PROPTEST_CASES` (a search's, `loadtest/properties.sh`).
        cases: crate::engine::tests::cases(64),
        rng_seed: seed,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in proptest::collection::vec(op, 1..80))| {
        runtime.block_on(two_sidecars(ops))?;
    });
}

/// A case the search found (2026-11-29): a release and an acquire of `job` with an override of
/// 1 a minute; the last sweep's return credited the time before it at that rate, and right
/// after it the rule's 5 a second held 1 token (now the check waits a second more).
#[tokio::test]
async fn a_slow_override_returned_at_the_last_sweep_loses_no_slot() {
    use sluice_core::Unit::{Hour, Minute};
    let ops = vec![
        Op::Acquire(0, 2, 1, None),
        Op::Acquire(0, 2, 1, None),
        Op::Acquire(0, 2, 1, Some((2, Hour))),
        Op::Acquire(0, 0, 0, None),
        Op::Release(629_044_643_822_573_391, None),
        Op::Acquire(0, 0, 0, None),
        Op::Acquire(0, 2, 1, Some((1, Minute))),
    ];
    two_sidecars(ops).await.expect("holds");
}

/// A case the property test found: overrides of `job`'s rate (3/hour, 244/hour, 3/day) left
/// leases whose return, 20 s on, refilled the rate at 3 a day; the plain acquires after it were
/// denied by the rate, not by the slots.
#[tokio::test]
async fn slow_overrides_of_the_rate_beside_a_concurrency_limit_lose_no_slot() {
    use sluice_core::Unit::{Day, Hour, Minute, Second};
    let ops = vec![
        Op::Acquire(0, 2, 0, None),
        Op::Acquire(1, 2, 0, Some((3, Hour))),
        Op::Release(0, Some((0, Second))),
        Op::Release(0, Some((4, Minute))),
        Op::Acquire(1, 2, 0, Some((244, Hour))),
        Op::Acquire(1, 2, 0, Some((3, Day))),
    ];
    two_sidecars(ops).await.expect("holds");
}
