//! The Redis rights sluice needs, as `docs/global-quotas.md` lists them for managed services
//! (ElastiCache, MemoryDB, Azure Cache, Upstash, or any Redis with ACLs): an ACL user with
//! exactly those rights runs every call sluice makes — each script (lease, charge, release,
//! holds, windows, peek, reset, demand, quota top, heartbeat), pushed resets over pub/sub — on
//! standalone Redis and on a cluster. A missing right would be a `NOPERM` error here.

mod common;

use std::time::Duration;

use redis::AsyncCommands;
use sluice_core::Unit;
use sluice_core::bucket::{Algorithm, Rate};
use sluice_core::config::RedisSettings;
use sluice_engine::{GlobalStore, LeaseAsk};

/// The ACL rule of `docs/global-quotas.md` ("The rights sluice needs"), word for word
/// (`the_docs_quote_the_tested_rule` keeps the two equal). Each right is used: without any
/// one of them a test below fails.
pub const SLUICE_ACL: &str = "on ~sluice:* &sluice:* -@all +evalsha +script|load +ping \
+publish +subscribe +del +cluster|slots +hget +hmget +hgetall +hset +hdel +expire +pexpire +pexpireat \
+persist +time +zadd +zcard +zincrby +zrange +zrem +zremrangebyrank +zremrangebyscore +zscore \
+zunion";

/// Creates user `sluice` with password `s3cret` and [`SLUICE_ACL`] on each of `urls`.
async fn create_user(urls: &[String]) {
    for url in urls {
        let client = redis::Client::open(url.as_str()).expect("client");
        let mut c = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect as default");
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg("sluice").arg("reset").arg(">s3cret");
        for rule in SLUICE_ACL.split_whitespace() {
            cmd.arg(rule);
        }
        let _: () = cmd.query_async(&mut c).await.expect("ACL SETUSER");
    }
}

/// `redis://sluice:s3cret@host:port` for `redis://host:port`.
fn as_sluice(url: &str) -> String {
    url.replacen("redis://", "redis://sluice:s3cret@", 1)
}

fn rate(algorithm: Algorithm) -> Rate {
    match algorithm {
        Algorithm::Concurrency => Rate {
            requests_per_unit: 0,
            unit: Unit::Second,
            unit_multiplier: 5,
            burst: 3,
            algorithm,
        },
        _ => Rate {
            algorithm,
            ..Rate::per_unit(100, Unit::Minute)
        },
    }
}

/// Every kind of call sluice makes, through two sidecars' stores on `settings`.
async fn every_call(settings: RedisSettings, admin: &[String]) {
    let stores = common::stores(&settings, 2);
    for s in &stores {
        common::wait_connected(s).await;
    }
    let (a, b) = (&stores[0], &stores[1]);
    let mut pushed = b.pushed_resets().expect("a Redis store pushes resets");
    for (i, algorithm) in [
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("sluice:{{acl{i}}}:k");
        let r = rate(algorithm);
        let ask = LeaseAsk {
            want: 10,
            least: 1,
            turn_gap: 10_000,
            starved_below: 1,
            reserve: None,
            queue_below: 10,
            next_needs: 1,
        };
        let g = a.lease_asking(&key, r, ask).await.expect("lease");
        assert!(g.granted >= 1, "{algorithm:?}: {g:?}");
        a.release(&key, r, g.granted, g.window)
            .await
            .expect("release");
        a.charge(&key, r, 5, 50).await.expect("charge (post-paid)");
        a.close_window(&key, r, g.window)
            .await
            .expect("close a window");
        a.peek(&key, r).await.expect("peek (quota get)");
        a.demand(&key, 7, 1_000, Duration::from_secs(5))
            .await
            .expect("demand (RLQS)");
    }
    // Holds: slots per holder, given back.
    let (key, r) = ("sluice:{acl-holds}:k", rate(Algorithm::Concurrency));
    let g = a.lease(key, r, 2).await.expect("hold slots");
    assert_eq!(g.granted, 2);
    a.release_slots(key, r, 2).await.expect("give slots back");
    // A bucket that never refills (L = 0) is kept without an expiry.
    let never = Rate {
        requests_per_unit: 0,
        burst: 5,
        ..Rate::per_unit(0, Unit::Hour)
    };
    let g = a.lease("sluice:{acl-never}:k", never, 2).await;
    assert_eq!(g.expect("lease a bucket that never refills").granted, 2);
    // quota top: denials summed fleet-wide, read back; a slot beyond its heaviest members
    // trimmed.
    let many: Vec<(String, u64)> = (0..sluice_engine::top::KEEP_PER_SLOT + 10)
        .map(|i| (format!("sluice:{{acl-top}}:{i}"), 1))
        .collect();
    a.add_denied(41, &many).await.expect("add and trim denied");
    a.add_denied(42, &[("sluice:{acl0}:k".to_string(), 3)])
        .await
        .expect("add denied");
    let top = b.top_denied(42, 42).await.expect("top denied");
    assert_eq!(top, [("sluice:{acl0}:k".to_string(), 3)]);
    let trimmed = b.top_denied(41, 41).await.expect("top denied");
    assert_eq!(trimmed.len(), sluice_engine::top::KEEP_PER_SLOT);
    // A reset, pushed to the other sidecar over pub/sub.
    a.reset("sluice:{acl0}:k", b"the-local-key")
        .await
        .expect("reset");
    let got = tokio::time::timeout(Duration::from_secs(5), pushed.recv())
        .await
        .expect("the pushed reset within 5 s")
        .expect("received");
    assert_eq!(&got[..], b"the-local-key");
    // Heartbeats: each sidecar sees the other.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while a.live_instances() < 2 || b.live_instances() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "heartbeats: {} and {} live",
            a.live_instances(),
            b.live_instances()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for s in &stores {
        assert!(!s.degraded(), "a store went degraded");
    }
    // Leaving at shutdown takes the instance out of the live set at once.
    assert_eq!(live_in_redis(admin).await, 2);
    a.shutdown().await;
    assert_eq!(live_in_redis(admin).await, 1, "a left");
}

/// The members of the live instances' set, read as the default user on `admin` (one node's
/// URL, or a cluster's nodes).
async fn live_in_redis(admin: &[String]) -> u64 {
    let mut zcard = redis::cmd("ZCARD");
    zcard.arg("sluice:{instances}:until");
    if let [url] = admin {
        let client = redis::Client::open(url.as_str()).expect("client");
        let mut c = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        zcard.query_async(&mut c).await.expect("ZCARD")
    } else {
        let client = redis::cluster::ClusterClient::new(admin.to_vec()).expect("client");
        let mut c = client.get_async_connection().await.expect("connect");
        zcard.query_async(&mut c).await.expect("ZCARD")
    }
}

/// The user really is limited: it may not touch a key outside `sluice:*`, nor run `FLUSHALL`.
async fn user_is_limited(url: &str) {
    let client = redis::Client::open(as_sluice(url)).expect("client");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect as sluice");
    let refused = |r: redis::RedisResult<()>| match r {
        Err(e) => e.code() == Some("NOPERM"),
        Ok(()) => false,
    };
    let other = c.hset::<_, _, _, ()>("other:key", "f", 1).await;
    assert!(refused(other), "a key outside sluice:*");
    let flush = redis::cmd("FLUSHALL").query_async::<()>(&mut c).await;
    assert!(refused(flush), "FLUSHALL");
    let own = c.hset::<_, _, _, ()>("sluice:{own}:key", "f", 1).await;
    assert!(own.is_ok(), "a key of its own: {own:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_the_documented_rights_runs_every_call_on_standalone() {
    let redis = common::Standalone::start().await;
    create_user(&[redis.url()]).await;
    user_is_limited(&redis.url()).await;
    every_call(
        common::standalone_settings(&as_sluice(&redis.url())),
        &[redis.url()],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_the_documented_rights_runs_every_call_on_a_cluster() {
    let cluster = common::Cluster::start().await;
    create_user(&cluster.nodes()).await;
    let nodes = cluster.nodes().iter().map(|n| as_sluice(n)).collect();
    every_call(common::cluster_settings(nodes), &cluster.nodes()).await;
}

#[test]
fn the_docs_quote_the_tested_rule() {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/global-quotas.md"
    ))
    .expect("docs/global-quotas.md");
    let rule = format!("ACL SETUSER sluice >PASSWORD {SLUICE_ACL}");
    let quoted: String = docs.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        quoted.contains(&rule),
        "docs/global-quotas.md should quote: {rule}"
    );
}
