//! The one handler path: ShouldRateLimit, ext_authz Check and Usage/Report over real gRPC
//! connections share one bucket, one dry-run switch and one set of metrics.

mod common;

use common::{TestServer, check_request, entry, request};
use sluice_proto::envoy::auth::CheckRequest;
use sluice_proto::envoy::auth::check_response::HttpResponse;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::sluice::v1 as pb;
use sluice_proto::sluice::v1::usage_client::UsageClient;

const CONFIG: &str = r#"
shadow_mode: true
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {name: per_client, unit: minute, requests_per_unit: 3}
      - key: tenant
        rate_limit: {name: tenant_tokens, unit: minute, requests_per_unit: 1000, charge: post_paid}
authz:
  domain: edge
  descriptors:
    - [{key: remote_address, from: client_ip}]
"#;

/// The value of the series `name{labels}` in a Prometheus text page (0 if absent).
fn value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_decides_counts_and_dry_runs_the_same_way() {
    let server = TestServer::start(CONFIG).await;
    let (mut rls, mut authz) = (server.rls().await, server.authz().await);
    let mut usage = UsageClient::new(server.channel().await);
    // One client address, 3 per minute, under the global dry run: the RLS calls and the
    // ext_authz checks spend one bucket; past it both answer OK and count a would-deny.
    let ip = [("remote_address", "192.0.2.1")];
    for _ in 0..3 {
        let resp = rls
            .should_rate_limit(request("edge", &[&ip]))
            .await
            .expect("rpc")
            .into_inner();
        assert_eq!(resp.overall_code, Code::Ok as i32);
    }
    for _ in 0..2 {
        let resp = authz
            .check(check_request(&[]))
            .await
            .expect("rpc")
            .into_inner();
        assert!(
            matches!(resp.http_response, Some(HttpResponse::OkResponse(_))),
            "dry run: allowed, {resp:?}"
        );
    }
    let report = pb::ReportRequest {
        domain: "edge".into(),
        reports: vec![pb::UsageReport {
            entries: vec![entry("tenant", "acme")],
            tokens: 5,
        }],
    };
    let results = usage.report(report).await.expect("rpc").into_inner();
    assert_eq!(results.results[0].rule, "tenant_tokens");
    // Invalid requests of every API are refused and counted the same way.
    let bad_rls = request("", &[&ip]);
    assert!(rls.should_rate_limit(bad_rls).await.is_err());
    assert!(authz.check(CheckRequest::default()).await.is_err());
    let no_reports = pb::ReportRequest {
        domain: "edge".into(),
        reports: vec![],
    };
    assert!(usage.report(no_reports).await.is_err());

    let (_, metrics) = server.admin_get("/metrics").await;
    let would_deny =
        r#"sluice_decisions_total{domain="edge",outcome="shadow_over_limit",rule="per_client"}"#;
    assert_eq!(value(&metrics, would_deny), 2.0, "{metrics}");
    for (api, ok) in [("rls", 3.0), ("authz", 2.0), ("report", 1.0)] {
        let requests = format!(r#"sluice_requests_total{{api="{api}",code="ok"}}"#);
        assert_eq!(value(&metrics, &requests), ok, "{api}: {metrics}");
        let invalid = format!(r#"sluice_requests_total{{api="{api}",code="invalid"}}"#);
        assert_eq!(value(&metrics, &invalid), 1.0, "{api}: {metrics}");
        let observed = format!(r#"sluice_request_duration_seconds_count{{api="{api}"}}"#);
        assert_eq!(value(&metrics, &observed), ok, "{api}: {metrics}");
    }
}
