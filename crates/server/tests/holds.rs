//! Concurrency limits over `ShouldRateLimit`, as Envoy's rate-limit filter calls it: the
//! request-time descriptor ends in `sluice-hold: acquire` and an admitted request gets its hold's
//! token in `request_headers_to_add`; the stream-done descriptor ends in `sluice-release: <token>`.

mod common;

use common::{TestServer, request};
use sluice_proto::envoy::protobuf::UInt64Value;
use sluice_proto::envoy::ratelimit::RateLimitResponse;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;

const CONFIG: &str = r#"
domains:
  - domain: llm
    descriptors:
      - key: tenant
        rate_limit: {concurrency: 2, hold_timeout: 60s, name: generations}
      - key: budget
        rate_limit: {unit: minute, requests_per_unit: 1000, charge: post_paid}
"#;

/// The token an admitted acquire was answered with (`x-sluice-hold`), if any.
fn token(resp: &RateLimitResponse) -> Option<String> {
    let headers = &resp.request_headers_to_add;
    assert!(headers.len() <= 1, "{headers:?}");
    headers.first().map(|h| {
        assert_eq!(h.key, "x-sluice-hold");
        assert_eq!(h.value.len(), 16, "{}", h.value);
        assert!(h.value.bytes().all(|b| b.is_ascii_hexdigit()));
        h.value.clone()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_answers_a_token_and_its_release_frees_the_slot() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    let acquire = request("llm", &[&[("tenant", "acme"), ("sluice-hold", "acquire")]]);
    let mut call = async |req| rls.should_rate_limit(req).await.expect("rpc").into_inner();
    let first = call(acquire.clone()).await;
    assert_eq!(first.overall_code, Code::Ok as i32);
    let status = &first.statuses[0];
    let limit = status.current_limit.as_ref().expect("limit");
    assert_eq!(
        (
            limit.name.as_str(),
            limit.requests_per_unit,
            limit.unit,
            status.limit_remaining
        ),
        ("generations", 2, 0, 1),
        "N in flight (no unit), the free slots left"
    );
    let first = token(&first).expect("a token");
    let second = call(acquire.clone()).await;
    assert_ne!(token(&second).expect("a token"), first);
    let third = call(acquire.clone()).await;
    assert_eq!(third.overall_code, Code::OverLimit as i32);
    assert_eq!(token(&third), None, "a denied request holds nothing");

    let release = request(
        "llm",
        &[&[("tenant", "acme"), ("sluice-release", first.as_str())]],
    );
    assert_eq!(call(release.clone()).await.overall_code, Code::Ok as i32);
    assert_eq!(
        call(acquire.clone()).await.overall_code,
        Code::Ok as i32,
        "freed"
    );
    assert_eq!(
        call(acquire.clone()).await.overall_code,
        Code::OverLimit as i32
    );
    // Released again, for another tenant, or made up: nothing is freed.
    call(release).await;
    call(request(
        "llm",
        &[&[("tenant", "other"), ("sluice-release", first.as_str())]],
    ))
    .await;
    call(request(
        "llm",
        &[&[("tenant", "acme"), ("sluice-release", "00000000deadbeef")]],
    ))
    .await;
    // A client's `x-sluice-hold: acquire`, read into the release entry, acquires nothing.
    call(request(
        "llm",
        &[&[("tenant", "acme"), ("sluice-release", "acquire")]],
    ))
    .await;
    assert_eq!(
        call(acquire).await.overall_code,
        Code::OverLimit as i32,
        "still 2"
    );
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains(r#"sluice_hold_releases_total{outcome="released"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"sluice_hold_releases_total{outcome="unknown"} 4"#),
        "{metrics}"
    );
    server.stop().await.expect("clean stop");
}

/// A client can put anything in `x-sluice-hold`. The stream-done call also carries post-paid
/// usage: a garbage token must not fail it (the usage would go uncharged), only find nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_token_does_not_fail_the_usage_reported_with_it() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    let mut done = request(
        "llm",
        &[
            &[
                ("tenant", "acme"),
                ("sluice-release", "'; DROP TABLE holds; --"),
            ],
            &[("budget", "acme")],
        ],
    );
    done.descriptors[1].hits_addend = Some(UInt64Value { value: 700 });
    let resp = rls.should_rate_limit(done).await.expect("rpc").into_inner();
    assert_eq!(resp.overall_code, Code::Ok as i32);
    let (_, metrics) = server.admin_get("/metrics").await;
    assert!(
        metrics.contains(r#"sluice_usage_tokens_total{outcome="reported"} 700"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"sluice_hold_releases_total{outcome="unknown"} 1"#),
        "{metrics}"
    );
    server.stop().await.expect("clean stop");
}

/// Found by a security review: six acquires carrying an Envoy descriptor `limit` override
/// (1000/SECOND, as Envoy sends whenever a `rate_limits` entry reads `limit` from dynamic
/// metadata) were all admitted with no `x-sluice-hold` token on a 3-slot key, and three plain
/// acquires passed after them: 9 in flight. The override is ignored on a concurrency limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envoy_limit_override_on_an_acquire_still_takes_a_slot() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    let mut call = async |req| rls.should_rate_limit(req).await.expect("rpc").into_inner();
    let per_second = |mut req: sluice_proto::envoy::ratelimit::RateLimitRequest| {
        req.descriptors[0].limit = Some(
            sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::RateLimitOverride {
                requests_per_unit: 1000,
                unit: 1,
            },
        );
        req
    };
    let acquire = request("llm", &[&[("tenant", "acme"), ("sluice-hold", "acquire")]]);
    let mut tokens = Vec::new();
    for _ in 0..4 {
        let resp = call(per_second(acquire.clone())).await;
        let admitted = resp.overall_code == Code::Ok as i32;
        let held = token(&resp);
        assert_eq!(admitted, held.is_some(), "a token iff admitted");
        let limit = resp.statuses[0].current_limit.as_ref().expect("limit");
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (2, 0),
            "the rule's 2 in flight, not the override's rate"
        );
        tokens.extend(held);
    }
    assert_eq!(tokens.len(), 2, "2 slots");
    for _ in 0..3 {
        let plain = call(acquire.clone()).await;
        assert_eq!(plain.overall_code, Code::OverLimit as i32, "full");
    }
    // The release finds its hold, with the override as without it.
    let release = request(
        "llm",
        &[&[("tenant", "acme"), ("sluice-release", tokens[0].as_str())]],
    );
    call(per_second(release)).await;
    let again = call(acquire.clone()).await;
    assert!(token(&again).is_some(), "freed");
    assert_eq!(
        call(acquire).await.overall_code,
        Code::OverLimit as i32,
        "2 again"
    );
    server.stop().await.expect("clean stop");
}
