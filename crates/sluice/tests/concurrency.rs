//! `deploy/examples/concurrency` end to end, as shipped: two pods (each an Envoy 1.40 and a
//! sluice) share one Redis in front of an API that takes its time; each request holds one of its
//! tenant's 3 slots from its start to the end of its stream, on Envoy's stock rate-limit filter.
//!
//! The example files are used unchanged but for their ports, the Redis address and the hold
//! timeout (3 s instead of 5 minutes, so a killed sidecar's slots come back within the test).

mod common;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{Envoy, free_port, http_get, with_ports};
use sluice_testkit::process::Sluice;
use sluice_testkit::redis::Standalone;

fn example(name: &str) -> String {
    common::example("concurrency", name)
}

/// One pod: an Envoy on its own port in front of its own sluice.
struct Pod {
    http: u16,
    sluice: Option<Sluice>,
    _envoy: Envoy,
}

struct Example {
    pods: [Pod; 2],
    _upstream: Envoy,
    _redis: Standalone,
}

const HOLD_TIMEOUT: Duration = Duration::from_secs(3);

async fn example_stack() -> Example {
    let redis = Standalone::start().await;
    let sluice_yaml = example("sluice.yaml");
    for shipped in ["redis://127.0.0.1:6379", "hold_timeout: 5m"] {
        assert!(sluice_yaml.contains(shipped), "{shipped}");
    }
    let sluice_yaml = sluice_yaml
        .replace("redis://127.0.0.1:6379", &redis.url())
        .replace("hold_timeout: 5m", "hold_timeout: 3s");
    let api = free_port();
    let upstream = Envoy::start(
        &with_ports(&example("upstream.yaml"), &[(9000, api)]),
        &[api],
    );
    let pod = || {
        let sluice = common::start(&sluice_yaml);
        let http = free_port();
        let envoy_yaml = with_ports(
            &example("envoy.yaml"),
            &[(10000, http), (8081, sluice.grpc.port()), (9000, api)],
        );
        Pod {
            http,
            _envoy: Envoy::start(&envoy_yaml, &[http]),
            sluice: Some(sluice),
        }
    };
    Example {
        pods: [pod(), pod()],
        _upstream: upstream,
        _redis: redis,
    }
}

/// A request of `tenant` that the API answers after `delay_ms`: (status, the hold token the API
/// saw, how long it took).
fn generate(port: u16, tenant: &str, delay_ms: u64) -> (u16, String, Duration) {
    let started = Instant::now();
    let delay = delay_ms.to_string();
    let r = http_get(
        port,
        "/v1/generate",
        &[
            ("x-tenant", tenant),
            ("x-envoy-fault-delay-request", &delay),
        ],
    );
    let hold = r.headers.get("x-demo-hold").cloned().unwrap_or_default();
    (r.status, hold, started.elapsed())
}

/// `n` slow requests of `tenant` on `port`, started now; their results when joined.
fn in_flight(
    port: u16,
    tenant: &str,
    n: usize,
    delay_ms: u64,
) -> Vec<JoinHandle<(u16, String, Duration)>> {
    let handles = (0..n)
        .map(|_| {
            let tenant = tenant.to_string();
            std::thread::spawn(move || generate(port, &tenant, delay_ms))
        })
        .collect();
    // Until every one has its slot (a decision is a millisecond; Envoy's connection setup a
    // few).
    std::thread::sleep(Duration::from_millis(300));
    handles
}

/// Polls until a quick request of `tenant` passes on `port`; how long it took.
fn until_one_passes(port: u16, tenant: &str, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let (status, _, _) = generate(port, tenant, 0);
        if status == 200 {
            return start.elapsed();
        }
        assert_eq!(status, 429);
        assert!(
            start.elapsed() < within,
            "{tenant}: still 429 after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_requests_are_bounded_per_tenant_across_pods_and_a_killed_pod_lets_go() {
    let mut ex = example_stack().await;
    let (a, b) = (ex.pods[0].http, ex.pods[1].http);

    // N + 1 on one pod: 3 slow requests hold acme's 3 slots; the 4th is denied at once, while
    // another tenant is unaffected.
    let slow = in_flight(a, "acme", 3, 1_500);
    let (status, hold, took) = generate(a, "acme", 0);
    assert_eq!(status, 429, "the 4th in flight");
    assert!(hold.is_empty(), "a denied request never reached the API");
    assert!(
        took < Duration::from_millis(500),
        "denied at once, not queued: {took:?}"
    );
    assert_eq!(generate(a, "globex", 0).0, 200, "another tenant");
    let mut tokens = Vec::new();
    for h in slow {
        let (status, hold, took) = h.join().expect("request");
        assert_eq!(status, 200);
        assert!(took >= Duration::from_millis(1_500), "{took:?}");
        assert_eq!(hold.len(), 16, "the API saw sluice's token: {hold:?}");
        tokens.push(hold);
    }
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "one token per request");
    // They ended: each stream's end gave its slot back, so new ones pass (the release reaches
    // sluice just after the client has its answer).
    until_one_passes(a, "acme", Duration::from_secs(1));
    for _ in 0..5 {
        assert_eq!(
            generate(a, "acme", 0).0,
            200,
            "sequential requests never pile up"
        );
    }

    // Two pods share the limit: 2 in flight on a, 1 on b; the next is denied on either.
    let on_a = in_flight(a, "initech", 2, 2_000);
    let on_b = in_flight(b, "initech", 1, 2_000);
    assert_eq!(generate(b, "initech", 0).0, 429, "4th, on b");
    assert_eq!(generate(a, "initech", 0).0, 429, "4th, on a");
    for h in on_a.into_iter().chain(on_b) {
        assert_eq!(h.join().expect("request").0, 200);
    }

    // A sidecar killed (SIGKILL) while its requests hold 2 slots: their releases never come.
    // b has the third slot; the killed pod's two come back a hold timeout after its sidecar's
    // last call to Redis, and never more than 3 pass at once.
    let held = in_flight(a, "umbrella", 2, 8_000);
    let killed = Instant::now();
    drop(ex.pods[0].sluice.take());
    let last = in_flight(b, "umbrella", 1, 8_000);
    assert_eq!(
        generate(b, "umbrella", 0).0,
        429,
        "the dead pod's 2 are still held"
    );
    until_one_passes(b, "umbrella", HOLD_TIMEOUT + Duration::from_secs(2));
    let back = killed.elapsed();
    eprintln!("a killed sidecar's slots came back {back:?} after the kill");
    assert!(
        back <= HOLD_TIMEOUT + Duration::from_millis(1_500),
        "back within the hold timeout (3 s) and a sweep: {back:?}"
    );
    // Both of them: 2 more fit beside b's, and no more.
    let more = in_flight(b, "umbrella", 2, 8_000);
    assert_eq!(
        generate(b, "umbrella", 0).0,
        429,
        "3 in flight again: never more"
    );
    // `quota get` shows them: 3 slots held by 3 requests in flight on b.
    let grpc = ex.pods[1].sluice.as_ref().expect("b runs").grpc.to_string();
    let view = common::quota_get_json(&grpc, "generations", &["tenant=umbrella"]);
    assert_eq!(
        (&view["holds"], &view["held"]),
        (&3.into(), &3.into()),
        "{view}"
    );
    drop(more);
    drop(held);
    drop(last);
}
