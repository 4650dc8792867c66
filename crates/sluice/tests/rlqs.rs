//! `deploy/examples/rlqs` end to end with Envoy 1.40's rate limit quota filter: each pod is an
//! Envoy and its sluice; Envoy decides every request in token buckets its sluice assigns (RLQS),
//! and the sidecars share one Redis. The example files are used unchanged but for their ports
//! and the Redis address.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Envoy, example, free_port, with_ports};
use sluice_testkit::process::{KeepAlive, Sluice};
use sluice_testkit::redis::Standalone;

/// The example's limit: 50 requests a second per tenant, burst 50.
const RATE: f64 = 50.0;
const BURST: f64 = 50.0;

struct Pod {
    http: u16,
    sluice: Sluice,
    _envoy: Envoy,
}

fn sluice_yaml(redis: &Standalone) -> String {
    let yaml = example("rlqs", "sluice.yaml");
    assert!(yaml.contains("redis://127.0.0.1:6379"));
    yaml.replace("redis://127.0.0.1:6379", &redis.url())
}

fn pod(sluice_yaml: &str) -> Pod {
    let sluice = common::start(sluice_yaml);
    let http = free_port();
    let envoy_yaml = with_ports(
        &example("rlqs", "envoy.yaml"),
        &[(10000, http), (8081, sluice.grpc.port())],
    );
    Pod {
        http,
        _envoy: Envoy::start(&envoy_yaml, &[http]),
        sluice,
    }
}

fn status(port: u16, tenant: &str) -> u16 {
    KeepAlive::new(port).get("/", &[("x-tenant", tenant)])
}

/// Sends requests for `tenant` to every port in `ports` from two threads each until `stop`, each
/// at most one every 2 ms (8 times the limit in all, without taking the machine from Redis);
/// returns the time of every request that passed.
fn hammer(
    ports: &[u16],
    tenant: &'static str,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<Instant>>> {
    let mut threads = Vec::new();
    for &port in ports {
        for _ in 0..2 {
            let stop = Arc::clone(stop);
            threads.push(std::thread::spawn(move || {
                let mut passed = Vec::new();
                let mut client = KeepAlive::new(port);
                while !stop.load(Ordering::Relaxed) {
                    match client.get("/", &[("x-tenant", tenant)]) {
                        200 => passed.push(Instant::now()),
                        429 => {}
                        other => panic!("Envoy answered {other}"),
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                passed
            }));
        }
    }
    threads
}

/// `sluice quota assignments -o json` on `pod`.
fn assignments(pod: &Pod) -> Vec<serde_json::Value> {
    let out = std::process::Command::new(common::bin())
        .args([
            "quota",
            "assignments",
            "--addr",
            &pod.sluice.grpc.to_string(),
            "-o",
            "json",
        ])
        .output()
        .expect("sluice quota assignments");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["assignments"].as_array().cloned().unwrap_or_default()
}

/// Polls until `port` answers 200 for `tenant`; panics after `within`.
fn wait_for_pass(port: u16, tenant: &str, within: Duration) -> Duration {
    let start = Instant::now();
    while status(port, tenant) != 200 {
        assert!(
            start.elapsed() < within,
            "{tenant} still denied after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_envoys_are_held_to_one_global_limit_by_their_sidecars() {
    let redis = Standalone::start().await;
    let yaml = sluice_yaml(&redis);
    let (a, b) = (pod(&yaml), pod(&yaml));

    // A client hammers one tenant on both Envoys for 16 s; no request waits for sluice.
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let threads = hammer(&[a.http, b.http], "acme", &stop);
    std::thread::sleep(Duration::from_secs(16));

    // Meanwhile a tenant of its own passes (its bucket id comes from the header): its first
    // request on an Envoy is denied until sluice's first assignment arrives (the example's
    // DENY_ALL no-assignment behaviour), then it passes.
    let took = wait_for_pass(a.http, "globex", Duration::from_secs(2));
    eprintln!("globex passed after {took:?}");

    stop.store(true, Ordering::Relaxed);
    let passed: Vec<Vec<Instant>> = threads
        .into_iter()
        .map(|t| t.join().expect("client"))
        .collect();
    let elapsed = start.elapsed().as_secs_f64();
    let per_pod: Vec<usize> = passed
        .chunks(2)
        .map(|c| c.iter().map(Vec::len).sum())
        .collect();
    let all: Vec<Instant> = passed.into_iter().flatten().collect();
    let total = all.len() as f64;
    let bound = BURST + RATE * elapsed;
    eprintln!("admitted {total} in {elapsed:.1} s (bound {bound:.0}), per Envoy {per_pod:?}");
    // Never over the global bound, whatever the two Envoys did between them.
    assert!(total <= bound, "{total} admitted, bound {bound:.0}");
    // And most of it once the shares settled (two reports, 10 s): from then on at least 60% of
    // the rate (RESULTS.md has the long runs: 95-98%).
    let late = all
        .iter()
        .filter(|t| t.duration_since(start) >= Duration::from_secs(10))
        .count() as f64;
    let late_window = elapsed - 10.0;
    assert!(
        late >= 0.6 * RATE * late_window,
        "{late} admitted in the last {late_window:.1} s"
    );
    assert!(
        per_pod.iter().all(|&n| n > 0),
        "an Envoy admitted nothing: {per_pod:?}"
    );

    // The Quota API lists each Envoy's share and usage (Envoy exports none of it).
    let listed = assignments(&a);
    let acme = listed
        .iter()
        .find(|x| x["bucket"] == "tenant=acme")
        .unwrap_or_else(|| panic!("no acme bucket in {listed:?}"));
    assert_eq!(acme["rule"], "per_tenant");
    assert_eq!(acme["strategy"], "token_bucket");
    let share = acme["tokens_per_second"].as_f64().expect("share");
    assert!(share > 0.0 && share <= RATE, "{acme}");
    assert!(acme["allowed"].as_u64().expect("allowed") > 0, "{acme}");
    assert!(acme["denied"].as_u64().expect("denied") > 0, "{acme}");
    assert!(
        listed.iter().any(|x| x["bucket"] == "tenant=globex"),
        "{listed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_drops_is_assigned_again_when_envoy_reconnects() {
    let redis = Standalone::start().await;
    let yaml = sluice_yaml(&redis);
    let mut a = pod(&yaml);
    wait_for_pass(a.http, "acme", Duration::from_secs(2));
    let grpc = a.sluice.grpc;

    // The sidecar dies: Envoy keeps deciding on the share it was paid (the TTL sluice sent),
    // so requests still pass right after.
    a.sluice.child.kill().expect("kill sluice");
    a.sluice.child.wait().expect("reap sluice");
    assert_eq!(
        status(a.http, "acme"),
        200,
        "the paid share ended with the stream"
    );

    // A new sidecar on the same address: Envoy reopens the stream at its next report (every 5 s
    // in 1.40), reports its buckets, and gets its assignment again.
    a.sluice = Sluice::start_at(common::bin(), &yaml, grpc);
    let start = Instant::now();
    loop {
        let listed = assignments(&a);
        if listed
            .iter()
            .any(|x| x["bucket"] == "tenant=acme" && x["strategy"] == "token_bucket")
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(12),
            "no assignment after Envoy should have reconnected: {listed:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("assigned again {:?} after the restart", start.elapsed());
    wait_for_pass(a.http, "acme", Duration::from_secs(3));
}
