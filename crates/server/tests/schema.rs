//! envoyproxy/ratelimit's answers where sluice has no reason to differ, over a real gRPC
//! connection: `unlimited` descriptors, `dynamic_metadata` with `metadata`, `quota_mode`.

mod common;

use common::{TestServer, request};
use sluice_proto::envoy::protobuf::value::Kind;
use sluice_proto::envoy::protobuf::{Struct, Value};
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;

const SCHEMA: &str = r#"
response: {rls_dynamic_metadata: true}
domains:
  - domain: api
    descriptors:
      - key: free
        rate_limit: {unlimited: true}
      - key: tenant
        rate_limit: {unit: minute, requests_per_unit: 1}
        metadata: {plan: {name: basic}, owner: billing}
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 5}
        metadata: {plan: {tier: 2}, owner: edge}
      - key: daily
        quota_mode: true
        rate_limit: {unit: day, requests_per_unit: 1}
      - key: monthly
        quota_mode: true
        rate_limit: {unit: month, requests_per_unit: 2}
"#;

fn field<'a>(s: &'a Struct, name: &str) -> &'a Value {
    s.fields
        .get(name)
        .unwrap_or_else(|| panic!("{name} in {s:?}"))
}

fn nested(v: &Value) -> &Struct {
    match &v.kind {
        Some(Kind::StructValue(s)) => s,
        other => panic!("a struct, not {other:?}"),
    }
}

fn text(v: &Value) -> &str {
    match &v.kind {
        Some(Kind::StringValue(s)) => s,
        other => panic!("a string, not {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlimited_descriptors_report_the_most_remaining_and_unmatched_ones_none() {
    let server = TestServer::start(SCHEMA).await;
    let mut rls = server.rls().await;
    let resp = rls
        .should_rate_limit(request("api", &[&[("free", "x")], &[("nothing", "x")]]))
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(resp.overall_code, Code::Ok as i32);
    assert_eq!(resp.statuses[0].limit_remaining, u32::MAX);
    assert!(resp.statuses[0].current_limit.is_none());
    assert_eq!(resp.statuses[1].limit_remaining, 0);
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_metadata_names_the_request_and_merges_the_metadata_of_passed_limits() {
    let server = TestServer::start(SCHEMA).await;
    let mut rls = server.rls().await;
    let mut req = request("api", &[&[("tenant", "acme")], &[("route", "chat")]]);
    req.hits_addend = 1;
    let first = rls
        .should_rate_limit(req.clone())
        .await
        .expect("rpc")
        .into_inner();
    let meta = first.dynamic_metadata.expect("dynamic_metadata");
    assert_eq!(text(field(&meta, "domain")), "api");
    let Some(Kind::ListValue(list)) = &field(&meta, "descriptors").kind else {
        panic!("descriptors is a list");
    };
    let entries = &field(nested(&list.values[0]), "entries");
    let Some(Kind::ListValue(entries)) = &entries.kind else {
        panic!("entries is a list");
    };
    assert_eq!(text(&entries.values[0]), "tenant=acme");
    let merged = nested(field(&meta, "metadata"));
    assert_eq!(text(field(merged, "owner")), "billing", "the first wins");
    let plan = nested(field(merged, "plan"));
    assert!(
        plan.fields.contains_key("name") && plan.fields.contains_key("tier"),
        "mappings merge: {plan:?}"
    );
    // The tenant's limit is spent: only the route's metadata passes.
    let second = rls.should_rate_limit(req).await.expect("rpc").into_inner();
    assert_eq!(second.overall_code, Code::OverLimit as i32);
    let meta = second.dynamic_metadata.expect("dynamic_metadata");
    let merged = nested(field(&meta, "metadata"));
    assert_eq!(text(field(merged, "owner")), "edge");
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_over_the_limit_only_when_every_quota_is() {
    let server = TestServer::start(SCHEMA).await;
    let mut rls = server.rls().await;
    let req = request("api", &[&[("daily", "u")], &[("monthly", "u")]]);
    let codes = |r: &sluice_proto::envoy::ratelimit::RateLimitResponse| {
        (
            r.overall_code,
            r.statuses.iter().map(|s| s.code).collect::<Vec<_>>(),
        )
    };
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let resp = rls
            .should_rate_limit(req.clone())
            .await
            .expect("rpc")
            .into_inner();
        seen.push(codes(&resp));
    }
    assert_eq!(
        seen,
        [
            (ok, vec![ok, ok]),
            (ok, vec![over, ok]),
            (over, vec![over, over])
        ]
    );
    server.stop().await.expect("clean stop");
}
