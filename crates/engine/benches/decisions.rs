//! P1: local decisions on a lease hit, and the bucket map compared across lock strategies.
//!
//! Run: `cargo bench -p sluice-engine --bench decisions`. Results go to `loadtest/RESULTS.md`.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::collections::HashMap;
use std::hint::black_box;
use std::pin::pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dashmap::DashMap;
use sluice_core::bucket::Rate;
use sluice_core::config::Mode;
use sluice_core::{Descriptor, Entry, RuleSet, SystemClock, Unit};
use sluice_engine::bucket::LeaseBucket;
use sluice_engine::{
    Code, Engine, EngineMetrics, EngineSettings, MemoryStore, RateLimitRequest, key,
};

const CONFIG: &str = "domain: bench\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n";

fn rules() -> RuleSet {
    sluice_core::parse_config(CONFIG).expect("config").rules
}

/// Polls a future that is expected to be ready at once (a lease hit does no I/O).
fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a lease hit must not wait"),
    }
}

/// The whole decision: match the descriptor, find the key, take from the lease.
fn lease_hit(c: &mut Criterion) {
    let engine = Engine::new(
        rules(),
        MemoryStore::new(SystemClock::new()),
        Arc::new(SystemClock::new()),
        EngineSettings::default(),
        EngineMetrics::unregistered(),
    );
    let mut group = c.benchmark_group("decide");
    group.throughput(Throughput::Elements(1));
    for keys in [1usize, 100_000] {
        let descriptors: Vec<Vec<Descriptor>> = (0..keys)
            .map(|i| {
                vec![Descriptor::of([(
                    "client",
                    format!("10.0.{}.{}", i / 256, i % 256),
                )])]
            })
            .collect();
        for d in &descriptors {
            let warm = RateLimitRequest {
                domain: "bench",
                descriptors: d,
                hits_addend: 0,
            };
            let _ = ready(engine.decide(&warm));
        }
        let mut i = 0usize;
        group.bench_function(BenchmarkId::new("lease_hit", keys), |b| {
            b.iter(|| {
                i = (i + 1) % keys;
                let req = RateLimitRequest {
                    domain: "bench",
                    descriptors: &descriptors[i],
                    hits_addend: 0,
                };
                let decision = ready(engine.decide(black_box(&req)));
                assert_eq!(decision.overall, Code::Ok);
                decision
            });
        });
    }
    group.finish();
}

/// The same take-a-token step over three maps: DashMap (what sluice uses), `Mutex<HashMap>` and
/// `RwLock<HashMap>`, with 1, 2 and 4 threads, 1 and 100 k keys.
trait BucketMap: Send + Sync {
    fn take(&self, key: &[u8]) -> bool;
}

type Buckets<M> = Arc<M>;

struct Dash(DashMap<Box<[u8]>, LeaseBucket, foldhash::fast::RandomState>);
struct Locked(Mutex<HashMap<Box<[u8]>, LeaseBucket, foldhash::fast::RandomState>>);
struct ReadWrite(RwLock<HashMap<Box<[u8]>, LeaseBucket, foldhash::fast::RandomState>>);

fn spend(b: &LeaseBucket) -> bool {
    let mut s = b.lock();
    if s.lease > 0 {
        s.lease -= 1;
        true
    } else {
        false
    }
}

impl BucketMap for Dash {
    fn take(&self, key: &[u8]) -> bool {
        let b = self.0.get(key).map(|r| r.value().clone());
        b.is_some_and(|b| spend(&b))
    }
}
impl BucketMap for Locked {
    fn take(&self, key: &[u8]) -> bool {
        let b = self.0.lock().ok().and_then(|m| m.get(key).cloned());
        b.is_some_and(|b| spend(&b))
    }
}
impl BucketMap for ReadWrite {
    fn take(&self, key: &[u8]) -> bool {
        let b = self.0.read().ok().and_then(|m| m.get(key).cloned());
        b.is_some_and(|b| spend(&b))
    }
}

fn entries(keys: usize) -> Vec<(Box<[u8]>, Vec<u8>, LeaseBucket)> {
    let rate = Rate::per_unit(u64::MAX / 2, Unit::Second);
    (0..keys)
        .map(|i| {
            let e = [Entry::new("client", i.to_string())];
            let bytes = key::with_encoded(7, key::Values::Sent(&e), <[u8]>::to_vec);
            let bucket = LeaseBucket::new(&bytes, rate, Mode::Strict, 7, 0);
            bucket.lock().lease = u64::MAX / 2;
            (bytes.clone().into(), bytes, bucket)
        })
        .collect()
}

fn run_threads<M: BucketMap + 'static>(
    map: &Buckets<M>,
    keys: &Arc<Vec<Vec<u8>>>,
    threads: usize,
    iters: u64,
) -> Duration {
    let per_thread = iters / threads as u64 + 1;
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let map = Arc::clone(map);
            let keys = Arc::clone(keys);
            std::thread::spawn(move || {
                let n = keys.len();
                let mut k = t * 7_919 % n;
                for _ in 0..per_thread {
                    k = if k + 1 == n { 0 } else { k + 1 };
                    black_box(map.take(&keys[k]));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("bench thread");
    }
    start.elapsed()
}

fn map_comparison(c: &mut Criterion) {
    let mut group = c.benchmark_group("bucket_map");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(3));
    for keys in [1usize, 100_000] {
        let made = entries(keys);
        let lookup: Arc<Vec<Vec<u8>>> = Arc::new(made.iter().map(|(_, b, _)| b.clone()).collect());
        let dash = Arc::new(Dash(
            made.iter()
                .map(|(k, _, v)| (k.clone(), v.clone()))
                .collect(),
        ));
        let locked = Arc::new(Locked(Mutex::new(
            made.iter()
                .map(|(k, _, v)| (k.clone(), v.clone()))
                .collect(),
        )));
        let rw = Arc::new(ReadWrite(RwLock::new(
            made.iter()
                .map(|(k, _, v)| (k.clone(), v.clone()))
                .collect(),
        )));
        for threads in [1usize, 2, 4] {
            let id = |name: &str| BenchmarkId::new(name, format!("{keys}keys/{threads}threads"));
            group.bench_function(id("dashmap"), |b| {
                b.iter_custom(|n| run_threads(&dash, &lookup, threads, n))
            });
            group.bench_function(id("mutex_hashmap"), |b| {
                b.iter_custom(|n| run_threads(&locked, &lookup, threads, n))
            });
            group.bench_function(id("rwlock_hashmap"), |b| {
                b.iter_custom(|n| run_threads(&rw, &lookup, threads, n))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, lease_hit, map_comparison);
criterion_main!(benches);
