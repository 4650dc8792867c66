//! RLQS demands on a real Redis and a Redis Cluster (`demand.lua`): every sidecar reads every live
//! sidecar's demand for a bucket, a withdrawn or expired demand is gone, and the key goes with
//! the last one.

mod common;

use std::sync::Arc;
use std::time::Duration;

use sluice_core::config::{HumanDuration, RedisSettings};
use sluice_engine::GlobalStore;
use sluice_redis::RedisStore;

const KEY: &str = "sluice:{00000000000000aa:00000000000000bb}:tenant=acme";

/// `settings` with a 1 s timeout: these tests check what `demand.lua` keeps, not how fast; the
/// tests' 50 ms timed out the first call on a cluster (its script loaded first) on a busy CI.
fn patient(settings: RedisSettings) -> RedisSettings {
    RedisSettings {
        timeout: HumanDuration(Duration::from_secs(1)),
        ..settings
    }
}

async fn demands_are_shared(stores: Vec<Arc<RedisStore>>) {
    let [a, b]: [Arc<RedisStore>; 2] = stores.try_into().expect("two stores");
    let ttl = Duration::from_secs(15);
    let mut seen = a.demand(KEY, 1, 150_000, ttl).await.expect("a");
    assert_eq!(seen, vec![150_000]);
    seen = b.demand(KEY, 1, 40_000, ttl).await.expect("b");
    seen.sort_unstable();
    assert_eq!(
        seen,
        vec![40_000, 150_000],
        "same client id, other sidecar: two demands"
    );
    // A new report replaces the sidecar's own demand.
    seen = a.demand(KEY, 1, 90_000, ttl).await.expect("a again");
    seen.sort_unstable();
    assert_eq!(seen, vec![40_000, 90_000]);
    // Withdrawn: gone for everyone.
    assert_eq!(
        b.demand(KEY, 1, 0, ttl).await.expect("withdraw"),
        vec![90_000]
    );
    // Expired: a demand not renewed within its TTL no longer counts.
    b.demand(KEY, 2, 5_000, Duration::from_millis(200))
        .await
        .expect("short");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        a.demand(KEY, 1, 90_000, ttl).await.expect("a"),
        vec![90_000]
    );
    assert_eq!(
        a.demand(KEY, 1, 0, ttl).await.expect("last"),
        Vec::<u64>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_share_their_demands_on_standalone_redis() {
    let redis = common::Standalone::start().await;
    let stores = common::stores(&patient(common::standalone_settings(&redis.url())), 2);
    for s in &stores {
        common::wait_connected(s).await;
    }
    demands_are_shared(stores).await;
    // The bucket itself is untouched: the demands live under their own key.
    let mut conn = redis::Client::open(redis.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let exists: bool = redis::cmd("EXISTS")
        .arg(KEY)
        .query_async(&mut conn)
        .await
        .expect("exists");
    assert!(!exists);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_share_their_demands_on_redis_cluster() {
    let cluster = common::Cluster::start().await;
    let stores = common::stores(&patient(common::cluster_settings(cluster.nodes())), 2);
    for s in &stores {
        common::wait_connected(s).await;
    }
    demands_are_shared(stores).await;
}
