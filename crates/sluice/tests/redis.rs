//! Several `sluice serve` processes on one Redis enforce one global limit, as a user runs them.

mod common;

use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use sluice_testkit::redis::Standalone;

fn config(url: &str, token_file: &std::path::Path) -> String {
    format!(
        r#"
admin:
  allow_reset: true
  reset_token_file: {}
domains:
  - domain: edge
    descriptors:
      - key: tenant
        rate_limit: {{name: per_tenant, unit: minute, requests_per_unit: 12}}
redis:
  url: {url}
  timeout: 100ms
"#,
        token_file.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_share_one_limit_through_redis() {
    let redis = Standalone::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "reset-token-for-the-test").expect("write");
    let sidecars: Vec<_> = (0..3)
        .map(|_| common::start(&config(&redis.url(), &token)))
        .collect();
    let mut clients = Vec::new();
    for s in &sidecars {
        clients.push(
            RateLimitServiceClient::connect(format!("http://{}", s.grpc))
                .await
                .expect("connect"),
        );
    }
    let mut admitted = 0;
    for _ in 0..10 {
        for c in clients.iter_mut() {
            let resp = c
                .should_rate_limit(common::rls_request("edge", "tenant", "acme"))
                .await
                .expect("rpc")
                .into_inner();
            admitted += usize::from(resp.overall_code == Code::Ok as i32);
        }
    }
    assert_eq!(
        admitted, 12,
        "30 requests over 3 sidecars, one global burst of 12"
    );
    // Every sidecar reports the same global bucket (what is left, not counting leases).
    let mut seen = Vec::new();
    for s in &sidecars {
        let v = common::quota_get_json(&s.grpc.to_string(), "edge", &["tenant=acme"]);
        assert_eq!(
            (v["rule"].as_str(), v["store"].as_str()),
            (Some("per_tenant"), Some("redis")),
            "{v}"
        );
        seen.push(v["global_remaining"].as_f64().expect("global_remaining"));
    }
    assert!(
        seen.iter().all(|g| (g - seen[0]).abs() < 0.5 && *g < 1.0),
        "same global remaining everywhere: {seen:?}"
    );
    // A reset through one sidecar refills the global bucket for all of them.
    let reset = std::process::Command::new(common::bin())
        .args([
            "quota",
            "reset",
            "--addr",
            &sidecars[1].grpc.to_string(),
            "--domain",
            "edge",
            "-d",
            "tenant=acme",
        ])
        .env("SLUICE_RESET_TOKEN", "reset-token-for-the-test")
        .output()
        .expect("sluice quota reset");
    assert!(
        reset.status.success(),
        "{}",
        String::from_utf8_lossy(&reset.stderr)
    );
    // Each sidecar converges within `engine.lease_ttl` (1 s): a starved sidecar asks again by then.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    for (i, c) in clients.iter_mut().enumerate() {
        loop {
            let resp = c
                .should_rate_limit(common::rls_request("edge", "tenant", "acme"))
                .await
                .expect("rpc")
                .into_inner();
            if resp.overall_code == Code::Ok as i32 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "sidecar {i} still denies 3 s after the reset"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    let readyz = common::http_get(sidecars[0].admin.port(), "/readyz", &[]);
    assert_eq!(readyz.status, 200);
    assert!(
        readyz.body.contains("store: redis") && readyz.body.contains("degraded: false"),
        "{}",
        readyz.body
    );
}
