//! `quota top` on Redis (issue 25 item 10): what two sidecars deny is summed fleet-wide, on
//! standalone Redis and on a cluster, in one bounded set per slot.

mod common;

use std::sync::Arc;

use sluice_core::config::RedisSettings;
use sluice_core::{Descriptor, SystemClock};
use sluice_engine::quota::KeyFilter;
use sluice_engine::{Code, Engine, EngineMetrics, EngineSettings, RateLimitRequest};
use sluice_redis::{RedisMetrics, RedisStore};

/// 2 an hour per user, and 1 000 a second per path (never denied here).
const RULES: &str = "domain: t\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2, name: per_user}\n  - key: path\n    rate_limit: {unit: second, requests_per_unit: 1000}\n";

async fn sidecar(settings: &RedisSettings) -> Engine {
    let store = RedisStore::start(settings.clone(), RedisMetrics::unregistered()).expect("store");
    common::wait_connected(&store).await;
    Engine::new(
        sluice_core::parse_config(RULES).expect("rules").rules,
        store,
        Arc::new(SystemClock::new()),
        EngineSettings::default(),
        EngineMetrics::unregistered(),
    )
}

async fn ask(e: &Engine, key: &str, value: &str, n: usize) -> usize {
    let mut denied = 0;
    for _ in 0..n {
        let d = [Descriptor::of([(key, value)])];
        let code = e
            .decide(&RateLimitRequest {
                domain: "t",
                descriptors: &d,
                hits_addend: 0,
            })
            .await
            .overall;
        denied += usize::from(code == Code::OverLimit);
    }
    denied
}

async fn fleet_wide(settings: RedisSettings) {
    let (a, b) = (sidecar(&settings).await, sidecar(&settings).await);
    // mallory: 2 pass, 38 denied (20 on each); eve: 2 pass, 8 denied; alice passes.
    assert_eq!(ask(&a, "user", "mallory", 22).await, 20);
    assert_eq!(ask(&b, "user", "mallory", 20).await, 20);
    assert_eq!(ask(&b, "user", "eve", 10).await, 8);
    assert_eq!(ask(&a, "user", "alice", 1).await, 0);
    assert_eq!(ask(&a, "path", "/x", 10).await, 0);
    // B's counts reach the store on its flush; A's are flushed by the read itself.
    b.flush_denied().await;
    let top = a.top_denied(&KeyFilter::default(), 10).await.expect("top");
    let rows: Vec<(&str, &str, u64)> = top
        .iter()
        .map(|r| (r.rule.as_str(), r.values.as_str(), r.denied))
        .collect();
    assert_eq!(
        rows,
        [
            ("per_user", "user=mallory", 40),
            ("per_user", "user=eve", 8)
        ]
    );
    assert_eq!(top[0].domain, "t");
    let n1 = a.top_denied(&KeyFilter::default(), 1).await.expect("top");
    assert_eq!(n1.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_hits_are_summed_fleet_wide_on_standalone_redis() {
    let redis = common::Standalone::start().await;
    fleet_wide(common::standalone_settings(&redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_hits_are_summed_fleet_wide_on_a_redis_cluster() {
    let cluster = common::Cluster::start().await;
    fleet_wide(common::cluster_settings(cluster.nodes())).await;
}
