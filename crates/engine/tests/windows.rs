//! Window algorithms through the public engine API, as property tests: two engines ("sidecars")
//! leasing from one embedded store, random requests and clock steps across window edges.
//!
//! (a) a fixed or sliding window never admits more than its limit in one aligned window, for
//!     strict (leased), exact and local rules alike: a lease lapses with its window, so tokens
//!     of one window are never spent in the next;
//! (b) a sliding window never admits more than `L + f·previous` over a trailing period;
//! (c) no lockout: two periods after the last request, a request of the whole limit passes.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use sluice_core::{Clock, Descriptor, ManualClock};
use sluice_engine::{Code, Engine, EngineMetrics, EngineSettings, MemoryStore, RateLimitRequest};

const RULES: &str = r#"
domains:
  - domain: w
    descriptors:
      - key: fixed
        rate_limit: {unit: second, requests_per_unit: 20, algorithm: fixed_window}
      - key: sliding
        rate_limit: {unit: second, requests_per_unit: 20, algorithm: sliding_window}
      - key: fixed_exact
        rate_limit: {unit: second, requests_per_unit: 7, algorithm: fixed_window, mode: exact}
      - key: sliding_local
        rate_limit: {unit: second, unit_multiplier: 2, requests_per_unit: 9, algorithm: sliding_window, mode: local}
"#;

/// (limit per window, period in µs, sliding, local) of each key.
fn limit_of(key: &str) -> (u64, u64, bool, bool) {
    match key {
        "fixed" => (20, 1_000_000, false, false),
        "sliding" => (20, 1_000_000, true, false),
        "fixed_exact" => (7, 1_000_000, false, false),
        _ => (9, 2_000_000, true, true),
    }
}

const KEYS: [&str; 4] = ["fixed", "sliding", "fixed_exact", "sliding_local"];
/// A real Unix time, a quarter into a second.
const T0: u64 = 1_700_000_000_000_000 + 250_000;

#[derive(Debug, Clone)]
struct Step {
    advance_micros: u64,
    engine: usize,
    key: usize,
    hits: u64,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![Just(0u64), 0u64..50_000, 0u64..400_000, Just(1_000_000)],
        0usize..2,
        0usize..KEYS.len(),
        prop_oneof![Just(1u64), 1u64..5, Just(20)],
    )
        .prop_map(|(advance_micros, engine, key, hits)| Step {
            advance_micros,
            engine,
            key,
            hits,
        })
}

fn engines(clock: &ManualClock) -> Vec<Engine> {
    let store = MemoryStore::new(clock.clone());
    (0..2)
        .map(|_| {
            Engine::new(
                sluice_core::config::parse_config(RULES)
                    .expect("rules")
                    .rules,
                store.clone(),
                Arc::new(clock.clone()),
                EngineSettings::default(),
                EngineMetrics::unregistered(),
            )
        })
        .collect()
}

async fn ask(e: &Engine, key: &str, value: &str, hits: u64) -> Code {
    let d = [Descriptor::of([(key, value)])];
    e.decide(&RateLimitRequest {
        domain: "w",
        descriptors: &d,
        hits_addend: hits,
    })
    .await
    .overall
}

fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let clock = ManualClock::at(T0);
        let engines = engines(&clock);
        // Admissions per (key, engine for local rules): (time, hits).
        let mut admitted: BTreeMap<(usize, usize), Vec<(u64, u64)>> = BTreeMap::new();
        for s in &steps {
            clock.advance_micros(s.advance_micros);
            let now = clock.now_micros();
            let key = KEYS[s.key];
            let (.., local) = limit_of(key);
            if ask(&engines[s.engine], key, "v", s.hits).await == Code::Ok {
                let owner = if local { s.engine } else { 0 };
                admitted
                    .entry((s.key, owner))
                    .or_default()
                    .push((now, s.hits));
            }
            for ((k, owner), list) in &admitted {
                let (limit_k, period_k, sliding_k, _) = limit_of(KEYS[*k]);
                let window = now / period_k;
                let sum = |f: &dyn Fn(u64) -> bool| -> u64 {
                    list.iter().filter(|(t, _)| f(*t)).map(|(_, h)| h).sum()
                };
                let in_window = sum(&|t| t / period_k == window);
                prop_assert!(
                    in_window <= limit_k,
                    "{} (engine {owner}): {in_window} in one window of {limit_k}",
                    KEYS[*k]
                );
                if sliding_k {
                    let trailing = sum(&|t| t + period_k > now);
                    let previous = sum(&|t| t / period_k + 1 == window);
                    let f = (now % period_k) as f64 / period_k as f64;
                    let bound = limit_k as f64 + f * previous as f64;
                    prop_assert!(
                        trailing as f64 <= bound + 1e-9,
                        "{}: {trailing} over the trailing period > {bound}",
                        KEYS[*k]
                    );
                }
            }
        }
        // No lockout: two periods of silence (and the lease TTL) later, the whole limit passes.
        clock.advance_micros(4_000_000);
        for (k, key) in KEYS.iter().enumerate() {
            let (limit, ..) = limit_of(key);
            for (i, e) in engines.iter().enumerate() {
                prop_assert_eq!(
                    ask(e, key, &format!("fresh{k}-{i}"), limit).await,
                    Code::Ok,
                    "{}: a new key passes its whole limit",
                    key
                );
            }
            prop_assert_eq!(
                ask(&engines[0], key, "v", 1).await,
                Code::Ok,
                "{}: no lockout",
                key
            );
        }
        Ok(())
    })
}

#[test]
fn windows_hold_their_limits_across_sidecars_and_window_edges() {
    for seed in [RngSeed::Fixed(0x0001_0d0e), RngSeed::Random] {
        let mut runner = proptest::test_runner::TestRunner::new(Config {
            cases: 96,
            rng_seed: seed,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&prop::collection::vec(step(), 1..150), run)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
