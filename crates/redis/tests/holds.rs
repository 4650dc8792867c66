//! Concurrency limits on a real Redis: each sidecar's slots are counted apart, a sidecar gives
//! back only what it holds, and the slots of a sidecar that stops calling (killed) come back a
//! hold timeout after its last call.

mod common;

use std::sync::Arc;
use std::time::Duration;

use sluice_core::bucket::{Algorithm, Rate};
use sluice_core::descriptor::Hold;
use sluice_core::{Descriptor, Unit};
use sluice_engine::{Code, Engine, GlobalStore, RateLimitRequest};

/// 4 in flight, a hold timeout of 2 s.
fn slots() -> Rate {
    Rate {
        requests_per_unit: 0,
        unit: Unit::Second,
        unit_multiplier: 2,
        burst: 4,
        algorithm: Algorithm::Concurrency,
    }
}

const START: u64 = 1_700_000_000_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_holder_gives_back_only_its_own_and_a_silent_one_lapses() {
    let redis = common::Standalone::start().await;
    let stores = common::stores(&common::standalone_settings(&redis.url()), 2);
    for s in &stores {
        common::wait_connected(s).await;
    }
    let (a, b) = (&stores[0], &stores[1]);
    let (key, rate) = ("{holds}:one", slots());
    let granted = |g: sluice_engine::LeaseGrant| (g.granted, g.remaining, g.ends_in);
    assert_eq!(
        granted(a.lease_at(key, rate, 3, Some(START)).await.expect("lease")),
        (3, 1.0, Some(2_000_000)),
        "a holds 3; the lease lapses a hold timeout on"
    );
    assert_eq!(
        b.lease_at(key, rate, 3, Some(START))
            .await
            .expect("lease")
            .granted,
        1
    );
    assert_eq!(a.peek_at(key, rate, Some(START)).await.expect("peek"), 0.0);
    // a gives back 10: only its 3 count.
    let left = a
        .release_at(key, rate, 10, 0, Some(START + 1))
        .await
        .expect("release");
    assert_eq!(left, 3.0, "free 3, b still holds 1");
    // b's last call was at START: its slot lapses at START + 2 s, not before.
    assert_eq!(
        a.peek_at(key, rate, Some(START + 1_999_999))
            .await
            .expect("peek"),
        3.0
    );
    assert_eq!(
        a.peek_at(key, rate, Some(START + 2_000_000))
            .await
            .expect("peek"),
        4.0
    );
    // b, back after its lapse, gives back nothing it no longer holds.
    let left = b
        .release_at(key, rate, 1, 0, Some(START + 2_000_001))
        .await
        .expect("release");
    assert_eq!(left, 4.0, "never above the limit");

    // A holder's calls keep its slots: a renewal (a grant of 0) moves its lapse on.
    let key = "{holds}:two";
    assert_eq!(
        a.lease_at(key, rate, 4, Some(START))
            .await
            .expect("lease")
            .granted,
        4
    );
    a.lease_at(key, rate, 0, Some(START + 1_500_000))
        .await
        .expect("renew");
    assert_eq!(
        b.peek_at(key, rate, Some(START + 3_000_000))
            .await
            .expect("peek"),
        0.0
    );
    assert_eq!(
        b.peek_at(key, rate, Some(START + 3_500_000))
            .await
            .expect("peek"),
        4.0
    );
}

const RULES: &str = r#"
domain: t
descriptors:
  - key: tenant
    rate_limit: {concurrency: 3, hold_timeout: 3s}
"#;

fn sidecar(store: Arc<dyn GlobalStore>) -> Engine {
    common::engine::engine_with(RULES, store)
}

async fn hold(e: &Engine, op: Hold) -> (Code, Option<u64>, u32) {
    let mut d = Descriptor::of([("tenant", "acme")]);
    d.hold = op;
    let dec = e
        .decide(&RateLimitRequest {
            domain: "t",
            descriptors: &[d],
            hits_addend: 0,
        })
        .await;
    (dec.overall, dec.hold, dec.released)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_share_n_and_a_killed_ones_slots_come_back_within_the_hold_timeout() {
    let redis = common::Standalone::start().await;
    let stores = common::stores(&common::standalone_settings(&redis.url()), 2);
    for s in &stores {
        common::wait_connected(s).await;
    }
    let a = sidecar(stores[0].clone());
    let b = sidecar(stores[1].clone());
    let first = hold(&a, Hold::Acquire).await.1.expect("1 of 3");
    hold(&a, Hold::Acquire).await.1.expect("2 of 3");
    let mine = hold(&b, Hold::Acquire).await.1.expect("3 of 3");
    assert_eq!(
        hold(&b, Hold::Acquire).await.0,
        Code::OverLimit,
        "4th, on b"
    );
    assert_eq!(
        hold(&a, Hold::Acquire).await.0,
        Code::OverLimit,
        "4th, on a"
    );
    // A release on the sidecar that took it: its slot is that sidecar's again at once.
    assert_eq!(hold(&a, Hold::Release(first)).await.2, 1);
    hold(&a, Hold::Acquire).await.1.expect("a's freed slot");
    // A second on, b's request ends and another starts (its hold lapses 3 s from now, after
    // a's slots do: a made its last store call a second ago).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(hold(&b, Hold::Release(mine)).await.2, 1);
    hold(&b, Hold::Acquire).await.1.expect("b's freed slot");
    // a is killed holding 2: no release, no return (dropped; its store stops calling).
    let killed = std::time::Instant::now();
    drop(a);
    // b gets them back a hold timeout after a's last call, within a sweep's period.
    let mut back = None;
    while killed.elapsed() < Duration::from_secs(5) {
        b.sweep().await;
        if hold(&b, Hold::Acquire).await.1.is_some() {
            back = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let back = back.expect("a's slots came back");
    assert!(
        back >= Duration::from_millis(1_500) && back <= Duration::from_millis(2_300),
        "back {back:?} after the kill: at a's lapse (3 s after its last call, 2 s after the kill)"
    );
    hold(&b, Hold::Acquire).await.1.expect("both of a's");
    assert_eq!(
        hold(&b, Hold::Acquire).await.0,
        Code::OverLimit,
        "never more than 3"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_answer_was_lost_is_given_back_at_the_next_lease() {
    let redis = common::Standalone::start().await;
    let stores = common::stores(&common::standalone_settings(&redis.url()), 1);
    common::wait_connected(&stores[0]).await;
    let store = stores[0].clone();
    let rules = sluice_core::parse_config(RULES).expect("rules").rules;
    let rule = &rules.rules()[0];
    let sluice_core::rules::Limit::Limited { rate, .. } = rule.limit else {
        panic!("limited")
    };
    let entries = [sluice_core::Entry::new("tenant", "acme")];
    let key =
        sluice_engine::key::store_key(rule.fingerprint, sluice_engine::key::Values::Sent(&entries));
    // A lease this sidecar sent but whose answer it never read (a timeout): Redis counts 2 of
    // the 3 slots as its own, which it does not know of.
    assert_eq!(store.lease(&key, rate, 2).await.expect("lease").granted, 2);
    let e = sidecar(store.clone());
    // Its next lease answer says it holds 3 where it believes 1: it gives the 2 back.
    hold(&e, Hold::Acquire).await.1.expect("the one free slot");
    assert_eq!(
        store.peek(&key, rate).await.expect("peek"),
        2.0,
        "2 free again"
    );
    hold(&e, Hold::Acquire).await.1.expect("2 of 3");
    hold(&e, Hold::Acquire).await.1.expect("3 of 3");
    assert_eq!(
        hold(&e, Hold::Acquire).await.0,
        Code::OverLimit,
        "never more than 3"
    );
}
