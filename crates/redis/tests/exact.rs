//! `mode: exact` under concurrency (issue 29): concurrent decisions of one key share a store
//! call instead of queueing for one each, and each is still all or nothing: never more admitted
//! than the bucket holds, every token accounted for.

mod common;

use std::sync::Arc;

use sluice_engine::{Code, Engine, EngineSettings};

/// `hot`: exact, 10 000 an hour (never short here); `scarce`: exact, 20 an hour.
const RULES: &str = r#"
domain: t
descriptors:
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 10000, mode: exact}
  - key: scarce
    rate_limit: {unit: hour, requests_per_unit: 20, mode: exact}
"#;

async fn engine(url: &str) -> Arc<Engine> {
    common::engine::on_redis(url, RULES, EngineSettings::default()).await
}

/// `n` decisions of `key=v` at once; how many were admitted.
async fn at_once(e: &Arc<Engine>, key: &'static str, n: usize) -> usize {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let e = Arc::clone(e);
            tokio::spawn(async move { common::engine::decide(&e, key, "v").await.overall })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.expect("decision") == Code::Ok);
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_exact_decisions_of_one_key_share_store_calls() {
    let redis = common::Standalone::start().await;
    let e = engine(&redis.url()).await;
    // The first decision alone (its call carries the script to Redis).
    assert_eq!(at_once(&e, "hot", 1).await, 1);
    let before = common::script_calls(&redis.url()).await;
    assert_eq!(at_once(&e, "hot", 200).await, 200);
    let calls = common::script_calls(&redis.url()).await - before;
    // One call each was 200; calls now carry whoever waits behind the one in flight.
    assert!(
        calls < 100,
        "{calls} script calls for 200 concurrent decisions"
    );
    // Exact: nothing leased beyond the requests (every token left is in Redis).
    let view = e.quota("t", &[sluice_core::Entry::new("hot", "v")]).await;
    assert_eq!(view.local_lease, 0, "{view:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_calls_never_admit_more_than_the_bucket_holds() {
    let redis = common::Standalone::start().await;
    let e = engine(&redis.url()).await;
    // 60 at once on a bucket of 20 (a refill of one every 3 minutes: none during the test).
    assert_eq!(at_once(&e, "scarce", 60).await, 20);
    // And none later: every token went to an admitted request.
    assert_eq!(at_once(&e, "scarce", 10).await, 0);
}
