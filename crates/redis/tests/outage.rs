//! After a Redis outage (issue 41, item 8), on a real Redis: two sidecars with a hot key at 20%
//! of its limit deny nothing when Redis answers again, whether it comes back as it was (paused)
//! or empty (flushed, as a restart without persistence). An exact limiter admits every one of
//! these requests; before, what each fallback admitted was charged in full to a bucket that had
//! refilled to its burst meanwhile, which emptied it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use sluice_core::{Descriptor, SystemClock};
use sluice_engine::{Code, Engine, EngineMetrics, EngineSettings, GlobalStore, RateLimitRequest};

/// 100/s with a burst of 20: each sidecar's share while Redis is down is 50/s, burst 10, which
/// a fallback at 10/s spends in about a second, so the outage can be short.
const HOT: &str = r#"
domain: t
descriptors:
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 100, burst: 20}
"#;

/// Requests the two sidecars sent and denied: before Redis went away, while it was away, and
/// after it answered again.
#[derive(Debug, Default)]
struct Tally {
    sent: [u64; 3],
    denied: [u64; 3],
}

const BEFORE: usize = 0;
const DURING: usize = 1;
const AFTER: usize = 2;

/// Two sidecars (each its own `RedisStore`, so Redis counts two live instances) send 10
/// requests a second each on one key for 1.5 s, Redis is paused for 3 s (then flushed if
/// `flush`), and they go on for 2.5 s after it answers again.
async fn across_an_outage(redis: &common::Standalone, value: &str, flush: bool) -> Tally {
    let stores = common::stores(&common::standalone_settings(&redis.url()), 2);
    for store in &stores {
        common::wait_connected(store).await;
    }
    let engines: Vec<Engine> = stores
        .iter()
        .map(|store| {
            Engine::new(
                sluice_core::parse_config(HOT).expect("rules").rules,
                Arc::clone(store) as Arc<dyn GlobalStore>,
                Arc::new(SystemClock::new()),
                EngineSettings::default(),
                EngineMetrics::unregistered(),
            )
        })
        .collect();
    // Both heartbeats seen: each fallback enforces half the limit.
    while stores.iter().any(|s| s.live_instances() < 2) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let d = [Descriptor::of([("hot", value)])];
    let request = RateLimitRequest {
        domain: "t",
        descriptors: &d,
        hits_addend: 1,
    };
    // One request every 50 ms, alternating: 10 a second on each sidecar. A tick missed on a
    // busy machine is late, never doubled into a burst.
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tally = Tally::default();
    let mut turn = 0usize;
    let mut send = async |tally: &mut Tally, phase: usize| {
        ticks.tick().await;
        turn = 1 - turn;
        let denied = engines[turn].decide(&request).await.overall != Code::Ok;
        tally.sent[phase] += 1;
        tally.denied[phase] += u64::from(denied);
    };
    for _ in 0..30 {
        send(&mut tally, BEFORE).await;
    }
    redis.container.pause().await.expect("pause");
    for _ in 0..60 {
        send(&mut tally, DURING).await;
    }
    redis.container.unpause().await.expect("unpause");
    if flush {
        let client = redis::Client::open(redis.url()).expect("client");
        let mut c = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut c)
            .await
            .expect("FLUSHALL");
    }
    for _ in 0..50 {
        send(&mut tally, AFTER).await;
    }
    assert!(
        stores.iter().all(|s| !s.degraded()),
        "both sidecars back on Redis"
    );
    for store in &stores {
        store.shutdown().await;
    }
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_at_a_fifth_of_its_limit_is_not_denied_after_redis_returns() {
    let redis = common::Standalone::start().await;
    for (value, flush) in [("paused", false), ("flushed", true)] {
        let tally = across_an_outage(&redis, value, flush).await;
        println!("{value}: {tally:?}");
        assert_eq!(tally.denied[BEFORE], 0, "{value}: {tally:?}");
        assert_eq!(
            tally.denied[AFTER], 0,
            "{value}: denied after Redis answered again, at 20% of the limit: {tally:?}"
        );
    }
}
