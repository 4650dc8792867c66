//! Holds through two sidecars (engines) on a real Redis, over random acquires and releases, each
//! with or without a random caller `limit` override (Envoy sends one whenever a `rate_limits`
//! entry reads `limit` from dynamic metadata), on every kind of rule a descriptor can hold on: a
//! concurrency limit, one beside a rate, a reservation, and a plain rate. Every admitted acquire
//! of a hold rule holds a slot (a token iff admitted), never more than N are in flight on a key,
//! releases find their holds with or without an override, and once every hold is given back and
//! the leases returned, exactly N fit again (no slot lost, none made).
//!
//! Before overrides kept off concurrency limits, an overridden acquire was decided as a token
//! bucket at the override's rate on the concurrency key's own Redis hash: admitted with no
//! token, so nothing held its slot.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use sluice_core::descriptor::{Hold, LimitOverride};
use sluice_core::{Descriptor, Unit};
use sluice_engine::{Code, Engine, GlobalStore, RateLimitRequest};

/// The hold timeouts are long enough that nothing lapses during a case: every hold is in
/// flight until its release. `job`'s rate refills within a microsecond, so an override that
/// emptied its bucket never stops the plain acquires that count its slots at the end.
const RULES: &str = r#"
domain: t
descriptors:
  - key: tenant
    rate_limit: {concurrency: 3, hold_timeout: 60s}
  - key: job
    rate_limits:
      - {concurrency: 2, hold_timeout: 60s}
      - {unit: second, requests_per_unit: 1000000}
  - key: budget
    rate_limit: {unit: hour, requests_per_unit: 1000000, charge: post_paid, reserve: {default: 10, max: 50}, hold_timeout: 60s}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000}
"#;

/// (key, slots: `Some(N)` for a concurrency limit, whether an acquire holds).
const KEYS: [(&str, Option<usize>, bool); 4] = [
    ("tenant", Some(3), true),
    ("job", Some(2), true),
    ("budget", None, true),
    ("user", None, false),
];

type Override = Option<(u64, Unit)>;

#[derive(Debug, Clone)]
enum Op {
    /// Sidecar, key, value, override.
    Acquire(usize, usize, u8, Override),
    /// Which hold in flight (modulo), override.
    Release(usize, Override),
    /// A made-up token, on a tenant.
    Bogus(usize, u64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let unit = prop_oneof![
        Just(Unit::Second),
        Just(Unit::Minute),
        Just(Unit::Hour),
        Just(Unit::Day),
    ];
    let rpu = prop_oneof![Just(0u64), 1..5u64, 0..2_000u64, Just(u64::from(u32::MAX))];
    let limit = proptest::option::of((rpu, unit));
    let op = prop_oneof![
        4 => (0..2usize, 0..KEYS.len(), 0..2u8, limit.clone())
            .prop_map(|(e, k, t, o)| Op::Acquire(e, k, t, o)),
        3 => (any::<usize>(), limit).prop_map(|(i, o)| Op::Release(i, o)),
        1 => (0..2usize, any::<u64>()).prop_map(|(e, t)| Op::Bogus(e, t)),
    ];
    proptest::collection::vec(op, 1..40)
}

fn sidecar(store: Arc<dyn GlobalStore>) -> Engine {
    common::engine::engine_with(RULES, store)
}

/// One decision on `key=value`, a hold's acquire or release, with the override if given.
async fn hold(
    e: &Engine,
    key: &str,
    value: &str,
    op: Hold,
    o: Override,
) -> sluice_engine::Decision {
    let mut d = Descriptor::of([(key, value)]);
    d.hold = op;
    d.limit_override = o.map(|(requests_per_unit, unit)| LimitOverride {
        requests_per_unit,
        unit,
    });
    e.decide(&RateLimitRequest {
        domain: "t",
        descriptors: &[d],
        hits_addend: 0,
    })
    .await
}

/// Runs one case on values of its own (`case`) through `engines`, then counts what fits on
/// `late`, a sidecar that starts afterwards; an error names the step that broke a promise.
async fn run(engines: &[Engine; 2], late: &Engine, case: u64, ops: &[Op]) -> Result<(), String> {
    // Holds in flight: (sidecar, key, value, token).
    let mut live: Vec<(usize, usize, String, u64)> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Acquire(i, k, t, o) => {
                let (key, value) = (KEYS[k].0, format!("{case}-{t}"));
                let dec = hold(&engines[i], key, &value, Hold::Acquire, o).await;
                let admitted = dec.overall == Code::Ok;
                if KEYS[k].2 && admitted != dec.hold.is_some() {
                    return Err(format!(
                        "step {step}: {key}={value} {o:?}: admitted {admitted}, token {:?}",
                        dec.hold
                    ));
                }
                if let Some(token) = dec.hold {
                    live.push((i, k, value, token));
                }
            }
            Op::Release(at, o) if !live.is_empty() => {
                let (e, k, value, token) = live.remove(at % live.len());
                let key = KEYS[k].0;
                let elsewhere = hold(&engines[1 - e], key, &value, Hold::Release(token), None);
                if elsewhere.await.released != 0 {
                    return Err(format!("step {step}: released on the other sidecar"));
                }
                let released = hold(&engines[e], key, &value, Hold::Release(token), o).await;
                if released.released != 1 {
                    return Err(format!("step {step}: {key}={value} {o:?}: hold not found"));
                }
            }
            Op::Release(..) => {}
            Op::Bogus(i, token) if !live.iter().any(|l| l.3 == token) => {
                let value = format!("{case}-0");
                let dec = hold(&engines[i], "tenant", &value, Hold::Release(token), None).await;
                if dec.released != 0 {
                    return Err(format!("step {step}: a made-up token released a hold"));
                }
            }
            Op::Bogus(..) => {}
        }
        for (k, &(key, slots, _)) in KEYS.iter().enumerate() {
            let Some(n) = slots else { continue };
            for t in 0..2 {
                let value = format!("{case}-{t}");
                let held = live.iter().filter(|l| l.1 == k && l.2 == value).count();
                if held > n {
                    return Err(format!(
                        "step {step}: {key}={value}: {held} in flight, N = {n}"
                    ));
                }
            }
        }
    }
    // Every hold given back, every lease returned: exactly N fit on a sidecar that starts now
    // (Redis counts no slot as held, nor more than N as free). Not on the two: one that had to
    // deny waits a lease horizon before it asks Redis again (docs/concurrency.md).
    for (e, k, value, token) in live {
        hold(&engines[e], KEYS[k].0, &value, Hold::Release(token), None).await;
    }
    for e in engines {
        e.return_all_leases().await;
    }
    for (key, slots, _) in KEYS {
        let Some(n) = slots else { continue };
        for t in 0..2 {
            let value = format!("{case}-{t}");
            let mut fit = 0;
            for _ in 0..=n {
                let dec = hold(late, key, &value, Hold::Acquire, None).await;
                fit += usize::from(dec.hold.is_some());
            }
            if fit != n {
                return Err(format!("{key}={value}: {fit} fit at the end, N = {n}"));
            }
        }
    }
    Ok(())
}

#[test]
fn every_admitted_acquire_holds_a_slot_whatever_the_override_on_redis() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let _context = rt.enter();
    let redis = rt.block_on(common::Standalone::start());
    let stores = common::stores(&common::standalone_settings(&redis.url()), 3);
    rt.block_on(async {
        for s in &stores {
            common::wait_connected(s).await;
        }
    });
    let engines = [sidecar(stores[0].clone()), sidecar(stores[1].clone())];
    let mut runner = TestRunner::new(Config {
        cases: 48,
        rng_seed: RngSeed::Fixed(41),
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&ops(), |ops| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let late = sidecar(stores[2].clone());
            rt.block_on(run(&engines, &late, case, &ops))
                .map_err(TestCaseError::fail)
        })
        .unwrap_or_else(|e| panic!("{e}"));
}
