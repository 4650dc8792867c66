//! A new key that finds no room (`engine.max_keys`) is answered as such over both Envoy APIs:
//! nothing left, a true retry time, a body that says why, and counted.

mod common;

use common::{TestServer, check_request, headers_of, request};
use sluice_proto::envoy::auth::check_response::HttpResponse;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;

const CONFIG: &str = r#"
engine:
  max_keys: 10
domains:
  - domain: edge
    descriptors:
      - key: tenant
        rate_limit: {unit: month, requests_per_unit: 3, mode: local, name: per_tenant}
authz:
  domain: edge
  descriptors:
    - [{key: tenant, from: {header: x-tenant}}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_refused_for_room_says_so_over_rls_and_ext_authz() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    for t in 0..10 {
        let tenant = format!("t{t}");
        let resp = rls
            .should_rate_limit(request("edge", &[&[("tenant", &tenant)]]))
            .await
            .expect("rpc")
            .into_inner();
        assert_eq!(resp.overall_code, Code::Ok as i32, "{tenant}");
    }
    let refused = rls
        .should_rate_limit(request("edge", &[&[("tenant", "t10")]]))
        .await
        .expect("rpc")
        .into_inner();
    let s = &refused.statuses[0];
    assert_eq!(
        (refused.overall_code, s.code),
        (Code::OverLimit as i32, Code::OverLimit as i32)
    );
    assert_eq!(
        s.limit_remaining, 0,
        "nothing is left for a key with no room"
    );
    let reset = s
        .duration_until_reset
        .as_ref()
        .expect("duration_until_reset");
    assert_eq!(
        (reset.seconds, reset.nanos),
        (1, 0),
        "when room is looked for again"
    );

    let mut authz = server.authz().await;
    let denied = authz
        .check(check_request(&[("x-tenant", "t11")]))
        .await
        .expect("rpc")
        .into_inner();
    let h = headers_of(&denied);
    assert_eq!(h["retry-after"], "1");
    let Some(HttpResponse::DeniedResponse(body)) = &denied.http_response else {
        panic!("denied: {denied:?}");
    };
    assert_eq!(body.status.as_ref().map(|s| s.code), Some(429));
    let problem: serde_json::Value = serde_json::from_str(&body.body).expect("problem+json");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("engine.max_keys")),
        "{problem}"
    );
    assert_eq!(problem["violated_policies"][0]["reason"], "no_room_for_key");

    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(metrics.contains("sluice_keys_refused_total 2"), "{metrics}");
    assert!(
        metrics.contains(r#"outcome="no_room""#),
        "denials for room are not counted as over_limit"
    );
}
