//! Flexible periods (`unit_multiplier`) in answers: RLS `current_limit` as well as its proto
//! can say it, ext_authz's `RateLimit-Policy` exactly (`w=` in seconds), GetQuota whole.

mod common;

use common::{TestServer, check_request, headers_of, request};
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;

const PERIODS: &str = r#"
domains:
  - domain: api
    descriptors:
      - key: tenant
        rate_limit: {unit: minute, unit_multiplier: 10, requests_per_unit: 100, name: per_10_minutes}
      - key: odd
        rate_limit: {unit: second, unit_multiplier: 90, requests_per_unit: 7}
authz:
  domain: api
  descriptors:
    - [{key: tenant, from: {header: x-tenant}}]
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
    assert_eq!(resp.statuses[0].limit_remaining, 99, "the burst is the 100");
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
