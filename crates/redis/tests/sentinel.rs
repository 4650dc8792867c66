//! Redis behind Redis Sentinel, on real `redis-server` and sentinel processes: the store writes
//! to the master the sentinels name, and after a failover (an operator's `SENTINEL FAILOVER`,
//! which demotes the old master, or the master dying) to the new one, within seconds, with the
//! rules' fallbacks deciding meanwhile.

mod common;

use std::time::{Duration, Instant};

use common::engine::{decide, engine};
use sluice_core::config::{RedisSettings, SentinelSettings};
use sluice_engine::{Code, GlobalStore};
use sluice_redis::{RedisMetrics, RedisStore};
use sluice_testkit::redis::Sentinel;

fn settings(sentinel: &Sentinel) -> RedisSettings {
    RedisSettings {
        url: None,
        sentinel: Some(SentinelSettings {
            master: Sentinel::MASTER.into(),
            nodes: sentinel.nodes(),
        }),
        ..common::standalone_settings("redis://unused")
    }
}

/// A sentinel that accepts connections and never answers (a host gone silent), as
/// `redis://127.0.0.1:PORT`; it stays until the test ends.
fn silent_sentinel() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("redis://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().map_while(Result::ok) {
            held.push(conn);
        }
    });
    url
}

/// Decides `deny` (fallback: deny) on fresh values until one is decided by Redis, not by the
/// fallback, within `limit`; how long that took.
async fn until_global(e: &sluice_engine::Engine, tag: &str, limit: Duration) -> Duration {
    let started = Instant::now();
    for i in 0.. {
        let d = decide(e, "deny", &format!("{tag}-{i}")).await;
        if !d.outcomes[0].fallback {
            assert_eq!(d.overall, Code::Ok, "{d:?}");
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{tag}: still on the fallback after {limit:?}: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!()
}

/// Asks the sentinels every 20 ms until they name `port` as the master; fails after `within`.
async fn until_master(sentinel: &Sentinel, port: u16, within: Duration) {
    let asked = Instant::now();
    while sentinel.master_port().await != port {
        assert!(
            asked.elapsed() < within,
            "the sentinels do not name {port} as master within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_follows_the_master_through_failovers() {
    let started = Instant::now();
    let sentinel = Sentinel::start().await;
    println!(
        "a master, a replica and three sentinels up in {:?}",
        started.elapsed()
    );
    let [first, second] = sentinel.servers;
    let url = |port: u16| format!("redis://127.0.0.1:{port}");
    let metrics = RedisMetrics::unregistered();
    // The first sentinel listed never answers: every lookup and the announcements go on
    // without it.
    let mut with_silent = settings(&sentinel);
    let nodes = &mut with_silent.sentinel.as_mut().expect("set").nodes;
    nodes.insert(0, silent_sentinel());
    let store = RedisStore::start(with_silent, metrics.clone()).expect("store");
    let e = engine(store.clone());

    until_global(&e, "start", Duration::from_secs(10)).await;
    assert!(
        common::script_calls(&url(first)).await > 0,
        "writes go to the master"
    );
    let on_replica = common::script_calls(&url(second)).await;

    // An operator's failover: the replica is promoted. The sentinels announce it
    // (`+switch-master`) at once; they make the old master its replica only up to 10 s later,
    // and writes that reach it until then are lost. So writes must reach the new master soon
    // after the announcement.
    let port = |p: u16| p.to_string();
    (sentinel.cli(&[
        "-p",
        &port(sentinel.sentinels[0]),
        "sentinel",
        "failover",
        Sentinel::MASTER,
    ]))
    .await;
    let asked = Instant::now();
    until_master(&sentinel, second, Duration::from_secs(15)).await;
    let switched = Instant::now();
    for i in 0.. {
        decide(&e, "deny", &format!("promoted-{i}")).await;
        if common::script_calls(&url(second)).await > on_replica {
            break;
        }
        assert!(
            switched.elapsed() < Duration::from_secs(3),
            "writes still not on the new master {:?} after the switch",
            switched.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "SENTINEL FAILOVER: the switch {:?} after it was asked for; writes on the new master {:?} after the switch",
        switched - asked,
        switched.elapsed()
    );
    let before = common::script_calls(&url(second)).await;
    until_global(&e, "promoted-again", Duration::from_secs(1)).await;
    assert!(common::script_calls(&url(second)).await > before);

    // The new master dies: the sentinels agree it is down (1 s here) and promote the other.
    (sentinel.cli(&["-p", &port(second), "shutdown", "nosave", "now", "force"])).await;
    let down = Instant::now();
    let gone = sentinel.cli(&["-p", &port(second), "ping"]).await;
    assert!(!gone.contains("PONG"), "the master still answers: {gone:?}");
    let took = until_global(&e, "after-death", Duration::from_secs(20)).await;
    println!("master killed: decided by Redis again {took:?} later");
    // The sentinels' answer may lag the store's own view (a CI run read the dead master's port
    // right after a decision was made by Redis again): asked until it names the first.
    until_master(&sentinel, first, Duration::from_secs(20)).await;
    let calls = common::script_calls(&url(first)).await;
    until_global(&e, "after-death-again", Duration::from_secs(1)).await;
    assert!(
        common::script_calls(&url(first)).await > calls,
        "decided on the first server again, {took:?} after a {:?} outage began",
        down.elapsed()
    );
    // Every call meanwhile was a fallback or an error the breaker counted, never a hang: the
    // store is connected again.
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.degraded() {
        assert!(Instant::now() < deadline, "still degraded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(metrics.degraded.get(), 0);
    store.shutdown().await;

    // A master name the sentinels do not know: every decision is its rule's fallback, at once.
    let mut wrong = settings(&sentinel);
    wrong.sentinel.as_mut().expect("set").master = "nosuch".into();
    let store = RedisStore::start(wrong, RedisMetrics::unregistered()).expect("store");
    let e = engine(store.clone());
    let started = Instant::now();
    let d = decide(&e, "deny", "x").await;
    assert!(
        d.outcomes[0].fallback && d.overall == Code::OverLimit,
        "{d:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    store.shutdown().await;
}
