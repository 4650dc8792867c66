//! Two fleets on one Redis, each with its own `redis.key_prefix` (envoyproxy/ratelimit's
//! `CACHE_KEY_PREFIX`, issue 43): neither spends the other's buckets, counts the other's
//! instances, hears the other's resets or sees the other's `quota top`; every key each writes
//! starts with its prefix; and on a Redis Cluster a prefixed bucket still lands in its own tag's
//! slot (the batched calls route by it).

mod common;

use std::sync::Arc;
use std::time::Duration;

use sluice_core::Unit;
use sluice_core::bucket::Rate;
use sluice_core::config::RedisSettings;
use sluice_engine::GlobalStore;
use sluice_redis::{RedisMetrics, RedisStore};

const KEY: &str = "sluice:{t|user=alice}";

fn fleet(url: &str, prefix: Option<&str>) -> RedisSettings {
    RedisSettings {
        key_prefix: prefix.map(str::to_string),
        ..common::standalone_settings(url)
    }
}

async fn store(settings: &RedisSettings) -> Arc<RedisStore> {
    let store = RedisStore::start(settings.clone(), RedisMetrics::unregistered()).expect("store");
    common::wait_connected(&store).await;
    store
}

/// Every key in the Redis at `url`, sorted.
async fn keys(url: &str) -> Vec<String> {
    let client = redis::Client::open(url).expect("client");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .expect("KEYS");
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_prefixed_fleets_share_a_redis_without_touching_each_other() {
    let redis = common::Standalone::start().await;
    let url = redis.url();
    let a = [
        store(&fleet(&url, Some("fleet-a:"))).await,
        store(&fleet(&url, Some("fleet-a:"))).await,
    ];
    let b = store(&fleet(&url, Some("fleet-b:"))).await;
    let unprefixed = store(&fleet(&url, None)).await;
    let rate = Rate::per_unit(10, Unit::Hour);

    // The same store key is three buckets: each fleet spends its own 10.
    assert_eq!(a[0].lease(KEY, rate, 10).await.expect("a").granted, 10);
    assert_eq!(a[1].lease(KEY, rate, 10).await.expect("a").granted, 0);
    assert_eq!(b.lease(KEY, rate, 10).await.expect("b").granted, 10);
    assert_eq!(
        unprefixed.lease(KEY, rate, 10).await.expect("c").granted,
        10
    );

    // Each fleet counts its own instances (before prefixes, all four counted 4).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let counts = [
            a[0].live_instances(),
            a[1].live_instances(),
            b.live_instances(),
            unprefixed.live_instances(),
        ];
        if counts == [2, 2, 1, 1] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "live counts {counts:?}, want [2, 2, 1, 1]"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A reset in fleet A reaches A's other instance, not fleet B.
    let (mut a_hears, mut b_hears) = (
        a[1].pushed_resets().expect("bus"),
        b.pushed_resets().expect("bus"),
    );
    tokio::time::sleep(Duration::from_millis(300)).await; // subscriptions confirmed
    a[0].reset(KEY, b"t\0user\0alice").await.expect("reset");
    let heard = tokio::time::timeout(Duration::from_secs(2), a_hears.recv()).await;
    assert!(matches!(heard, Ok(Ok(_))), "A's other instance: {heard:?}");
    let heard = tokio::time::timeout(Duration::from_millis(500), b_hears.recv()).await;
    assert!(heard.is_err(), "fleet B heard fleet A's reset: {heard:?}");
    // …and refilled only A's bucket.
    assert_eq!(a[1].lease(KEY, rate, 10).await.expect("a").granted, 10);
    assert_eq!(b.lease(KEY, rate, 1).await.expect("b").granted, 0);

    // `quota top`: A's denials are A's.
    a[0].add_denied(7, &[(KEY.to_string(), 5)])
        .await
        .expect("add");
    assert_eq!(
        a[1].top_denied(7, 7).await.expect("top"),
        vec![(KEY.to_string(), 5)]
    );
    assert_eq!(b.top_denied(7, 7).await.expect("top"), vec![]);

    // Every key a fleet wrote starts with its prefix; the unprefixed store's keys are as before.
    let keys = keys(&url).await;
    for prefix in ["fleet-a:", "fleet-b:"] {
        let ours: Vec<&String> = keys.iter().filter(|k| k.starts_with(prefix)).collect();
        assert!(
            ours.iter().any(|k| k.ends_with(KEY)) && ours.len() >= 2,
            "{prefix}: {keys:?}"
        );
    }
    assert!(
        keys.iter().all(|k| k.starts_with("fleet-a:")
            || k.starts_with("fleet-b:")
            || k.starts_with("sluice:")),
        "{keys:?}"
    );
    assert!(keys.contains(&KEY.to_string()), "{keys:?}");
    assert!(
        keys.contains(&"fleet-a:sluice:{top}:7".to_string()),
        "{keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefixed_bucket_keeps_its_cluster_slot() {
    let cluster = common::Cluster::start().await;
    let settings = RedisSettings {
        key_prefix: Some("fleet-a:".into()),
        ..common::cluster_settings(cluster.nodes())
    };
    let store = store(&settings).await;
    let rate = Rate::per_unit(10, Unit::Hour);
    // Keys on every node of the cluster, through the batched path (routed by slot: a prefix
    // hashed with the tag would answer MOVED and be sent again alone) and the single one.
    for user in ["alice", "bob", "carol", "dave", "erin", "frank"] {
        let key = format!("sluice:{{t|user={user}}}");
        assert_eq!(store.lease(&key, rate, 4).await.expect("lease").granted, 4);
        assert_eq!(
            store
                .lease_at(&key, rate, 10, None)
                .await
                .expect("lease")
                .granted,
            6
        );
        store.release(&key, rate, 6, 0).await.expect("release");
        let left = store.peek(&key, rate).await.expect("peek");
        assert!((6.0..=7.0).contains(&left), "{user}: {left}");
    }
}
