//! Caller overrides (Envoy's per-descriptor `limit`) change the rate of the rule's bucket, never
//! the bucket: varying the override never buys a caller a fresh bucket.

use super::*;

const OVERRIDES: &str = r#"
domains:
  - domain: d
    descriptors:
      - key: files
        value: f/*
        share_threshold: true
        rate_limit: {unit: hour, requests_per_unit: 3}
      - key: api_key
        rate_limits:
          - {unit: hour, requests_per_unit: 3}
          - {unit: day, requests_per_unit: 5}
      - key: window
        rate_limit: {unit: hour, requests_per_unit: 4, algorithm: fixed_window}
      - key: local
        rate_limit: {unit: hour, requests_per_unit: 2, mode: local}
"#;

fn engine_with(clock: &ManualClock, config: &str) -> Engine {
    Engine::new(
        parse_config(config).expect("config").rules,
        MemoryStore::new(clock.clone()),
        Arc::new(clock.clone()),
        EngineSettings::default(),
        EngineMetrics::unregistered(),
    )
}

fn with_override(
    pairs: &[(&str, &str)],
    requests_per_unit: u64,
    unit: sluice_core::Unit,
) -> Vec<Descriptor> {
    let mut ds = vec![d(pairs)];
    ds[0].limit_override = Some(sluice_core::descriptor::LimitOverride {
        requests_per_unit,
        unit,
    });
    ds
}

/// Found by a hostile client: an override equal to a `share_threshold` rule's own limit let 10
/// of 10 distinct values pass, each value in a bucket of its own.
#[tokio::test]
async fn an_override_on_a_shared_bucket_still_shares_it() {
    let clock = ManualClock::at(1);
    let e = engine_with(&clock, OVERRIDES);
    let mut passed = 0;
    for i in 0..10 {
        let ds = with_override(&[("files", &format!("f/{i}"))], 3, sluice_core::Unit::Hour);
        passed += usize::from(ask(&e, &ds).await.overall == Code::Ok);
    }
    assert_eq!(
        passed, 3,
        "every value matched by f/* shares one bucket of 3 per hour"
    );
}

/// Found by a hostile client: on a descriptor with 3/hour and 5/day, overrides of 3…12/HOUR
/// passed 10 of 10 (each rate a fresh bucket, the daily limit gone).
#[tokio::test]
async fn varying_the_override_never_buys_a_fresh_bucket_nor_drops_other_limits() {
    let clock = ManualClock::at(1);
    let e = engine_with(&clock, OVERRIDES);
    let mut passed = 0;
    // The most generous first: the bucket opens at 12, and the daily 5 is what stops it.
    for rate in (3..13).rev() {
        let ds = with_override(&[("api_key", "k")], rate, sluice_core::Unit::Hour);
        passed += usize::from(ask(&e, &ds).await.overall == Code::Ok);
    }
    assert_eq!(passed, 5, "the daily limit of 5 still applies");

    // Without a further limit: no more than the most generous override alone (12 per hour),
    // however the values alternate, and the rule's own requests share the bucket.
    let clock = ManualClock::at(1);
    let e = engine_with(&clock, OVERRIDES);
    let mut passed = 0;
    for i in 0..40u64 {
        let ds = with_override(&[("files", "f/x")], 3 + i % 10, sluice_core::Unit::Hour);
        passed += usize::from(ask(&e, &ds).await.overall == Code::Ok);
        passed += usize::from(ask(&e, &[d(&[("files", "f/y")])]).await.overall == Code::Ok);
    }
    // Before the fix every override value had a fresh bucket: 3 + 4 + … + 12 = 75 passed.
    assert!(
        (3..=12).contains(&passed),
        "one bucket: at most the largest override's burst, {passed} passed"
    );
}

/// The override of a window rule keeps the rule's window (a bucket read with another period
/// would look like a new window): 48 per day on an hourly window is 2 per window. The window's
/// count starts at the first override's limit; later overrides of the same window spend from it.
#[tokio::test]
async fn an_override_on_a_window_keeps_the_window() {
    let clock = ManualClock::at(1);
    let e = engine_with(&clock, OVERRIDES);
    let mut passed = 0;
    for unit in [
        sluice_core::Unit::Day,
        sluice_core::Unit::Hour,
        sluice_core::Unit::Minute,
    ] {
        let ds = with_override(&[("window", "w")], 48, unit);
        let decision = ask(&e, &ds).await;
        passed += usize::from(decision.overall == Code::Ok);
        let rate = decision.outcomes[0].limit.expect("a limit").rate;
        assert_eq!(
            rate.unit,
            sluice_core::Unit::Hour,
            "{unit:?}: the rule's window"
        );
    }
    let daily = with_override(&[("window", "w")], 48, sluice_core::Unit::Day);
    passed += admitted(&e, &daily, 10).await;
    assert_eq!(
        passed, 2,
        "one window of one bucket, opened at 2 per window"
    );
    clock.advance_millis(3_600_000);
    assert_eq!(admitted(&e, &daily, 10).await, 2, "the next window");
}

/// A local rule's bucket is this sidecar's state: an override decides that same bucket.
#[tokio::test]
async fn an_override_on_a_local_rule_decides_its_bucket() {
    let clock = ManualClock::at(1);
    let e = engine_with(&clock, OVERRIDES);
    let mut passed = 0;
    for rate in [2, 1, 2, 1, 2] {
        let ds = with_override(&[("local", "l")], rate, sluice_core::Unit::Hour);
        passed += usize::from(ask(&e, &ds).await.overall == Code::Ok);
    }
    passed += admitted(&e, &[d(&[("local", "l")])], 3).await;
    assert_eq!(passed, 2, "one local bucket of at most 2");
}
