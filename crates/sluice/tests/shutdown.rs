//! SIGTERM under load: callers keep getting answers while sluice drains, then it exits 0.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;

const CONFIG: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100000}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_load_fails_no_request() {
    let mut sluice = common::start_with(CONFIG, &["--drain-delay", "1500ms"]);
    let client = RateLimitServiceClient::connect(format!("http://{}", sluice.grpc))
        .await
        .expect("connect");
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut workers = Vec::new();
    for w in 0..8 {
        let (mut client, stop, ok, failed) =
            (client.clone(), stop.clone(), ok.clone(), failed.clone());
        workers.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let req = common::rls_request("d", "k", &format!("w{w}-{}", i % 50));
                match client.should_rate_limit(req).await {
                    Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = ok.load(Ordering::Relaxed);
    sluice.send_sigterm();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let draining = common::http_get(sluice.admin.port(), "/readyz", &[]);
    assert_eq!(
        draining.status, 503,
        "readiness fails while draining: {}",
        draining.body
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.expect("worker");
    }
    let (after, failures) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(
        before > 0 && after > before,
        "load ran before and during the drain: {before} then {after}"
    );
    assert_eq!(failures, 0, "no request failed ({after} succeeded)");
    assert_eq!(sluice.wait_exit(), Some(0));
}
