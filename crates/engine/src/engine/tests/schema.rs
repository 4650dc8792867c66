//! envoyproxy/ratelimit's schema beyond limits: `share_threshold` (one bucket for every value a
//! pattern matches), `quota_mode` (a quota blocks only with every other quota), `unlimited`.

use super::*;

const SCHEMA: &str = r#"
domains:
  - domain: d
    descriptors:
      - key: files
        value: files/*
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: own
        value: own/*
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: daily
        quota_mode: true
        rate_limit: {unit: day, requests_per_unit: 2}
      - key: monthly
        quota_mode: true
        rate_limit: {unit: month, requests_per_unit: 3}
      - key: ip
        rate_limit: {unit: minute, requests_per_unit: 100}
      - key: free
        rate_limit: {unlimited: true}
"#;

fn schema_engine(clock: &ManualClock) -> Engine {
    Engine::new(
        parse_config(SCHEMA).expect("config").rules,
        MemoryStore::new(clock.clone()),
        Arc::new(clock.clone()),
        EngineSettings::default(),
        EngineMetrics::unregistered(),
    )
}

/// Every value a `share_threshold` pattern matches spends from one bucket; without it each
/// value has its own.
#[tokio::test]
async fn values_matched_by_a_shared_pattern_share_one_bucket() {
    let clock = ManualClock::at(1);
    let e = schema_engine(&clock);
    for value in ["files/a.pdf", "files/b.csv", "files/c.txt"] {
        assert_eq!(ask(&e, &[d(&[("files", value)])]).await.overall, Code::Ok);
    }
    let fourth = ask(&e, &[d(&[("files", "files/d.doc")])]).await;
    assert_eq!(
        fourth.overall,
        Code::OverLimit,
        "3 a minute for all of them"
    );
    let (store_key, _) = only_key(&e);
    assert!(store_key.ends_with(":files=files/*"), "{store_key}");
    assert_eq!(
        e.quota("d", &[Entry::new("files", "files/zzz")])
            .await
            .global_remaining
            .map(f64::floor),
        Some(0.0),
        "the operator's peek finds the shared bucket too"
    );
    for value in ["own/a", "own/b", "own/c", "own/d"] {
        assert_eq!(
            ask(&e, &[d(&[("own", value)])]).await.overall,
            Code::Ok,
            "{value}: a bucket per value"
        );
    }
}

/// A quota's denial makes the request OVER_LIMIT only when every quota of the request is
/// denied; meanwhile the denied quota still says OVER_LIMIT, is not charged, and the others are.
#[tokio::test]
async fn quotas_block_only_together() {
    let clock = ManualClock::at(1);
    let e = schema_engine(&clock);
    let both = [d(&[("daily", "u")]), d(&[("monthly", "u")])];
    for _ in 0..2 {
        let ok = ask(&e, &both).await;
        assert_eq!(ok.overall, Code::Ok);
        assert!(ok.outcomes.iter().all(|o| o.code == Code::Ok));
    }
    let third = ask(&e, &both).await;
    assert_eq!(third.overall, Code::Ok, "the monthly quota has one left");
    assert_eq!(third.outcomes[0].code, Code::OverLimit, "daily says so");
    assert_eq!(third.outcomes[1].code, Code::Ok);
    assert_eq!(third.outcomes[1].remaining, 0, "monthly was charged");
    let fourth = ask(&e, &both).await;
    assert_eq!(fourth.overall, Code::OverLimit, "every quota is out");
    // A limit that is not a quota still blocks on its own.
    let with_ip = [d(&[("monthly", "v")]), d(&[("ip", "1")])];
    assert_eq!(ask(&e, &with_ip).await.overall, Code::Ok);
    let hundred = (0..100).map(|_| d(&[("ip", "2")])).collect::<Vec<_>>();
    assert_eq!(ask(&e, &hundred).await.overall, Code::Ok, "the whole limit");
    let denied = ask(&e, &[d(&[("ip", "2")]), d(&[("monthly", "w")])]).await;
    assert_eq!(denied.overall, Code::OverLimit, "the limit is spent");
    assert_eq!(
        denied.outcomes[1].code,
        Code::Ok,
        "the quota itself could pay"
    );
    let untouched = e.quota("d", &[Entry::new("monthly", "w")]).await;
    assert_eq!(
        untouched
            .global_remaining
            .map(|g| g.floor() + untouched.local_lease as f64),
        Some(3.0),
        "nothing spent on a denied request (what was leased is still held)"
    );
}

/// An `unlimited` rule is told apart from no rule (RLS reports it with the most remaining).
#[tokio::test]
async fn unlimited_rules_are_marked() {
    let clock = ManualClock::at(1);
    let e = schema_engine(&clock);
    let decision = ask(&e, &[d(&[("free", "x")]), d(&[("nothing", "x")])]).await;
    assert_eq!(decision.overall, Code::Ok);
    assert!(decision.outcomes[0].unlimited && decision.outcomes[0].limit.is_none());
    assert!(!decision.outcomes[1].unlimited && decision.outcomes[1].limit.is_none());
}
