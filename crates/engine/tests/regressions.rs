//! Regression tests for accounting bugs found by trying sluice as a hostile client would.

use std::sync::Arc;

use sluice_core::{Descriptor, ManualClock, RuleSet};
use sluice_engine::{
    Code, Decision, Denial, Engine, EngineMetrics, EngineSettings, GlobalStore, MemoryStore,
    RateLimitRequest,
};

const RULES: &str = r#"
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: local
    rate_limit: {unit: hour, requests_per_unit: 3, mode: local}
"#;

fn rules() -> RuleSet {
    sluice_core::parse_config(RULES).expect("rules").rules
}

fn engine(clock: &ManualClock, store: Arc<dyn GlobalStore>, settings: EngineSettings) -> Engine {
    Engine::new(
        rules(),
        store,
        Arc::new(clock.clone()),
        settings,
        EngineMetrics::unregistered(),
    )
}

fn one(pairs: &[(&str, &str)], hits: Option<u64>) -> Descriptor {
    let mut d = Descriptor::of(pairs.iter().copied());
    d.hits_addend = hits;
    d
}

async fn decide(e: &Engine, descriptors: &[Descriptor], hits_addend: u64) -> Decision {
    e.decide(&RateLimitRequest {
        domain: "d",
        descriptors,
        hits_addend,
    })
    .await
}

async fn admitted(e: &Engine, descriptors: &[Descriptor], n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(decide(e, descriptors, 0).await.overall == Code::Ok);
    }
    ok
}

/// A cost above twice the burst made the starved-key retry time "never": the key was locked out.
#[tokio::test]
async fn a_cost_above_the_burst_does_not_lock_the_key_out() {
    let clock = ManualClock::at(1);
    let e = engine(
        &clock,
        MemoryStore::new(clock.clone()),
        EngineSettings::default(),
    );
    let k = [one(&[("k", "a")], None)];
    let big = decide(&e, &k, 11).await;
    assert_eq!(
        big.overall,
        Code::OverLimit,
        "11 hits never fit a burst of 5"
    );
    assert_eq!(big.outcomes[0].remaining, 5, "and nothing was charged");
    assert_eq!(
        admitted(&e, &k, 10).await,
        5,
        "the key still admits its burst"
    );
    clock.advance_millis(60_000);
    assert_eq!(admitted(&e, &k, 10).await, 5, "and refills");
}

/// Per-descriptor hits on one key were summed with wrapping arithmetic: `u64::MAX + 1 = 0`.
#[tokio::test]
async fn hits_on_one_key_never_wrap_to_free() {
    let clock = ManualClock::at(1);
    let e = engine(
        &clock,
        MemoryStore::new(clock.clone()),
        EngineSettings::default(),
    );
    let wrap = [
        one(&[("k", "w")], Some(u64::MAX)),
        one(&[("k", "w")], Some(1)),
    ];
    assert_eq!(admitted(&e, &wrap, 10).await, 0);
    let single = [one(&[("k", "w")], None)];
    assert_eq!(admitted(&e, &single, 10).await, 5, "nothing was charged");
}

/// Evicting an idle `mode: local` key that is not full reset its limit.
#[tokio::test]
async fn an_idle_local_key_keeps_its_state_until_it_is_full() {
    let clock = ManualClock::at(1);
    let e = engine(
        &clock,
        MemoryStore::new(clock.clone()),
        EngineSettings::default(),
    );
    let local = [one(&[("local", "a")], None)];
    assert_eq!(admitted(&e, &local, 5).await, 3);
    // 3 per hour: after 11 minutes idle, less than one token came back.
    clock.advance_millis(11 * 60_000);
    e.sweep().await;
    assert_eq!(
        admitted(&e, &local, 5).await,
        0,
        "an idle sweep reset the limit"
    );
}

/// Flooding new keys past `max_keys` evicted a `mode: local` key that was not full.
#[tokio::test]
async fn new_keys_past_max_keys_never_reset_a_local_limit() {
    let clock = ManualClock::at(1);
    let settings = EngineSettings {
        max_keys: 10,
        ..EngineSettings::default()
    };
    let e = engine(&clock, MemoryStore::new(clock.clone()), settings);
    let local = [one(&[("local", "victim")], None)];
    assert_eq!(admitted(&e, &local, 5).await, 3);
    for i in 0..100 {
        clock.advance_micros(10);
        decide(&e, &[one(&[("k", &i.to_string())], None)], 0).await;
        assert!(e.tracked_keys() <= 10);
    }
    assert_eq!(
        admitted(&e, &local, 5).await,
        0,
        "the flood reset the limit"
    );
}

/// The embedded store ignored `max_keys` (1 M new keys with `max_keys: 1000` held 147 MB). It is
/// bounded now; a new key it cannot hold is denied as such, and passes once buckets refill.
#[tokio::test]
async fn the_embedded_store_is_bounded_and_says_when_it_is_full() {
    let clock = ManualClock::at(1);
    let settings = EngineSettings {
        max_keys: 2,
        ..EngineSettings::default()
    };
    let store = MemoryStore::with_max_keys(clock.clone(), 2);
    let e = engine(&clock, store.clone(), settings);
    for v in ["a", "b"] {
        clock.advance_micros(1);
        let d = decide(&e, &[one(&[("k", v)], None)], 5).await;
        assert_eq!(d.overall, Code::Ok, "{v}: its whole burst");
    }
    clock.advance_micros(1);
    let full = decide(&e, &[one(&[("k", "c")], None)], 0).await;
    assert_eq!(full.overall, Code::OverLimit);
    assert_eq!(full.outcomes[0].denial, Some(Denial::NoRoom));
    assert!(store.len() <= 2 && e.tracked_keys() <= 2);
    clock.advance_millis(60_000);
    let later = decide(&e, &[one(&[("k", "c")], None)], 0).await;
    assert_eq!(later.overall, Code::Ok, "room again once buckets refilled");
}
