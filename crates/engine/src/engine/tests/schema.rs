//! Limit shapes beyond one limit per descriptor: envoyproxy/ratelimit's `share_threshold` (one
//! bucket for every value a pattern matches), `quota_mode` (a quota blocks only with every other
//! quota) and `unlimited`; sluice's `rate_limits` (several limits on one descriptor).

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
      - key: api_key
        rate_limits:
          - {unit: second, requests_per_unit: 3, name: per_second}
          - {unit: minute, requests_per_unit: 5, name: per_minute}
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

/// Several limits on one descriptor: a request passes only if every one can pay, each is
/// charged (all or nothing), and the answer names the most restrictive.
#[tokio::test]
async fn every_limit_of_a_descriptor_must_pay_and_the_tightest_answers() {
    let clock = ManualClock::at(1);
    let e = schema_engine(&clock);
    let key = [d(&[("api_key", "k1")])];
    let label = |o: &DescriptorOutcome| {
        let rules = e.rules();
        let id = o.limit.and_then(|l| l.rule).expect("a rule");
        rules.rule(id).expect("loaded").label.clone()
    };
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let ok = ask(&e, &key).await;
        assert_eq!(ok.overall, Code::Ok);
        remaining.push((label(&ok.outcomes[0]), ok.outcomes[0].remaining));
    }
    assert_eq!(
        remaining,
        [
            ("per_second".to_string(), 2),
            ("per_second".to_string(), 1),
            ("per_second".to_string(), 0)
        ],
        "the second's limit is the tighter one"
    );
    let denied = ask(&e, &key).await.outcomes[0];
    assert_eq!(denied.code, Code::OverLimit);
    assert_eq!(label(&denied), "per_second");
    assert_eq!(denied.retry_after, Some(Duration::from_nanos(333_334_000)));
    clock.advance_millis(1_000);
    // The second refilled 3; the minute holds 2 (and a twelfth): the minute denies the third.
    for _ in 0..2 {
        assert_eq!(ask(&e, &key).await.overall, Code::Ok);
    }
    let denied = ask(&e, &key).await.outcomes[0];
    assert_eq!(denied.code, Code::OverLimit);
    assert_eq!(label(&denied), "per_minute");
    let view = e.quota("d", &[Entry::new("api_key", "k1")]).await;
    assert_eq!(view.more.len(), 1, "GetQuota sees both limits");
    let per_second = view.global_remaining.expect("read") + view.local_lease as f64;
    assert!(
        (1.0..1.01).contains(&per_second),
        "the denied request charged nothing on the second's limit: {per_second}"
    );
}

/// A fixed window counts the hits it denies (envoyproxy/ratelimit's counter passes the limit):
/// with `count_denied: true` the window is closed until it ends, for every sidecar on the store
/// (and the store told once, not at every denial); without it nothing is counted, so a smaller
/// request still passes.
#[tokio::test]
async fn a_fixed_window_closes_on_a_denial_unless_told_not_to_count_it() {
    const WINDOWS: &str = r#"
domains:
  - domain: d
    descriptors:
      - key: counted
        rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window, count_denied: true}
      - key: uncounted
        rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
      - key: local
        rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window, mode: local, count_denied: true}
"#;
    // A minute's window starting at 0, so every step below stays inside it.
    let clock = ManualClock::at(60_000_000 * 1_000);
    let store = MemoryStore::new(clock.clone());
    let engine = || {
        Engine::new(
            parse_config(WINDOWS).expect("config").rules,
            store.clone(),
            Arc::new(clock.clone()),
            EngineSettings::default(),
            EngineMetrics::unregistered(),
        )
    };
    let (a, b) = (engine(), engine());
    let hits = |key: &str, n: u64| {
        let mut d = d(&[(key, "k")]);
        d.hits_addend = Some(n);
        [d]
    };
    for key in ["counted", "uncounted", "local"] {
        assert_eq!(ask(&a, &hits(key, 3)).await.overall, Code::Ok, "{key}");
        assert_eq!(
            ask(&a, &hits(key, 3)).await.overall,
            Code::OverLimit,
            "{key}: 2 left"
        );
    }
    // Let the background close reach the store.
    a.leaser.stop_background().await;
    assert_eq!(
        ask(&a, &hits("counted", 1)).await.overall,
        Code::OverLimit,
        "the denial closed the window"
    );
    // What a holds goes back to the store (the counted window's lease was spent by the close).
    a.return_all_leases().await;
    assert_eq!(
        ask(&b, &hits("counted", 1)).await.overall,
        Code::OverLimit,
        "for every sidecar"
    );
    assert_eq!(
        ask(&b, &hits("uncounted", 2)).await.overall,
        Code::Ok,
        "the uncounted window's 2 went back"
    );
    assert_eq!(
        ask(&a, &hits("local", 1)).await.overall,
        Code::OverLimit,
        "a local window too"
    );

    clock.advance_millis(60_000);
    for key in ["counted", "local"] {
        assert_eq!(
            ask(&a, &hits(key, 5)).await.overall,
            Code::Ok,
            "{key}: a new window starts full"
        );
    }
}

/// A quota that can never pay (a cost above its burst) neither blocks the request while another
/// quota can pay, nor keeps that quota from leasing (found by the `rls` fuzz target).
#[tokio::test]
async fn a_quota_that_can_never_pay_leaves_the_others_to_decide() {
    let clock = ManualClock::at(1);
    let e = schema_engine(&clock);
    // daily: 2 a day; monthly: 3 a month. A cost of 3 is above the daily burst.
    let mut both = [d(&[("daily", "x")]), d(&[("monthly", "x")])];
    for d in &mut both {
        d.hits_addend = Some(3);
    }
    let decision = ask(&e, &both).await;
    assert_eq!(decision.overall, Code::Ok, "monthly can pay");
    assert_eq!(
        decision.outcomes[0].denial,
        Some(crate::Denial::CostAboveBurst)
    );
    assert_eq!(decision.outcomes[1].code, Code::Ok);
    assert_eq!(
        ask(&e, &both).await.overall,
        Code::OverLimit,
        "then every quota is out"
    );
}
