//! `sluice.v1.Usage/Report` over a real gRPC connection, with the checks a caller without Envoy
//! makes through ext_authz and ShouldRateLimit: reports go into debt, checks are denied until it is
//! repaid, and the debt shows in GetQuota, the answers' headers and the metrics.

mod common;

use common::{TestServer, check_request, entry, headers_of, request};
use sluice_proto::envoy::auth::check_response::HttpResponse;
use sluice_proto::envoy::protobuf::UInt64Value;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::sluice::v1 as pb;
use sluice_proto::sluice::v1::quota_client::QuotaClient;
use sluice_proto::sluice::v1::usage_client::UsageClient;
use sluice_server::durations::seconds;
use tonic::Code as Status;

const CONFIG: &str = r#"
domains:
  - domain: llm
    descriptors:
      - key: tenant
        rate_limit: {name: tenant_tokens, unit: minute, requests_per_unit: 1000, charge: post_paid}
      - key: client
        rate_limit: {name: per_client, unit: minute, requests_per_unit: 10}
authz:
  domain: llm
  descriptors:
    - [{key: tenant, from: {header: x-tenant}}]
"#;

fn report(reports: &[(&[(&str, &str)], u64)]) -> pb::ReportRequest {
    pb::ReportRequest {
        domain: "llm".into(),
        reports: reports
            .iter()
            .map(|(entries, tokens)| pb::UsageReport {
                entries: entries.iter().map(|(k, v)| entry(k, v)).collect(),
                tokens: *tokens,
            })
            .collect(),
    }
}

async fn quota(server: &TestServer, tenant: &str) -> pb::QuotaState {
    QuotaClient::new(server.channel().await)
        .get_quota(pb::GetQuotaRequest {
            domain: "llm".into(),
            entries: vec![entry("tenant", tenant)],
        })
        .await
        .expect("rpc")
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reported_usage_goes_into_debt_and_every_check_waits_until_it_is_repaid() {
    let server = TestServer::start(CONFIG).await;
    let mut usage = UsageClient::new(server.channel().await);
    let mut authz = server.authz().await;
    let mut rls = server.rls().await;
    let acme = check_request(&[("x-tenant", "acme")]);
    // ext_authz on a post-paid rule is a check: it passes and charges nothing.
    for _ in 0..3 {
        let ok = authz.check(acme.clone()).await.expect("rpc").into_inner();
        assert_eq!(ok.status.map(|s| s.code), Some(0));
    }
    let before = quota(&server, "acme").await;
    assert_eq!(
        (before.charge.as_str(), before.max_debt, before.debt),
        ("post_paid", 1_000, 0)
    );
    assert!(before.global_remaining > 999.0, "{before:?}");
    // 1 500 tokens used: charged in full, 500 in debt.
    let answer = usage
        .report(report(&[(&[("tenant", "acme")], 1_500)]))
        .await
        .expect("rpc")
        .into_inner();
    let r = &answer.results[0];
    assert_eq!(
        (r.matched, r.rule.as_str(), r.remaining, r.debt),
        (true, "tenant_tokens", 0, 500)
    );
    let until_full = seconds(r.until_full.as_ref());
    assert!(
        (89.0..=90.1).contains(&until_full),
        "1 500 at 1 000 a minute: {until_full}"
    );
    // ext_authz denies with the time to repay the debt and earn one token: 501 / (1000/60 s).
    let denied = authz.check(acme.clone()).await.expect("rpc").into_inner();
    assert_ne!(denied.status.as_ref().map(|s| s.code), Some(0));
    let Some(HttpResponse::DeniedResponse(_)) = &denied.http_response else {
        panic!("not denied: {denied:?}")
    };
    let h = headers_of(&denied);
    let retry: u64 = h["retry-after"].parse().expect("Retry-After");
    assert!((30..=31).contains(&retry), "Retry-After {retry}");
    assert!(
        h["ratelimit"].starts_with(r#""tenant_tokens";r=0;t="#),
        "{h:?}"
    );
    // Envoy's request-time check (hits_addend 0) is denied too, remaining 0, reset ~90 s.
    let mut check = request("llm", &[&[("tenant", "acme")]]);
    check.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    let rl = rls
        .should_rate_limit(check)
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(rl.overall_code, Code::OverLimit as i32);
    let status = &rl.statuses[0];
    assert_eq!(status.limit_remaining, 0);
    let reset = status.duration_until_reset.as_ref().expect("reset");
    assert!(reset.seconds >= 89, "{reset:?}");
    // GetQuota shows the debt.
    let state = quota(&server, "acme").await;
    assert_eq!(state.debt, 500, "{state:?}");
    assert!(
        (-500.5..=-499.0).contains(&state.global_remaining),
        "{state:?}"
    );
    // Another tenant is unaffected.
    let other = authz
        .check(check_request(&[("x-tenant", "globex")]))
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(other.status.map(|s| s.code), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_reports_are_clamped_at_the_debt_bound_and_counted() {
    let server = TestServer::start(CONFIG).await;
    let mut usage = UsageClient::new(server.channel().await);
    let many: Vec<(&[(&str, &str)], u64)> = vec![(&[("tenant", "acme")], u64::MAX); 64];
    for _ in 0..3 {
        let answer = usage.report(report(&many)).await.expect("rpc").into_inner();
        assert_eq!(answer.results.len(), 64);
        assert!(
            answer.results.iter().all(|r| r.debt == 1_000),
            "clamped at max_debt (the burst): {:?}",
            answer.results[0]
        );
    }
    assert_eq!(quota(&server, "acme").await.debt, 1_000);
    let (_, metrics) = server.admin_get("/metrics").await;
    let clamped: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(r#"sluice_usage_tokens_total{outcome="clamped"} "#))
        .expect("clamped series")
        .parse()
        .expect("number");
    // 64 reports on one key in one call add up saturating (to u64::MAX), and the float counter
    // does not wrap over calls: about 3 × u64::MAX clamped.
    assert!(clamped > 2.9 * u64::MAX as f64, "{clamped}");
    assert!(metrics.contains(r#"sluice_requests_total{api="report",code="ok"} 3"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reports_are_refused_and_charge_nothing() {
    let server = TestServer::start(CONFIG).await;
    let mut usage = UsageClient::new(server.channel().await);
    let refused = |r: Result<tonic::Response<pb::ReportResponse>, tonic::Status>| match r {
        Ok(ok) => panic!("accepted: {ok:?}"),
        Err(s) => {
            assert_eq!(s.code(), Status::InvalidArgument, "{s:?}");
            s.message().to_string()
        }
    };
    // A report to a prepaid rule refuses the whole call: the post-paid report beside it is not
    // charged either.
    let mixed = report(&[(&[("tenant", "acme")], 700), (&[("client", "c1")], 1)]);
    let why = refused(usage.report(mixed).await);
    assert!(
        why.contains("report 1") && why.contains("per_client") && why.contains("prepaid"),
        "{why}"
    );
    assert_eq!(quota(&server, "acme").await.global_remaining, 1_000.0);
    let why = refused(usage.report(report(&[])).await);
    assert!(why.contains("no reports"), "{why}");
    let too_many = vec![(&[("tenant", "acme")][..], 1); 65];
    let why = refused(usage.report(report(&too_many)).await);
    assert!(why.contains("65 reports"), "{why}");
    let why = refused(usage.report(report(&[(&[("", "x")], 1)])).await);
    assert!(why.contains("empty key"), "{why}");
    let mut no_domain = report(&[(&[("tenant", "acme")], 1)]);
    no_domain.domain.clear();
    refused(usage.report(no_domain).await);
    // No rule matches: nothing charged, said so.
    let answer = usage
        .report(report(&[(&[("model", "large")], 5)]))
        .await
        .expect("rpc")
        .into_inner();
    assert!(!answer.results[0].matched);
    assert_eq!(quota(&server, "acme").await.global_remaining, 1_000.0);
}

/// A descriptor whose `rate_limits` mix a prepaid request budget (first) and a post-paid token
/// budget: a report is accepted and charges the tokens only, so the requests keep their budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_on_mixed_limits_charges_only_the_post_paid_ones() {
    let server = TestServer::start(
        r#"
domains:
  - domain: llm
    descriptors:
      - key: tenant
        rate_limits:
          - {name: tenant_requests, unit: minute, requests_per_unit: 3}
          - {name: tenant_tokens, unit: minute, requests_per_unit: 100000, charge: post_paid}
"#,
    )
    .await;
    let mut usage = UsageClient::new(server.channel().await);
    let mut rls = server.rls().await;
    let ask = || request("llm", &[&[("tenant", "acme")]]);
    let code = |r: sluice_proto::envoy::ratelimit::RateLimitResponse| r.overall_code;
    let first = rls
        .should_rate_limit(ask())
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(code(first), Code::Ok as i32);
    let answer = usage
        .report(report(&[(&[("tenant", "acme")], 5_000)]))
        .await
        .expect("a report to a descriptor with a post-paid limit is accepted")
        .into_inner();
    assert_eq!(answer.results[0].rule, "tenant_tokens");
    assert_eq!(answer.results[0].remaining, 95_000);
    for n in 2..=3 {
        let r = rls
            .should_rate_limit(ask())
            .await
            .expect("rpc")
            .into_inner();
        assert_eq!(code(r), Code::Ok as i32, "request {n} of 3");
    }
    let r = rls
        .should_rate_limit(ask())
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(code(r), Code::OverLimit as i32, "request 4 of 3");
}
