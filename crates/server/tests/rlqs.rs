//! `StreamRateLimitQuotas` with a real gRPC client standing in for Envoy's filter: assignments
//! that stay within the rule, ALLOW_ALL where no rule applies, and clear errors for bad streams.

mod common;

use std::time::Duration;

use common::TestServer;
use common::rlqs::{Stream, bucket, open, strategy, usage};
use sluice_proto::envoy::rlqs::rate_limit_quota_usage_reports::BucketQuotaUsage;
use sluice_proto::envoy::types::rate_limit_strategy::{BlanketRule, Strategy};

const YAML: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: 100}
        descriptors:
          - key: route
            value: chat
            rate_limit: {unit: minute, requests_per_unit: 60}
"#;

#[tokio::test]
async fn a_bucket_gets_a_token_bucket_within_its_rule_and_others_are_allowed() {
    let server = TestServer::start(YAML).await;
    let mut s = open(&server).await;
    // Envoy's first report of a bucket: time_elapsed 0 and the request it decided.
    s.send(
        "api",
        vec![
            usage(bucket(&[("tenant", "acme")]), 0, 0, 1),
            usage(bucket(&[("route", "chat"), ("tenant", "acme")]), 0, 0, 1),
            usage(bucket(&[("user", "u1")]), 0, 1, 0),
        ],
    )
    .await;
    let actions = s.next().await;
    let (tenant, ttl) = strategy(&actions["tenant=acme"]);
    let Strategy::TokenBucket(tb) = tenant else {
        panic!("tenant=acme: {tenant:?}");
    };
    let fill = tb.fill_interval.expect("fill").seconds;
    let per_fill = tb.tokens_per_fill.expect("tokens").value;
    // Whole seconds (Envoy 1.40 fails open on a sub-second fill), a rate within 100/s, and
    // a whole-second TTL of at least a second.
    assert!(fill >= 1, "{tb:?}");
    assert!(f64::from(per_fill) / fill as f64 <= 100.0, "{tb:?}");
    assert!(
        tb.max_tokens >= 1 && u64::from(tb.max_tokens) <= 100,
        "{tb:?}"
    );
    assert!(ttl >= 1, "ttl {ttl}");
    // The nested rule (60 a minute): a slow rate needs a fill interval of many seconds.
    let (chat, _) = strategy(&actions["route=chat,tenant=acme"]);
    let Strategy::TokenBucket(tb) = chat else {
        panic!("chat: {chat:?}");
    };
    let rate = f64::from(tb.tokens_per_fill.expect("tokens").value)
        / tb.fill_interval.expect("fill").seconds as f64;
    assert!(rate > 0.0 && rate <= 1.0, "{tb:?}");
    // No rule uses `user`: ALLOW_ALL, as RLS would answer OK.
    let (user, _) = strategy(&actions["user=u1"]);
    assert_eq!(user, Strategy::BlanketRule(BlanketRule::AllowAll as i32));

    // Within a second or two the assignment is renewed, or grown toward the even split as the
    // pool pays for it (a new share starts at what the burst pays for), never past the rule.
    let again = s.next().await;
    if let Some(a) = again.get("tenant=acme") {
        let Strategy::TokenBucket(next) = strategy(a).0 else {
            panic!("tenant=acme: {a:?}");
        };
        let rate = |tb: &sluice_proto::envoy::types::TokenBucket| {
            f64::from(tb.tokens_per_fill.expect("tokens").value)
                / tb.fill_interval.expect("fill").seconds as f64
        };
        let first = f64::from(per_fill) / fill as f64;
        assert!(
            rate(&next) >= first && rate(&next) <= 100.0,
            "{first}/s then {next:?}"
        );
    }

    // The Quota API lists the buckets of this stream.
    let listed = sluice_server::assignments::assignments(&server.state.rlqs, "api");
    let acme = listed
        .iter()
        .find(|a| a.bucket.len() == 1 && a.bucket[0].value == "acme")
        .expect("acme listed");
    assert_eq!(acme.strategy, "token_bucket");
    assert_eq!(acme.denied, 1);
    assert!(acme.tokens_per_second > 0.0 && acme.tokens_per_second <= 100.0);
}

/// The tokens per second of the last token bucket `s` assigns to `id` within `answers` answers.
async fn share_after(s: &mut Stream, id: &str, answers: usize) -> Option<f64> {
    let mut share = None;
    for _ in 0..answers {
        if let Some(a) = s.next().await.get(id)
            && let (Strategy::TokenBucket(tb), _) = strategy(a)
        {
            share = Some(
                f64::from(tb.tokens_per_fill.expect("tokens").value)
                    / tb.fill_interval.expect("fill").seconds as f64,
            );
        }
    }
    share
}

#[tokio::test]
async fn reported_demand_splits_a_contended_rule_and_never_past_it() {
    let server = TestServer::start(YAML).await;
    let id = || bucket(&[("tenant", "t")]);
    // Two Envoys (streams) on one bucket of the 100-a-second rule.
    let (mut light, mut heavy) = (open(&server).await, open(&server).await);
    for s in [&light, &heavy] {
        s.send("api", vec![usage(id(), 0, 1, 0)]).await;
    }
    light.next().await;
    heavy.next().await;
    // Light: 10 a second, none denied. Heavy: 400 a second, mostly denied.
    light.send("api", vec![usage(id(), 5, 50, 0)]).await;
    heavy.send("api", vec![usage(id(), 5, 250, 1750)]).await;
    let heavy_share = share_after(&mut heavy, "tenant=t", 6).await.expect("heavy");
    let light_share = share_after(&mut light, "tenant=t", 6).await.expect("light");
    // Max-min fair: the light one gets its demand with headroom, the heavy one more (growing to
    // the rest as its pool pays for it), and the two never more than the rule.
    assert!((10.0..=15.0).contains(&light_share), "light {light_share}");
    assert!(heavy_share > 2.0 * light_share, "heavy {heavy_share}");
    assert!(
        light_share + heavy_share <= 100.0,
        "{light_share} + {heavy_share}"
    );
    // Absurd counts are bounded: the share is at most the rule's rate.
    heavy
        .send("api", vec![usage(id(), 5, u64::MAX / 2, u64::MAX / 2)])
        .await;
    let share = share_after(&mut heavy, "tenant=t", 3).await;
    assert!(share.is_none_or(|s| s <= 100.0), "{share:?}");
}

#[tokio::test]
async fn bad_streams_get_clear_errors() {
    let server = TestServer::start(YAML).await;
    // No domain in the first report.
    let mut s = open(&server).await;
    s.send("", vec![usage(bucket(&[("tenant", "a")]), 0, 1, 0)])
        .await;
    let err = s.rx.message().await.expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("domain"), "{err}");

    // A second domain on one stream.
    let mut s = open(&server).await;
    s.send("api", vec![usage(bucket(&[("tenant", "a")]), 0, 1, 0)])
        .await;
    s.next().await;
    s.send("other", vec![usage(bucket(&[("tenant", "a")]), 5, 1, 0)])
        .await;
    let err = loop {
        match s.rx.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("ended without an error"),
            Err(e) => break e,
        }
    };
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("one domain"), "{err}");

    // A report without a bucket id, one with an oversized key, one with an empty key.
    for bad in [
        BucketQuotaUsage {
            bucket_id: None,
            ..usage(bucket(&[]), 0, 0, 0)
        },
        usage(bucket(&[(&"k".repeat(2000), "v")]), 0, 1, 0),
        usage(bucket(&[("", "v")]), 0, 1, 0),
    ] {
        let mut s = open(&server).await;
        s.send("api", vec![bad]).await;
        let err = s.rx.message().await.expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    }

    // Huge values are fine: the bucket is tracked under a digest, like a descriptor value.
    let mut s = open(&server).await;
    let long = "x".repeat(100_000);
    s.send("api", vec![usage(bucket(&[("tenant", &long)]), 0, 1, 0)])
        .await;
    let actions = s.next().await;
    assert_eq!(actions.len(), 1);
    let (st, _) = strategy(actions.values().next().expect("one"));
    assert!(matches!(st, Strategy::TokenBucket(_)), "{st:?}");
}

#[tokio::test]
async fn a_stream_holds_a_bounded_number_of_buckets() {
    let server = TestServer::start(YAML).await;
    let mut s = open(&server).await;
    let max = sluice_server::rlqs::stream::MAX_BUCKETS;
    let usages: Vec<_> = (0..max + 100)
        .map(|i| usage(bucket(&[("user", &i.to_string())]), 0, 1, 0))
        .collect();
    for chunk in usages.chunks(500) {
        s.send("api", chunk.to_vec()).await;
    }
    let mut seen = std::collections::HashSet::new();
    while seen.len() < max {
        seen.extend(s.next().await.into_keys());
    }
    assert_eq!(seen.len(), max);
    let (_, body) = server.admin_get("/metrics").await;
    assert!(
        body.contains("sluice_rlqs_buckets_refused_total{reason=\"too_many\"} 100"),
        "{}",
        body.lines()
            .filter(|l| l.contains("rlqs"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test]
async fn a_vanished_envoy_leaves_no_stream_behind() {
    let server = TestServer::start(YAML).await;
    let mut s = open(&server).await;
    s.send("api", vec![usage(bucket(&[("tenant", "gone")]), 0, 0, 1)])
        .await;
    s.next().await;
    assert_eq!(
        sluice_server::assignments::assignments(&server.state.rlqs, "").len(),
        1
    );
    // The client goes away without closing its stream.
    drop(s);
    let start = std::time::Instant::now();
    loop {
        let (_, body) = server.admin_get("/metrics").await;
        let listed = sluice_server::assignments::assignments(&server.state.rlqs, "");
        if body.contains("sluice_rlqs_streams 0") && listed.is_empty() {
            assert!(
                body.contains("sluice_rlqs_buckets{rule=\"api:tenant\"} 0"),
                "{body}"
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the stream outlived its client: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A descriptor with several limits (`rate_limits`): every share is paid from each of them, so
/// a generous per-minute limit cannot assign past a tight daily one.
#[tokio::test]
async fn several_limits_pay_every_share_so_the_tightest_holds() {
    const LIMITS: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: tenant
        rate_limits:
          - {unit: minute, requests_per_unit: 600, name: per_minute}
          - {unit: day, requests_per_unit: 30, name: per_day}
"#;
    let server = TestServer::start(LIMITS).await;
    let mut s = open(&server).await;
    s.send("api", vec![usage(bucket(&[("tenant", "t")]), 0, 0, 1)])
        .await;
    let mut worth = Vec::new();
    for _ in 0..3 {
        if let Some(a) = s.next().await.get("tenant=t")
            && let (Strategy::TokenBucket(tb), ttl) = strategy(a)
        {
            let rate = f64::from(tb.tokens_per_fill.expect("tokens").value)
                / tb.fill_interval.expect("fill").seconds as f64;
            // What Envoy can admit under it: the full bucket, then the refill until the TTL.
            worth.push(f64::from(tb.max_tokens) + rate * ttl as f64);
        }
        s.send("api", vec![usage(bucket(&[("tenant", "t")]), 1, 0, 10)])
            .await;
    }
    assert!(
        !worth.is_empty() && worth.iter().all(|&w| w <= 30.0),
        "no share worth more than the day's 30: {worth:?}"
    );
    let day = sluice_server::quota::peek(
        &server.state,
        "api",
        &[sluice_core::Entry::new("tenant", "t")],
    )
    .await
    .limits
    .into_iter()
    .next()
    .expect("the daily limit");
    assert_eq!(day.rule, "per_day");
    assert!(
        day.global_remaining >= 0.0 && day.global_remaining <= 30.0,
        "{day:?}"
    );
}
