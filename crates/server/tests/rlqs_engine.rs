//! RLQS goes through the one engine: its store calls are counted like every other, a share is
//! never assigned unless paid (a key with no room gets DENY_ALL, never an unpaid bucket), and
//! the bucket ids a stream holds are bounded in bytes.

mod common;

use common::TestServer;
use common::rlqs::{bucket, open, strategy, usage};
use sluice_proto::envoy::types::rate_limit_strategy::{BlanketRule, Strategy};

const YAML: &str = r#"
engine:
  max_keys: 4
domains:
  - domain: api
    descriptors:
      - key: tenant
        rate_limit: {unit: month, requests_per_unit: 100}
"#;

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Found by a hostile client: with the embedded store full (`engine.max_keys`), RLS denied but
/// RLQS kept sending token buckets no global bucket had paid for. Now such a bucket gets
/// DENY_ALL, counted, and RLQS's store calls show in `sluice_store_calls_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_is_never_assigned_unpaid_when_the_key_has_no_room() {
    let server = TestServer::start(YAML).await;
    let mut rls = server.rls().await;
    for t in 0..4 {
        let value = format!("t{t}");
        let req = common::request("api", &[&[("tenant", &value)]]);
        let resp = rls.should_rate_limit(req).await.expect("rpc").into_inner();
        assert_eq!(resp.overall_code, 1, "{value}: OK");
    }
    let (_, before) = server.admin_get("/metrics").await;

    let mut s = open(&server).await;
    s.send("api", vec![usage(bucket(&[("tenant", "new")]), 0, 0, 1)])
        .await;
    let actions = s.next().await;
    let (assigned, _) = strategy(&actions["tenant=new"]);
    assert_eq!(
        assigned,
        Strategy::BlanketRule(BlanketRule::DenyAll as i32),
        "no room for the key: nothing unpaid is assigned"
    );
    let (_, after) = server.admin_get("/metrics").await;
    let refused = r#"sluice_rlqs_buckets_refused_total{reason="no_room"}"#;
    assert!(metric(&after, refused) >= 1.0, "{after}");
    assert!(
        metric(&after, "sluice_keys_refused_total") > metric(&before, "sluice_keys_refused_total")
    );
    let calls = |text: &str, op: &str| {
        metric(
            text,
            &format!(r#"sluice_store_calls_total{{op="{op}",outcome="full"}}"#),
        ) + metric(
            text,
            &format!(r#"sluice_store_calls_total{{op="{op}",outcome="ok"}}"#),
        )
    };
    assert!(
        calls(&after, "lease") > calls(&before, "lease"),
        "RLQS leases are store calls like any other"
    );
    assert!(calls(&after, "demand") > calls(&before, "demand"));
}

/// Found by a hostile client: one stream with 40 bucket ids of 1 MiB values grew RSS by 316
/// MiB. A stream holds at most 1 MiB of bucket ids (each once); beyond, ids are refused and
/// counted, and the others are still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bucket_ids_a_stream_holds_are_bounded_in_bytes() {
    let server = TestServer::start(YAML).await;
    let mut s = open(&server).await;
    let big = "x".repeat(400 << 10);
    for i in 0..3 {
        let value = format!("{i}{big}");
        s.send("api", vec![usage(bucket(&[("other", &value)]), 0, 1, 0)])
            .await;
    }
    s.send("api", vec![usage(bucket(&[("small", "s")]), 0, 1, 0)])
        .await;
    let mut seen = std::collections::HashSet::new();
    while !seen.contains("small=s") {
        seen.extend(s.next().await.into_keys());
    }
    assert_eq!(
        seen.iter().filter(|k| k.starts_with("other=")).count(),
        2,
        "two ids of 400 KiB fit in 1 MiB, the third does not"
    );
    let (_, metrics) = server.admin_get("/metrics").await;
    let refused = r#"sluice_rlqs_buckets_refused_total{reason="too_large"}"#;
    assert_eq!(metric(&metrics, refused), 1.0, "{metrics}");
}
