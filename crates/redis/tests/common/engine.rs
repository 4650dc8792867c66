//! Engines ("sidecars") over a real Redis store.

use std::sync::Arc;

use sluice_core::{Descriptor, SystemClock};
use sluice_engine::{Code, Engine, EngineMetrics, EngineSettings, GlobalStore, RateLimitRequest};

/// Rules used by the engine tests: `global` is strict, `exact` is exact, `down_*` pick fallbacks,
/// `budget` is post-paid.
pub const RULES: &str = r#"
domain: t
descriptors:
  - key: global
    rate_limit: {unit: second, requests_per_unit: 100, burst: 100}
  - key: exact
    rate_limit: {unit: minute, requests_per_unit: 5, mode: exact}
  - key: share
    rate_limit: {unit: second, requests_per_unit: 40, fallback: local_share}
  - key: allow
    rate_limit: {unit: hour, requests_per_unit: 1, fallback: allow}
  - key: deny
    rate_limit: {unit: hour, requests_per_unit: 1000, fallback: deny}
  - key: budget
    rate_limit: {unit: minute, requests_per_unit: 1000, charge: post_paid}
"#;

/// An engine with `RULES` over `store`.
pub fn engine(store: Arc<dyn GlobalStore>) -> Engine {
    engine_with(RULES, store)
}

/// An engine (a sidecar) with the rules of `config` over `store`, default settings, the
/// system clock.
pub fn engine_with(config: &str, store: Arc<dyn GlobalStore>) -> Engine {
    let rules = sluice_core::parse_config(config).expect("rules").rules;
    Engine::new(
        rules,
        store,
        Arc::new(SystemClock::new()),
        EngineSettings::default(),
        EngineMetrics::unregistered(),
    )
}

/// An engine (a sidecar) with the rules of `config` and `settings`, on a store of its own over
/// the standalone Redis at `url` (so its own holder and connections), once connected.
pub async fn on_redis(url: &str, config: &str, settings: EngineSettings) -> Arc<Engine> {
    let store = sluice_redis::RedisStore::start(
        super::standalone_settings(url),
        sluice_redis::RedisMetrics::unregistered(),
    )
    .expect("store");
    super::wait_connected(&store).await;
    Arc::new(Engine::new(
        sluice_core::parse_config(config).expect("rules").rules,
        store,
        Arc::new(SystemClock::new()),
        settings,
        EngineMetrics::unregistered(),
    ))
}

/// One decision on a single descriptor `key=value`.
pub async fn decide(e: &Engine, key: &str, value: &str) -> sluice_engine::Decision {
    let d = [Descriptor::of([(key, value)])];
    e.decide(&RateLimitRequest {
        domain: "t",
        descriptors: &d,
        hits_addend: 0,
    })
    .await
}

/// How many of `n` decisions are admitted.
pub async fn admitted(e: &Engine, key: &str, value: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(decide(e, key, value).await.overall == Code::Ok);
    }
    ok
}

/// One decision on `key=value` with an explicit per-descriptor hits_addend (0: a check of a
/// post-paid rule; more: a report of usage).
pub async fn decide_hits(e: &Engine, key: &str, value: &str, hits: u64) -> Code {
    let mut d = Descriptor::of([(key, value)]);
    d.hits_addend = Some(hits);
    e.decide(&RateLimitRequest {
        domain: "t",
        descriptors: &[d],
        hits_addend: 0,
    })
    .await
    .overall
}
