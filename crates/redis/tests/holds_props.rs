//! Concurrency slots on real Redis against a model, over random sequences of three sidecars
//! leasing, giving back and going silent (a killed sidecar is one that never calls again): every
//! grant and every count of free slots is the model's, so free + held is always N, nobody gives
//! back more than it holds, and a silent sidecar's slots are free again exactly a hold timeout
//! after its last call, never sooner.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use sluice_core::Unit;
use sluice_core::bucket::{Algorithm, Rate};
use sluice_redis::{RedisMetrics, RedisStore};

#[derive(Debug, Clone, Copy)]
enum Op {
    Lease(u64),
    Release(u64),
    Peek,
}

/// (seconds since the previous operation, which sidecar, what it does)
type Step = (u64, usize, Op);

const HOLD_SECS: u64 = 60;
const START: u64 = 1_700_000_000_000_000;

fn slots(n: u64) -> Rate {
    Rate {
        requests_per_unit: 0,
        unit: Unit::Second,
        unit_multiplier: HOLD_SECS as u32,
        burst: n,
        algorithm: Algorithm::Concurrency,
    }
}

/// The model: each sidecar's slots and its last call.
#[derive(Debug)]
struct Model {
    n: u64,
    held: [u64; 3],
    last: [u64; 3],
}

impl Model {
    fn free(&self) -> u64 {
        self.n - self.held.iter().sum::<u64>()
    }

    /// What a call at `now` frees first: every sidecar whose lapse has come.
    fn reclaim(&mut self, now: u64) {
        for h in 0..3 {
            if self.held[h] > 0 && self.last[h] + HOLD_SECS * 1_000_000 <= now {
                self.held[h] = 0;
            }
        }
    }

    fn called(&mut self, h: usize, now: u64) {
        if self.held[h] > 0 {
            self.last[h] = now;
        }
    }
}

fn steps() -> impl Strategy<Value = (u64, Vec<Step>)> {
    let op = prop_oneof![
        4 => (0u64..6).prop_map(Op::Lease),
        3 => (0u64..6).prop_map(Op::Release),
        1 => Just(Op::Peek),
    ];
    let step = (
        prop_oneof![3 => Just(0u64), 2 => 0u64..40, 1 => 55u64..65],
        0usize..3,
        op,
    );
    (1u64..6, proptest::collection::vec(step, 1..40))
}

async fn run(stores: &[Arc<RedisStore>], key: &str, n: u64, steps: &[Step]) -> Result<(), String> {
    let rate = slots(n);
    let mut model = Model {
        n,
        held: [0; 3],
        last: [0; 3],
    };
    let mut now = START;
    for (i, &(secs, h, op)) in steps.iter().enumerate() {
        now += secs * 1_000_000;
        model.reclaim(now);
        let store = &stores[h];
        let at = Some(now);
        let free = match op {
            Op::Lease(want) => {
                let g = store
                    .lease_at(key, rate, want, at)
                    .await
                    .map_err(|e| e.to_string())?;
                let expect = want.min(model.free());
                if g.granted != expect {
                    return Err(format!(
                        "step {i}: {h} leased {want}, got {} not {expect}",
                        g.granted
                    ));
                }
                model.held[h] += expect;
                model.called(h, now);
                g.remaining
            }
            Op::Release(back) => {
                let left = store
                    .release_at(key, rate, back, 0, at)
                    .await
                    .map_err(|e| e.to_string())?;
                model.held[h] -= back.min(model.held[h]);
                model.called(h, now);
                left
            }
            Op::Peek => store
                .peek_at(key, rate, at)
                .await
                .map_err(|e| e.to_string())?,
        };
        if free != model.free() as f64 {
            return Err(format!("step {i}: {free} free, the model {model:?}"));
        }
    }
    Ok(())
}

fn agree(rt: &tokio::runtime::Runtime, stores: &[Arc<RedisStore>], prefix: &str) {
    let mut runner = TestRunner::new(Config {
        cases: 64,
        rng_seed: RngSeed::Fixed(26),
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&steps(), |(n, steps)| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let key = format!("{{holds-props}}:{prefix}:{case}");
            rt.block_on(run(stores, &key, n, &steps))
                .map_err(TestCaseError::fail)
        })
        .unwrap_or_else(|e| panic!("{prefix}: {e}"));
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn three_sidecars_agree_with_the_model_on_standalone_redis() {
    let rt = runtime();
    let _context = rt.enter();
    let redis = rt.block_on(common::Standalone::start());
    let settings = common::standalone_settings(&redis.url());
    let stores: Vec<Arc<RedisStore>> = (0..3)
        .map(|_| RedisStore::start(settings.clone(), RedisMetrics::unregistered()).expect("store"))
        .collect();
    rt.block_on(async {
        for s in &stores {
            common::wait_connected(s).await;
        }
    });
    agree(&rt, &stores, "standalone");
}

#[test]
fn three_sidecars_agree_with_the_model_on_a_redis_cluster() {
    let rt = runtime();
    let _context = rt.enter();
    let cluster = rt.block_on(common::Cluster::start());
    let settings = common::cluster_settings(cluster.nodes());
    let stores: Vec<Arc<RedisStore>> = (0..3)
        .map(|_| RedisStore::start(settings.clone(), RedisMetrics::unregistered()).expect("store"))
        .collect();
    rt.block_on(async {
        for s in &stores {
            common::wait_connected(s).await;
        }
    });
    agree(&rt, &stores, "cluster");
}
