//! Limit shapes in answers, over real gRPC: flexible periods (`unit_multiplier`) in RLS
//! `current_limit` as well as its proto can say it, in ext_authz's `RateLimit-Policy` exactly
//! (`w=` in seconds) and in GetQuota; several limits on one descriptor (`rate_limits`): the
//! most restrictive answers, GetQuota shows each; what remains is never more than the limit
//! the same answer announces.

mod common;

use common::{TestServer, check_request, entry, headers_of, request};
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::sluice::v1::GetQuotaRequest;
use sluice_proto::sluice::v1::quota_client::QuotaClient;

const PERIODS: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: tenant
        rate_limit: {unit: minute, unit_multiplier: 10, requests_per_unit: 100, name: per_10_minutes}
      - key: odd
        rate_limit: {unit: second, unit_multiplier: 90, requests_per_unit: 7}
      - key: api_key
        rate_limits:
          - {unit: second, requests_per_unit: 10, name: per_second}
          - {unit: day, requests_per_unit: 12, name: per_day}
      - key: bursty
        rate_limit: {unit: second, requests_per_unit: 10, burst: 20, name: bursty}
authz:
  domain: api
  descriptors:
    - [{key: tenant, from: {header: x-tenant}}]
    - [{key: bursty, from: {header: x-bursty}}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rls_reports_the_rate_in_units_envoy_knows() {
    let server = TestServer::start(PERIODS).await;
    let mut rls = server.rls().await;
    let resp = rls
        .should_rate_limit(request("api", &[&[("tenant", "acme")], &[("odd", "x")]]))
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(resp.overall_code, Code::Ok as i32);
    let limit = |i: usize| {
        let l = resp.statuses[i]
            .current_limit
            .as_ref()
            .expect("current_limit");
        (l.requests_per_unit, l.unit)
    };
    assert_eq!(limit(0), (10, 2), "100 per 10 minutes: 10 per MINUTE");
    assert_eq!(limit(1), (280, 3), "7 per 90 s: 280 per HOUR");
    assert_eq!(
        resp.statuses[0].limit_remaining, 10,
        "99 of the 100 are left, but the answer announces 10 per MINUTE: never more than that"
    );
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratelimit_policy_states_the_whole_period() {
    let server = TestServer::start(PERIODS).await;
    let mut authz = server.authz().await;
    let resp = authz
        .check(check_request(&[("x-tenant", "acme")]))
        .await
        .expect("rpc")
        .into_inner();
    let h = headers_of(&resp);
    assert_eq!(h["ratelimit-policy"], r#""per_10_minutes";q=100;w=600"#);
    let quota = server.admin_get("/quota?domain=api&tenant=acme").await.1;
    assert!(quota.contains(r#""unit_multiplier":10"#), "{quota}");
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_answer_with_the_tightest_and_get_quota_shows_each() {
    let server = TestServer::start(PERIODS).await;
    let mut rls = server.rls().await;
    let req = request("api", &[&[("api_key", "k")]]);
    let mut seen = Vec::new();
    for _ in 0..12 {
        let resp = rls
            .should_rate_limit(req.clone())
            .await
            .expect("rpc")
            .into_inner();
        let s = &resp.statuses[0];
        let name = s.current_limit.as_ref().expect("limit").name.clone();
        seen.push((resp.overall_code, name, s.limit_remaining));
    }
    let ok = Code::Ok as i32;
    assert_eq!(seen[0], (ok, "per_second".to_string(), 9));
    assert_eq!(
        seen[9],
        (ok, "per_second".to_string(), 0),
        "the tenth: the second is spent, the day has 2"
    );
    assert_eq!(
        (seen[10].0, seen[10].1.as_str()),
        (Code::OverLimit as i32, "per_second")
    );
    let mut quota = QuotaClient::new(server.channel().await);
    let state = quota
        .get_quota(GetQuotaRequest {
            domain: "api".into(),
            entries: vec![entry("api_key", "k")],
        })
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(state.rule, "per_second");
    assert_eq!(state.limits.len(), 1);
    let day = &state.limits[0];
    assert_eq!((day.rule.as_str(), day.requests_per_unit), ("per_day", 12));
    let left = day.global_remaining + day.local_lease as f64;
    assert!((2.0..2.01).contains(&left), "10 charged on the day: {left}");
    server.stop().await.expect("clean stop");
}

/// Burst 20 at 10/s, first request: 19 tokens are left, but both APIs announce 10 a second, so
/// neither says more than 10 remain (a client pacing by the headers is never promised room a
/// later answer takes back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remaining_is_never_above_the_limit_announced() {
    let server = TestServer::start(PERIODS).await;
    let mut rls = server.rls().await;
    let resp = rls
        .should_rate_limit(request("api", &[&[("bursty", "a")]]))
        .await
        .expect("rpc")
        .into_inner();
    let s = &resp.statuses[0];
    let limit = s.current_limit.as_ref().expect("current_limit");
    assert_eq!((limit.requests_per_unit, s.limit_remaining), (10, 10));
    // Ten more pass (the burst), and what remains goes down once below the limit.
    let mut left = Vec::new();
    for _ in 0..10 {
        let resp = rls
            .should_rate_limit(request("api", &[&[("bursty", "a")]]))
            .await
            .expect("rpc")
            .into_inner();
        assert_eq!(resp.overall_code, Code::Ok as i32);
        left.push(resp.statuses[0].limit_remaining);
    }
    assert_eq!(left.iter().max(), Some(&10));
    assert!(left.last().is_some_and(|&l| l <= 9), "{left:?}");

    let mut authz = server.authz().await;
    let resp = authz
        .check(check_request(&[("x-bursty", "b")]))
        .await
        .expect("rpc")
        .into_inner();
    let h = headers_of(&resp);
    assert_eq!(h["ratelimit-policy"], r#""bursty";q=10;w=1"#);
    assert_eq!(h["ratelimit"], r#""bursty";r=10;t=1"#);
    server.stop().await.expect("clean stop");
}
