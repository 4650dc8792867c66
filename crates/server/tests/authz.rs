//! `Check` (ext_authz) over a real gRPC connection.

mod common;

use std::collections::HashMap;

use common::{CONFIG, TestServer};
use sluice_proto::envoy::auth::attribute_context::{HttpRequest, Peer, Request};
use sluice_proto::envoy::auth::check_response::HttpResponse;
use sluice_proto::envoy::auth::{AttributeContext, CheckRequest, CheckResponse};
use sluice_proto::envoy::core::{Address, SocketAddress, address};

fn check(xff: &str) -> CheckRequest {
    let mut headers = HashMap::new();
    headers.insert("x-forwarded-for".to_string(), xff.to_string());
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: Some(Address {
                    address: Some(address::Address::SocketAddress(SocketAddress {
                        address: "192.0.2.1".into(),
                        ..SocketAddress::default()
                    })),
                }),
                ..Peer::default()
            }),
            request: Some(Request {
                http: Some(HttpRequest {
                    method: "GET".into(),
                    path: "/hello".into(),
                    host: "example.com".into(),
                    headers,
                    ..HttpRequest::default()
                }),
                ..Request::default()
            }),
            ..AttributeContext::default()
        }),
    }
}

fn headers_of(resp: &CheckResponse) -> HashMap<String, String> {
    let list = match &resp.http_response {
        Some(HttpResponse::OkResponse(ok)) => &ok.response_headers_to_add,
        Some(HttpResponse::DeniedResponse(denied)) => &denied.headers,
        other => panic!("unexpected http_response {other:?}"),
    };
    list.iter()
        .filter_map(|h| h.header.as_ref())
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
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
