//! Resets pushed between sidecars through Redis pub/sub (issue 25 item 12): a reset on one
//! sidecar reaches another at once, on standalone Redis and on a cluster, and without the bus
//! the other keeps deciding on its state of the old bucket.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::config::RedisSettings;
use sluice_core::{Descriptor, Entry, SystemClock};
use sluice_engine::{Code, Engine, EngineMetrics, EngineSettings, RateLimitRequest};
use sluice_redis::{RedisMetrics, RedisStore};

/// 3 an hour: a denied key gets no token back for 20 minutes, so only a reset admits it.
const RULES: &str =
    "domain: t\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n";

/// A sidecar: a store of its own on `settings`, and an engine on it running its maintenance
/// loop (which applies pushed resets) until the test ends.
async fn sidecar(settings: &RedisSettings, metrics: &RedisMetrics) -> Arc<Engine> {
    let store = RedisStore::start(settings.clone(), metrics.clone()).expect("store");
    common::wait_connected(&store).await;
    let engine = Arc::new(Engine::new(
        sluice_core::parse_config(RULES).expect("rules").rules,
        store,
        Arc::new(SystemClock::new()),
        EngineSettings::default(),
        EngineMetrics::unregistered(),
    ));
    tokio::spawn(Arc::clone(&engine).maintain_until(std::future::pending()));
    engine
}

async fn decide(e: &Engine, user: &str) -> Code {
    let d = [Descriptor::of([("user", user)])];
    e.decide(&RateLimitRequest {
        domain: "t",
        descriptors: &d,
        hits_addend: 0,
    })
    .await
    .overall
}

/// B spends `user`'s 3 tokens and is denied; A resets the key. Returns how long B took to admit
/// `user` again (polling every 2 ms), or `None` if it did not within `wait`.
async fn reset_seen_by_other(
    a: &Engine,
    b: &Engine,
    user: &str,
    wait: Duration,
) -> Option<Duration> {
    for _ in 0..3 {
        assert_eq!(decide(b, user).await, Code::Ok);
    }
    assert_eq!(decide(b, user).await, Code::OverLimit);
    let reset = a
        .reset("t", &[Entry::new("user", user)])
        .await
        .expect("reset");
    assert!(reset.is_some(), "the reset matched the rule");
    let start = Instant::now();
    while start.elapsed() < wait {
        if decide(b, user).await == Code::Ok {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

/// Pushes resets: B admits the reset key well within a second, and says it heard one.
async fn pushed(settings: RedisSettings) {
    let (ma, mb) = (RedisMetrics::unregistered(), RedisMetrics::unregistered());
    let a = sidecar(&settings, &ma).await;
    let b = sidecar(&settings, &mb).await;
    // Both are subscribed once their subscription is confirmed; give it a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for user in ["alice", "bob", "carol"] {
        let took = reset_seen_by_other(&a, &b, user, Duration::from_secs(5)).await;
        let took = took.unwrap_or_else(|| panic!("B never saw {user}'s reset"));
        assert!(took < Duration::from_secs(1), "{user}: {took:?}");
    }
    let count = |m: &RedisMetrics, event: &str| m.pushed_resets.with_label_values(&[event]).get();
    assert_eq!((count(&ma, "sent"), count(&mb, "received")), (3, 3));
    // A does not act on its own messages.
    assert_eq!(count(&ma, "received"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_reaches_another_sidecar_at_once_on_standalone_redis() {
    let redis = common::Standalone::start().await;
    pushed(common::standalone_settings(&redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_reaches_another_sidecar_at_once_on_a_redis_cluster() {
    let cluster = common::Cluster::start().await;
    let mut settings = common::cluster_settings(cluster.nodes());
    // B listens on another node than the first seed: a message must cross the cluster bus.
    settings.cluster_nodes.rotate_left(1);
    pushed(settings).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_bus_another_sidecar_keeps_its_state_of_the_old_bucket() {
    let redis = common::Standalone::start().await;
    let settings = RedisSettings {
        push_resets: false,
        ..common::standalone_settings(&redis.url())
    };
    let a = sidecar(&settings, &RedisMetrics::unregistered()).await;
    let b = sidecar(&settings, &RedisMetrics::unregistered()).await;
    let took = reset_seen_by_other(&a, &b, "dave", Duration::from_millis(500)).await;
    assert_eq!(took, None, "B admitted dave within 500 ms with no bus");
}
