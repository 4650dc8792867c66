//! One global limit across several engines ("sidecars") on a real Redis and Redis Cluster.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::engine::{admitted, decide, engine};
use sluice_engine::{Code, GlobalStore};
use sluice_redis::{RedisMetrics, RedisStore};

/// Four sidecars hammer one key: together they never admit more than `B + L·t`.
async fn never_over_the_global_limit(stores: Vec<Arc<RedisStore>>, value: &str) {
    for s in &stores {
        common::wait_connected(s).await;
    }
    let engines: Vec<_> = stores.iter().map(|s| Arc::new(engine(s.clone()))).collect();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for e in &engines {
        let e = Arc::clone(e);
        let value = value.to_string();
        tasks.push(tokio::spawn(async move {
            let mut ok = 0usize;
            let deadline = Instant::now() + Duration::from_millis(1_500);
            while Instant::now() < deadline {
                ok += admitted(&e, "global", &value, 10).await;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            ok
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let ideal = 100.0 + 100.0 * elapsed;
    assert!(
        total as f64 <= ideal,
        "admitted {total} > B + L·t = {ideal:.0}"
    );
    assert!(
        total as f64 >= 0.8 * (100.0 + 100.0 * 1.5),
        "admitted only {total} of about {ideal:.0}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_share_one_limit_on_standalone_redis() {
    let redis = common::Standalone::start().await;
    let stores = common::stores(&common::standalone_settings(&redis.url()), 4);
    never_over_the_global_limit(stores, "standalone").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_share_one_limit_on_a_redis_cluster_and_keys_spread_over_nodes() {
    let cluster = common::Cluster::start().await;
    let stores = common::stores(&common::cluster_settings(cluster.nodes()), 4);
    never_over_the_global_limit(stores.clone(), "cluster").await;

    let e = engine(stores[0].clone());
    for i in 0..60 {
        assert_eq!(
            decide(&e, "global", &format!("spread-{i}")).await.overall,
            Code::Ok
        );
    }
    let mut nodes_with_keys = 0;
    for &port in &cluster.ports {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("client");
        let mut c = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let n: u64 = redis::cmd("DBSIZE")
            .query_async(&mut c)
            .await
            .expect("dbsize");
        nodes_with_keys += usize::from(n > 0);
    }
    assert_eq!(nodes_with_keys, 3, "60 keys should land on all 3 masters");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_mode_and_noscript_after_a_script_flush() {
    let redis = common::Standalone::start().await;
    let store = RedisStore::start(
        common::standalone_settings(&redis.url()),
        RedisMetrics::unregistered(),
    )
    .expect("store");
    let a = engine(store.clone());
    let b = engine(store.clone());
    assert_eq!(admitted(&a, "exact", "k", 3).await, 3);
    common::flush_scripts(&redis.url()).await;
    assert_eq!(
        admitted(&b, "exact", "k", 5).await,
        2,
        "5 per minute across both, scripts reloaded"
    );
    let d = decide(&b, "exact", "k").await;
    assert!(
        !d.outcomes[0].fallback,
        "NOSCRIPT is handled, not a failure"
    );
    assert_eq!(store.live_instances(), 1);
}
