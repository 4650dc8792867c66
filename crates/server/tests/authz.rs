//! `Check` (ext_authz) over a real gRPC connection.

mod common;

use common::{CONFIG, TestServer, headers_of};
use sluice_proto::envoy::auth::CheckRequest;
use sluice_proto::envoy::auth::check_response::HttpResponse;

fn check(xff: &str) -> CheckRequest {
    common::check_request(&[("x-forwarded-for", xff)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allows_with_ratelimit_headers_then_denies_with_429_and_problem_json() {
    let server = TestServer::start(CONFIG).await;
    let mut authz = server.authz().await;
    for remaining in [2, 1, 0] {
        let resp = authz
            .check(check("203.0.113.5"))
            .await
            .expect("rpc")
            .into_inner();
        assert_eq!(resp.status.as_ref().map(|s| s.code), Some(0), "allowed");
        let h = headers_of(&resp);
        assert_eq!(h["ratelimit-policy"], r#""per_client";q=3;w=60"#);
        assert!(
            h["ratelimit"].starts_with(&format!(r#""per_client";r={remaining};t="#)),
            "{h:?}"
        );
    }
    let denied = authz
        .check(check("203.0.113.5"))
        .await
        .expect("rpc")
        .into_inner();
    assert_ne!(denied.status.as_ref().map(|s| s.code), Some(0), "denied");
    let Some(HttpResponse::DeniedResponse(body)) = &denied.http_response else {
        panic!("no denied response: {denied:?}")
    };
    assert_eq!(body.status.as_ref().map(|s| s.code), Some(429));
    let h = headers_of(&denied);
    let retry: u64 = h["retry-after"].parse().expect("Retry-After seconds");
    assert!((1..=20).contains(&retry), "one token per 20 s: {retry}");
    assert_eq!(h["content-type"], "application/problem+json");
    assert!(h["ratelimit"].starts_with(r#""per_client";r=0;t="#));
    let problem: serde_json::Value = serde_json::from_str(&body.body).expect("problem+json");
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["violated_policies"][0]["policy"], "per_client");
    assert_eq!(problem["violated_policies"][0]["limit"], 3);

    let other = authz
        .check(check("203.0.113.6"))
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(
        other.status.as_ref().map(|s| s.code),
        Some(0),
        "XFF decides the client"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_without_http_attributes_is_invalid() {
    let server = TestServer::start(CONFIG).await;
    let mut authz = server.authz().await;
    let err = authz
        .check(CheckRequest::default())
        .await
        .expect_err("invalid");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("attributes.request.http"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_authz_section_every_request_is_allowed_and_counted() {
    let config = CONFIG.split("authz:").next().expect("config head");
    let server = TestServer::start(config).await;
    let mut authz = server.authz().await;
    for _ in 0..5 {
        let resp = authz
            .check(check("203.0.113.5"))
            .await
            .expect("rpc")
            .into_inner();
        assert_eq!(resp.status.as_ref().map(|s| s.code), Some(0));
    }
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains(r#"sluice_requests_total{api="authz",code="not_configured"} 5"#),
        "{metrics}"
    );
}

/// ext_authz decides on the path in one spelling (issue 41): spellings a server takes for
/// `/login` all spend its bucket, rather than each getting a fresh one (or matching no rule).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spellings_of_one_path_spend_one_bucket() {
    const LOGIN: &str = r#"
domains:
  - domain: edge
    descriptors:
      - key: path
        value: /login
        rate_limit: {name: login, unit: minute, requests_per_unit: 3}
authz:
  domain: edge
  descriptors:
    - [{key: path, from: path}]
"#;
    let server = TestServer::start(LOGIN).await;
    let mut authz = server.authz().await;
    let mut allowed = Vec::new();
    for path in [
        "/login",
        "//login",
        "/./login?next=/",
        "/x/../login",
        "/%6cogin",
        "/%2e/login#top",
    ] {
        let mut req = common::check_request(&[]);
        if let Some(http) = req
            .attributes
            .as_mut()
            .and_then(|a| a.request.as_mut())
            .and_then(|r| r.http.as_mut())
        {
            http.path = path.to_string();
        }
        let resp = authz.check(req).await.expect("rpc").into_inner();
        if resp.status.as_ref().map(|s| s.code) == Some(0) {
            allowed.push(path);
        }
    }
    assert_eq!(allowed, ["/login", "//login", "/./login?next=/"]);
}
