//! Helpers for the Redis store tests: real Redis from sluice-testkit, settings with test timings.
#![allow(dead_code, unused_imports)]

pub mod engine;

use std::time::Duration;

use sluice_core::config::{HumanDuration, RedisSettings};
pub use sluice_testkit::redis::{Cluster, Standalone, image};

/// Waits until `store` is connected (a cluster connects in the background), at most 10 s.
pub async fn wait_connected(store: &sluice_redis::RedisStore) {
    use sluice_engine::GlobalStore;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.degraded() {
        assert!(
            std::time::Instant::now() < deadline,
            "store not connected in 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `n` stores on `settings` (sidecars of one fleet), each with metrics of its own.
pub fn stores(settings: &RedisSettings, n: usize) -> Vec<std::sync::Arc<sluice_redis::RedisStore>> {
    (0..n)
        .map(|_| {
            sluice_redis::RedisStore::start(
                settings.clone(),
                sluice_redis::RedisMetrics::unregistered(),
            )
            .expect("store")
        })
        .collect()
}

/// Settings for `url` with test-friendly timings.
pub fn standalone_settings(url: &str) -> RedisSettings {
    RedisSettings {
        url: Some(url.to_string()),
        cluster_nodes: Vec::new(),
        sentinel: None,
        password_env: None,
        tls_ca_file: None,
        tls_ca_pem: None,
        timeout: HumanDuration(Duration::from_millis(50)),
        connect_timeout: HumanDuration(Duration::from_millis(500)),
        breaker_failures: 3,
        probe_interval: HumanDuration(Duration::from_millis(100)),
        heartbeat_interval: HumanDuration(Duration::from_millis(200)),
        batch_linger: HumanDuration(Duration::from_millis(1)),
        batch_min_wait: None,
        batch_max: 64,
        push_resets: true,
        key_prefix: None,
    }
}

/// Settings for a cluster.
pub fn cluster_settings(nodes: Vec<String>) -> RedisSettings {
    RedisSettings {
        url: None,
        cluster_nodes: nodes,
        ..standalone_settings("redis://unused")
    }
}

/// Makes the Redis at `url` forget every script (as a restart or failover does): the next call
/// of each script answers NOSCRIPT.
pub async fn flush_scripts(url: &str) {
    let client = redis::Client::open(url).expect("client");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut c)
        .await
        .expect("flush");
}

/// Script calls the Redis at `url` has run so far (`INFO commandstats`: EVALSHA and EVAL).
pub async fn script_calls(url: &str) -> u64 {
    let client = redis::Client::open(url).expect("client");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .expect("INFO");
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
