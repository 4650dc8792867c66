//! Batching on a real Redis and Redis Cluster: concurrent lease calls on many keys share round
//! trips, every key still gets exactly its own tokens, and calls a batch cannot run (scripts
//! flushed: NOSCRIPT) are sent again alone.

mod common;

use std::sync::Arc;
use std::time::Duration;

use sluice_core::bucket::Rate;
use sluice_core::config::HumanDuration;
use sluice_core::unit::Unit;
use sluice_engine::GlobalStore;
use sluice_redis::{RedisMetrics, RedisStore};

const KEYS: usize = 300;

/// Leases `want` on every key at once; returns each grant.
async fn lease_all(store: &Arc<RedisStore>, round: &str, want: u64) -> Vec<u64> {
    let rate = Rate::per_unit(10, Unit::Hour);
    let tasks: Vec<_> = (0..KEYS)
        .map(|i| {
            let store = Arc::clone(store);
            let key = format!("sluice:{{batch-{round}-{i}}}");
            tokio::spawn(async move { store.lease(&key, rate, want).await.map(|g| g.granted) })
        })
        .collect();
    let mut grants = Vec::new();
    for t in tasks {
        grants.push(t.await.expect("task").expect("lease"));
    }
    grants
}

async fn batches_share_round_trips(store: Arc<RedisStore>, metrics: RedisMetrics, ports: &[u16]) {
    common::wait_connected(&store).await;
    // A fresh Redis knows no script: the first batches answer NOSCRIPT and their calls go alone
    // (loading it on each node). Measured from the second round on.
    assert_eq!(lease_all(&store, "warm", 1).await, vec![1; KEYS]);
    let trips = metrics.round_trips.get();
    assert_eq!(lease_all(&store, "a", 3).await, vec![3; KEYS]);
    let used = metrics.round_trips.get() - trips;
    // One heartbeat may fall in; batches of up to 64 per node need at least 5 round trips.
    assert!(
        used <= (KEYS / 10) as u64,
        "{KEYS} lease calls took {used} round trips"
    );
    assert!(metrics.batched_calls.get() >= KEYS as u64);
    // Each key kept its own count: 10 per hour, 3 taken, 7 left.
    assert_eq!(lease_all(&store, "a", 10).await, vec![7; KEYS]);

    // Redis forgets the scripts: calls of the next batch answer NOSCRIPT, go again alone
    // (loading the script), and are granted as before.
    for &port in ports {
        common::flush_scripts(&format!("redis://127.0.0.1:{port}")).await;
    }
    assert_eq!(lease_all(&store, "b", 4).await, vec![4; KEYS]);
    assert!(!store.degraded(), "NOSCRIPT must not open the breaker");
}

fn settings_with_linger(
    mut s: sluice_core::config::RedisSettings,
) -> sluice_core::config::RedisSettings {
    // Every batch gathers for 5 ms: long enough that the spawned calls join few batches on a
    // loaded CI machine.
    s.batch_min_wait = Some(HumanDuration(Duration::from_millis(5)));
    s.timeout = HumanDuration(Duration::from_millis(500));
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_on_standalone_redis() {
    let redis = common::Standalone::start().await;
    let metrics = RedisMetrics::unregistered();
    let store = RedisStore::start(
        settings_with_linger(common::standalone_settings(&redis.url())),
        metrics.clone(),
    )
    .expect("store");
    batches_share_round_trips(store, metrics, &[redis.port]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_per_node_on_a_redis_cluster() {
    let cluster = common::Cluster::start().await;
    let metrics = RedisMetrics::unregistered();
    let store = RedisStore::start(
        settings_with_linger(common::cluster_settings(cluster.nodes())),
        metrics.clone(),
    )
    .expect("store");
    batches_share_round_trips(store, metrics, &cluster.ports).await;
}
