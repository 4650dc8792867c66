//! Redis failing under load: callers never see errors, fallbacks apply within the timeout, and
//! global enforcement returns soon after Redis does.

mod common;

use std::time::{Duration, Instant};

use common::engine::{admitted, decide, engine};
use sluice_engine::{Code, GlobalStore};
use sluice_redis::{RedisMetrics, RedisStore};

async fn until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !f() {
        assert!(started.elapsed() < limit, "{what} not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_means_fallbacks_not_errors_then_recovery() {
    let redis = common::Standalone::start().await;
    let metrics = RedisMetrics::unregistered();
    let store = RedisStore::start(common::standalone_settings(&redis.url()), metrics.clone())
        .expect("store");
    let e = engine(store.clone());
    assert_eq!(admitted(&e, "global", "warm", 5).await, 5);
    assert!(!decide(&e, "global", "warm").await.outcomes[0].fallback);

    redis.container.pause().await.expect("pause");
    // Cold keys need Redis: each decision costs at most one timeout (50 ms here) until the
    // breaker opens, then nothing.
    let started = Instant::now();
    let d = decide(&e, "share", "cold-1").await;
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    assert!(
        d.outcomes[0].fallback && d.overall == Code::Ok,
        "local_share admits: {d:?}"
    );
    for i in 0..5 {
        decide(&e, "share", &format!("cold-{i}")).await;
    }
    until("breaker open", Duration::from_secs(2), || store.degraded()).await;
    assert_eq!(metrics.degraded.get(), 1);
    let fast = Instant::now();
    assert_eq!(admitted(&e, "allow", "x", 50).await, 50, "fallback: allow");
    assert_eq!(admitted(&e, "deny", "x", 5).await, 0, "fallback: deny");
    // local_share with one live instance: the whole limit (40/s, burst 40), enforced locally.
    // The bucket refills while the 100 decisions run (one token per 25 ms on a loaded CI
    // machine), so the bound is the burst plus what the elapsed time paid for.
    let spent = Instant::now();
    let share = admitted(&e, "share", "y", 100).await;
    let refilled = (spent.elapsed().as_secs_f64() * 40.0).ceil() as usize;
    assert!(
        (40..=40 + refilled).contains(&share),
        "local_share admitted {share} of 100 in {:?}",
        spent.elapsed()
    );
    assert!(
        fast.elapsed() < Duration::from_millis(200),
        "an open breaker costs nothing: {:?}",
        fast.elapsed()
    );

    redis.container.unpause().await.expect("unpause");
    let back = until("recovery", Duration::from_secs(2), || !store.degraded()).await;
    let d = decide(&e, "deny", "after").await;
    assert!(
        !d.outcomes[0].fallback && d.overall == Code::Ok,
        "global enforcement again after {back:?}: {d:?}"
    );
    assert_eq!(metrics.degraded.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_redis_is_used_again_and_sluice_starts_while_redis_is_down() {
    let redis = common::Standalone::start().await;
    redis.container.stop().await.expect("stop");
    let store = RedisStore::start(
        common::standalone_settings(&redis.url()),
        RedisMetrics::unregistered(),
    )
    .expect("store");
    let e = engine(store.clone());
    let d = decide(&e, "allow", "z").await;
    assert!(
        d.outcomes[0].fallback && d.overall == Code::Ok,
        "starts degraded: {d:?}"
    );
    redis.container.start().await.expect("restart");
    until("recovery after restart", Duration::from_secs(5), || {
        !store.degraded()
    })
    .await;
    // Up to 5 s, as for the probe above: right after a restart the first script calls can still
    // fail (NOSCRIPT reload, a loaded machine) and re-open the breaker for a probe interval; one
    // CI run under full load did not get a Redis decision within the 1 s allowed before.
    let mut ok = false;
    for _ in 0..250 {
        let d = decide(&e, "allow", "z2").await;
        if !d.outcomes[0].fallback {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok, "decisions use Redis again after it returns");
}

/// One bucket key that is not a bucket (`SET` to a string by hand) fails its own calls only:
/// its rule's fallback applies to that key, the breaker stays closed, and every other key keeps
/// leasing (three WRONGTYPE errors used to take the whole sidecar off Redis, again after every
/// probe).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_key_fails_alone_and_never_opens_the_breaker() {
    let redis = common::Standalone::start().await;
    let metrics = RedisMetrics::unregistered();
    let store = RedisStore::start(common::standalone_settings(&redis.url()), metrics.clone())
        .expect("store");
    common::wait_connected(&store).await;
    let client = redis::Client::open(redis.url()).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let corrupt = "sluice:{corrupt}:k=v";
    let _: () = redis::cmd("SET")
        .arg(corrupt)
        .arg("not a bucket")
        .query_async(&mut conn)
        .await
        .expect("SET");
    let rate = sluice_core::bucket::Rate::per_unit(10, sluice_core::unit::Unit::Second);
    for _ in 0..10 {
        let failed = store
            .lease(corrupt, rate, 1)
            .await
            .expect_err("not a bucket");
        assert!(failed.to_string().contains("WRONGTYPE"), "{failed}");
    }
    assert!(!store.degraded(), "one key's errors opened the breaker");
    assert_eq!(metrics.breaker_opens.get(), 0);
    assert_eq!(metrics.degraded.get(), 0);
    let granted = store
        .lease("sluice:{fine}:k=v", rate, 3)
        .await
        .expect("other keys lease");
    assert_eq!(granted.granted, 3);
}
