//! sluice and envoyproxy/ratelimit itself, side by side, on one environment (issue 43): the same
//! management server (go-control-plane) pushes both the same `RateLimitConfig`, both keep their
//! counts in the same Redis, and the same calls get the same codes and limits from each, before
//! and after an update. The reference is the binary `scripts/setup.sh` installs
//! (`.tools/bin/ratelimit-reference`, envoyproxy/ratelimit's `src/service_cmd`).

mod common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_proto::envoy::ratelimit::RateLimitResponse;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use sluice_testkit::redis::Standalone;
use sluice_testkit::xds::XdsServer;
use tonic::transport::Channel;

const NODE: &str = "envoy-ratelimit";

/// The reference's binary (`SLUICE_RATELIMIT_REFERENCE` overrides where it is).
fn reference_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("SLUICE_RATELIMIT_REFERENCE") {
        return bin.into();
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/bin/ratelimit-reference");
    assert!(
        local.exists(),
        "no {}: run scripts/setup.sh (it installs envoyproxy/ratelimit)",
        local.display()
    );
    local
}

/// The environment both get: limits over xDS, counts in `redis`.
fn environment(
    server: &XdsServer,
    redis: &Standalone,
    grpc: u16,
    http: u16,
) -> Vec<(&'static str, String)> {
    let mut env = common::serving_on(grpc, http);
    env.extend(common::pushed_by(server, NODE));
    env.extend([
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port)),
        ("USE_STATSD", "false".into()),
        ("DEBUG_HOST", "127.0.0.1".into()),
        ("DEBUG_PORT", common::free_port().to_string()),
    ]);
    env
}

/// Resources in protojson: domain `rl` with `user` at `user` a minute and, under `route=search`,
/// `user` at `search` an hour; `tenant` at 1 a minute when `tenant`.
fn limits(user: u32, search: u32, tenant: bool) -> String {
    let tenant = if tenant {
        r#", {"key": "tenant", "rate_limit": {"unit": "MINUTE", "requests_per_unit": 1}}"#
    } else {
        ""
    };
    format!(
        r#"[{{"name": "rl", "domain": "rl", "descriptors": [
            {{"key": "user", "rate_limit": {{"unit": "MINUTE", "requests_per_unit": {user}}}}},
            {{"key": "route", "value": "search", "descriptors": [
                {{"key": "user", "rate_limit": {{"unit": "HOUR", "requests_per_unit": {search}}}}}]}}{tenant}]}}]"#
    )
}

/// Waits until `port` accepts connections (the reference opens its ports once configured).
fn until_listening(port: u16) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "nothing listens on {port} after 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `request` as the code, and each status's code, limit and unit: what a client of either sees.
/// (`limit_remaining` is left out: sluice decides from leases and reports what the global bucket
/// held at its last store call, docs/migrating.md.)
fn seen(answer: &RateLimitResponse) -> Vec<(i32, Option<(u32, i32)>)> {
    let mut out = vec![(answer.overall_code, None)];
    out.extend(answer.statuses.iter().map(|s| {
        (
            s.code,
            s.current_limit
                .as_ref()
                .map(|l| (l.requests_per_unit, l.unit)),
        )
    }));
    out
}

/// Waits until the next minute is at least 3 s away: the reference counts in fixed windows (a
/// minute's count starts again at the minute), sluice in a token bucket, so calls that straddle
/// a minute's edge may be answered otherwise by design (docs/migrating.md).
fn clear_of_a_minute_edge() {
    use sluice_core::Clock as _;
    let clock = sluice_core::SystemClock::new();
    let into_minute = || (clock.now_micros() % 60_000_000) as f64 / 1e6;
    while into_minute() > 57.0 {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sends each of `calls` (a descriptor's entries) to both, asserts they answer alike, and
/// returns the overall codes.
async fn alike(
    sluice: &mut RateLimitServiceClient<Channel>,
    reference: &mut RateLimitServiceClient<Channel>,
    calls: &[&[(&str, &str)]],
) -> Vec<Code> {
    let mut codes = Vec::new();
    use sluice_proto::envoy::common_ratelimit::RateLimitDescriptor;
    use sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::Entry;
    use sluice_proto::envoy::ratelimit::RateLimitRequest;
    for (i, entries) in calls.iter().enumerate() {
        let request = RateLimitRequest {
            domain: "rl".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(k, v)| Entry {
                        key: (*k).into(),
                        value: (*v).into(),
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        };
        let ours = sluice
            .should_rate_limit(request.clone())
            .await
            .expect("sluice");
        let theirs = reference
            .should_rate_limit(request)
            .await
            .expect("reference");
        assert_eq!(
            seen(ours.get_ref()),
            seen(theirs.get_ref()),
            "call {i} {entries:?}: sluice answered otherwise than envoyproxy/ratelimit"
        );
        codes.push(Code::try_from(ours.get_ref().overall_code).expect("a code"));
    }
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_answers_as_envoyproxy_ratelimit_on_the_same_pushed_limits() {
    let redis = Standalone::start().await;
    let server = XdsServer::start();
    server.set(NODE, "1", &limits(3, 2, false));

    let (grpc, http) = (common::free_port(), common::free_port());
    let reference = common::Running(
        Command::new(reference_binary())
            .env_clear()
            .envs(environment(&server, &redis, grpc, http))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn envoyproxy/ratelimit"),
    );
    let (ours_grpc, ours_http) = (common::free_port(), common::free_port());
    let bin = tempfile::tempdir().expect("tempdir");
    let mut ours = common::Running(
        common::ratelimit(
            bin.path(),
            &environment(&server, &redis, ours_grpc, ours_http),
        )
        .spawn()
        .expect("spawn sluice"),
    );
    common::until_serving(&mut ours.0);
    until_listening(grpc);
    let health = common::http_get(http, "/healthcheck", &[]);
    let our_health = common::http_get(ours_http, "/healthcheck", &[]);
    assert_eq!(
        (our_health.status, our_health.body.as_str()),
        (health.status, health.body.as_str()),
        "/healthcheck"
    );

    let connect = |port: u16| RateLimitServiceClient::connect(format!("http://127.0.0.1:{port}"));
    let mut sluice = connect(ours_grpc).await.expect("sluice");
    let mut theirs = connect(grpc).await.expect("reference");
    let alice: &[(&str, &str)] = &[("user", "alice")];
    let search: &[(&str, &str)] = &[("route", "search"), ("user", "bob")];
    let nobody: &[(&str, &str)] = &[("team", "x")];
    clear_of_a_minute_edge();
    let codes = alike(
        &mut sluice,
        &mut theirs,
        &[alice, alice, alice, alice, search, search, search, nobody],
    )
    .await;
    use Code::{Ok, OverLimit};
    assert_eq!(codes, [Ok, Ok, Ok, OverLimit, Ok, Ok, OverLimit, Ok]);

    // An update: both follow it, and answer alike again.
    server.set(NODE, "2", &limits(3, 2, true));
    let start = Instant::now();
    while server.status(NODE).acked != "2" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no ACK of version 2"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The reference ACKs each stream on its own: give it the same moment to apply.
    std::thread::sleep(Duration::from_millis(300));
    let tenant: &[(&str, &str)] = &[("tenant", "t1")];
    clear_of_a_minute_edge();
    let codes = alike(&mut sluice, &mut theirs, &[tenant, tenant, alice]).await;
    assert_eq!(codes, [Ok, OverLimit, OverLimit]);
    drop(reference);
}
