//! Spellings of an identity over real gRPC: no value a client sends reaches another value's
//! bucket, and no copy of an identity header buys a fresh one.

mod common;

use common::{TestServer, check_request, request};
use sluice_engine::key::{DIGEST_MARK, key_value};
use sluice_proto::envoy::auth::check_response::HttpResponse;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;

const CONFIG: &str = r#"
domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {name: per_user, unit: minute, requests_per_unit: 3}
      - key: key
        rate_limit: {name: per_key, unit: minute, requests_per_unit: 3}
authz:
  domain: edge
  descriptors:
    - [{key: key, from: {api_key: {}}}]
"#;

/// A long value at its limit: its digested form (as `ListQuotas`, `/quota` and Redis keys show
/// it), with or without the mark, is a bucket of its own, not a way to drain the long value's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_digested_form_of_a_long_value_does_not_reach_its_bucket() {
    let server = TestServer::start(CONFIG).await;
    let rls = server.rls().await;
    let long = format!("victim-{}", "v".repeat(300));
    let code = |value: String| {
        let req = request("edge", &[&[("user", value.as_str())]]);
        let mut rls = rls.clone();
        async move {
            let resp = rls.should_rate_limit(req).await.expect("rpc").into_inner();
            resp.overall_code
        }
    };
    for _ in 0..3 {
        assert_eq!(code(long.clone()).await, Code::Ok as i32);
    }
    assert_eq!(code(long.clone()).await, Code::OverLimit as i32);
    let digested = key_value(&long).into_owned();
    let unmarked = digested.trim_start_matches(DIGEST_MARK).to_string();
    for forged in [digested, unmarked] {
        for _ in 0..3 {
            assert_eq!(code(forged.clone()).await, Code::Ok as i32, "{forged:?}");
        }
        assert_eq!(code(forged.clone()).await, Code::OverLimit as i32);
    }
    // The long value's own bucket was not touched by the forgeries: still at its limit.
    assert_eq!(code(long).await, Code::OverLimit as i32);
}

/// An API key at its limit, sent again with a second `x-api-key` header (Envoy joins the two as
/// `victim,junkN`), stays at its limit: the first value counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_api_key_header_does_not_buy_a_fresh_bucket() {
    let server = TestServer::start(CONFIG).await;
    let authz = server.authz().await;
    let allowed = |key: String| {
        let mut authz = authz.clone();
        async move {
            let resp = authz
                .check(check_request(&[("x-api-key", key.as_str())]))
                .await
                .expect("rpc")
                .into_inner();
            matches!(resp.http_response, Some(HttpResponse::OkResponse(_)))
        }
    };
    for _ in 0..3 {
        assert!(allowed("victim".into()).await);
    }
    for n in 0..5 {
        assert!(!allowed(format!("victim,junk{n}")).await, "junk{n}");
    }
}

/// ext_authz requests carrying hundreds of KiB of headers are decided like any other (a 200 KiB
/// API key is a digest in the key), and one over Check's 256 KiB message bound (Envoy's own
/// header limit is 60 KiB by default) is refused at its prefix, before any work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mibs_of_headers_are_decided_or_refused_never_a_crash() {
    let server = TestServer::start(CONFIG).await;
    let mut authz = server.authz().await;
    let huge_key = "k".repeat(200 << 10);
    for n in 0..4 {
        let resp = authz
            .check(check_request(&[("x-api-key", huge_key.as_str())]))
            .await
            .expect("a 200 KiB header is decided")
            .into_inner();
        let allowed = matches!(resp.http_response, Some(HttpResponse::OkResponse(_)));
        assert_eq!(allowed, n < 3, "request {n}: 3 a minute for that key");
    }
    let filler: Vec<(String, String)> = (0..200)
        .map(|i| (format!("x-filler-{i}"), "f".repeat(1_000)))
        .collect();
    let mut many: Vec<(&str, &str)> = filler
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    many.push(("x-api-key", "someone"));
    let resp = authz
        .check(check_request(&many))
        .await
        .expect("200 headers are decided");
    assert!(matches!(
        resp.into_inner().http_response,
        Some(HttpResponse::OkResponse(_))
    ));
    for too_big in ["k".repeat(300 << 10), "k".repeat(5 << 20)] {
        let refused = authz
            .check(check_request(&[("x-api-key", too_big.as_str())]))
            .await
            .expect_err("over Check's 256 KiB message bound");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused}");
        assert!(refused.message().contains("at most 262144"), "{refused}");
    }
    let (_, keys) = server.admin_get("/metrics").await;
    assert!(
        keys.contains("sluice_tracked_keys 2"),
        "two keys, each bounded: {keys}"
    );
}
