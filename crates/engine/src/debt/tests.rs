//! Post-paid invariants as property tests, over random sequences of reports, checks, clock steps
//! and sweeps on two engines ("sidecars") sharing one embedded store:
//!
//! (a) nothing lost: per key, what the store charged equals what was reported whenever the usage
//!     reported never exceeded the debt bound (so nothing could be clamped), and never more;
//! (b) bounded debt: no global bucket ever ends below `-max_debt`, whatever was reported
//!     (`u64::MAX` included, many times);
//! (c) own usage is seen at once: right after a report of more than the burst, a check on the
//!     same engine is denied;
//! (d) no lockout: `(burst + max_debt) / rate` after the last report, every check passes on
//!     both engines.
//!
//! The store is the real embedded store; the forwarding double only adds up what its `charge`
//! calls charged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use sluice_core::{Descriptor, ManualClock, RuleSet};

use crate::testing::{Call, Forwarding};
use crate::{Code, Engine, EngineMetrics, EngineSettings, RateLimitRequest};

/// Strict post-paid rules: a small debt bound (clamping happens) and a huge one (it never does).
const RULES: &str = r#"
domains:
  - domain: p
    descriptors:
      - key: t
        rate_limit: {unit: second, requests_per_unit: 100, charge: post_paid}
      - key: m
        rate_limit: {unit: second, requests_per_unit: 10, burst: 50, charge: post_paid, max_debt: 1099511627776}
"#;

/// (rate, burst, max_debt) of each key.
fn limit_of(key: &str) -> (u64, u64, u64) {
    match key {
        "t" => (100, 100, 100),
        _ => (10, 50, 1 << 40),
    }
}

const KEYS: [&str; 2] = ["t", "m"];
const SIZES: [u64; 9] = [1, 3, 7, 50, 99, 101, 1_000, u64::MAX / 2, u64::MAX];

#[derive(Debug, Clone)]
enum Op {
    Report {
        engine: usize,
        key: usize,
        value: u8,
        size: usize,
    },
    Check {
        engine: usize,
        key: usize,
        value: u8,
    },
    Advance(u64),
    Sweep(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 0..2usize, 0..3u8, 0..SIZES.len())
            .prop_map(|(engine, key, value, size)| Op::Report { engine, key, value, size }),
        3 => (0..2usize, 0..2usize, 0..3u8).prop_map(|(engine, key, value)| Op::Check { engine, key, value }),
        2 => (0..400_000u64).prop_map(Op::Advance),
        1 => (0..2usize).prop_map(Op::Sweep),
    ]
}

fn rules() -> RuleSet {
    sluice_core::config::parse_config(RULES)
        .expect("rules")
        .rules
}

fn descriptor(key: usize, value: u8, hits: u64) -> Descriptor {
    let mut d = Descriptor::of([(KEYS[key], format!("v{value}"))]);
    d.hits_addend = Some(hits);
    d
}

async fn decide(e: &Engine, d: Descriptor) -> Code {
    e.decide(&RateLimitRequest {
        domain: "p",
        descriptors: &[d],
        hits_addend: 0,
    })
    .await
    .overall
}

async fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let clock = ManualClock::at(1_000_000);
    let store = Forwarding::up(&clock);
    // As the embedded store: leases sized for a store in this process.
    store.set_in_process(true);
    let engines: Vec<Engine> = (0..2)
        .map(|_| {
            Engine::new(
                rules(),
                store.clone(),
                Arc::new(clock.clone()),
                EngineSettings::default(),
                EngineMetrics::unregistered(),
            )
        })
        .collect();
    // Per (key, value): usage reported, saturating at u128 (no sum of u64s reaches it).
    let mut reported: BTreeMap<(usize, u8), u128> = BTreeMap::new();
    for op in ops {
        match op {
            Op::Report {
                engine,
                key,
                value,
                size,
            } => {
                let n = SIZES[size];
                let code = decide(&engines[engine], descriptor(key, value, n)).await;
                prop_assert_eq!(code, Code::Ok, "a report is never denied");
                *reported.entry((key, value)).or_default() += u128::from(n);
                let (_, burst, _) = limit_of(KEYS[key]);
                if n > burst {
                    let check = decide(&engines[engine], descriptor(key, value, 0)).await;
                    prop_assert_eq!(check, Code::OverLimit, "(c) own usage seen at once");
                }
            }
            Op::Check { engine, key, value } => {
                decide(&engines[engine], descriptor(key, value, 0)).await;
            }
            Op::Advance(us) => clock.advance_micros(us),
            Op::Sweep(e) => engines[e].sweep().await,
        }
    }
    // Shutdown sends whatever is still pending.
    for e in &engines {
        e.return_all_leases().await;
    }
    for (&(key, value), &sum) in &reported {
        let (_, _, max_debt) = limit_of(KEYS[key]);
        let entries = descriptor(key, value, 0).entries;
        let left = engines[0].quota("p", &entries).await.global_remaining;
        prop_assert!(
            left.is_some_and(|l| l >= -(max_debt as f64) - 1e-6),
            "(b) {} v{value} at {left:?}, bound {max_debt}",
            KEYS[key]
        );
        let charged = store
            .per_key(Call::Charge)
            .iter()
            .filter(|(k, _)| k.ends_with(&format!("{}=v{value}", KEYS[key])))
            .map(|(_, t)| t.granted)
            .sum::<u128>();
        prop_assert!(charged <= sum, "charged {charged} > reported {sum}");
        if sum <= u128::from(max_debt) {
            prop_assert_eq!(charged, sum, "(a) {} v{} lost usage", KEYS[key], value);
        }
    }
    // (d) once the worst debt is repaid (and every reading is older than a horizon), every check
    // passes again on both engines.
    for &(key, value) in reported.keys().filter(|(k, _)| KEYS[*k] == "t") {
        let (rate, burst, max_debt) = limit_of(KEYS[key]);
        let repay = Duration::from_secs_f64((burst + max_debt) as f64 / rate as f64 + 0.3);
        clock.advance_micros(u64::try_from(repay.as_micros()).unwrap_or(u64::MAX));
        for e in &engines {
            let code = decide(e, descriptor(key, value, 0)).await;
            prop_assert_eq!(code, Code::Ok, "(d) t v{} locked out", value);
        }
    }
    Ok(())
}

fn block_on(ops: Vec<Op>) -> Result<(), TestCaseError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(run(ops))
}

proptest! {
    #![proptest_config(Config { cases: 256, rng_seed: RngSeed::Fixed(0x9a1d), ..Config::default() })]
    /// The same 256 cases on every run.
    #[test]
    fn post_paid_invariants_hold_on_fixed_cases(ops in prop::collection::vec(op(), 1..60)) {
        block_on(ops)?;
    }
}

proptest! {
    #![proptest_config(Config { cases: 128, ..Config::default() })]
    /// New cases on every run (failures are saved under `proptest-regressions/debt/`).
    #[test]
    fn post_paid_invariants_hold_on_random_cases(ops in prop::collection::vec(op(), 1..60)) {
        block_on(ops)?;
    }
}
