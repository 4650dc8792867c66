//! SIGTERM under load with Redis: every leased token goes back before the process exits, also
//! those of background refills still in flight when it was told to stop.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use sluice_proto::sluice::v1::quota_client::QuotaClient;
use sluice_proto::sluice::v1::{Entry, GetQuotaRequest};
use sluice_testkit::redis::Standalone;

/// A large burst that refills at one token per hour: what the global bucket holds after the run
/// is the burst minus what was admitted, to a thousandth of a token.
const BURST: u64 = 100_000;
const KEYS: usize = 16;

fn config(url: &str) -> String {
    format!(
        r#"
domains:
  - domain: d
    descriptors:
      - key: tenant
        rate_limit: {{unit: hour, requests_per_unit: 1, burst: {BURST}}}
redis:
  url: {url}
  timeout: 200ms
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_leased_token_is_stranded_by_sigterm() {
    let redis = Standalone::start().await;
    let mut sidecar = common::start_with(&config(&redis.url()), &["--drain-delay", "300ms"]);
    let client = RateLimitServiceClient::connect(format!("http://{}", sidecar.grpc))
        .await
        .expect("connect");
    // Per key: requests admitted. Workers run until the sidecar stops answering.
    let admitted = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let mut workers = Vec::new();
    for w in 0..8 {
        let (mut client, admitted) = (client.clone(), Arc::clone(&admitted));
        workers.push(tokio::spawn(async move {
            let mut i = w;
            loop {
                i += 1;
                let tenant = format!("t{}", i % KEYS);
                match client
                    .should_rate_limit(common::rls_request("d", "tenant", &tenant))
                    .await
                {
                    Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => {
                        *admitted.lock().expect("lock").entry(tenant).or_default() += 1;
                    }
                    Ok(r) => panic!("denied below the burst: {:?}", r.into_inner()),
                    Err(_) => return,
                }
            }
        }));
    }
    // Long enough for leases to grow with demand and background refills to run all the time.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    sidecar.send_sigterm();
    for w in workers {
        w.await.expect("worker");
    }
    assert_eq!(sidecar.wait_exit(), Some(0));

    // A fresh sidecar (holding no lease) reads each global bucket.
    let reader = common::start(&config(&redis.url()));
    let mut quota = QuotaClient::connect(format!("http://{}", reader.grpc))
        .await
        .expect("connect");
    let admitted = admitted.lock().expect("lock").clone();
    assert_eq!(admitted.len(), KEYS, "every key saw traffic");
    let total: u64 = admitted.values().sum();
    assert!(total > 1_000, "load ran: {total} admitted");
    for (tenant, n) in &admitted {
        let state = quota
            .get_quota(GetQuotaRequest {
                domain: "d".into(),
                entries: vec![Entry {
                    key: "tenant".into(),
                    value: tenant.clone(),
                }],
            })
            .await
            .expect("get quota")
            .into_inner();
        let expected = (BURST - n) as f64;
        // Refill at 1/hour adds well under 0.01 tokens during the test.
        assert!(
            (state.global_remaining - expected).abs() < 0.05,
            "{tenant}: {n} admitted, so {expected} should be left in Redis; found {} ({} stranded)",
            state.global_remaining,
            expected - state.global_remaining
        );
    }
}
