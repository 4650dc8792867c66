//! sluice and envoyproxy/ratelimit itself, side by side, on one environment (issue 43): the same
//! management server (go-control-plane) pushes both the same `RateLimitConfig`, both keep their
//! counts in the same Redis, and the same calls get the same codes, limits and limit headers
//! (`LIMIT_RESPONSE_HEADERS_ENABLED`) from each, before and after an update. The reference is the binary `scripts/setup.sh` installs
//! (`.tools/bin/ratelimit-reference`, envoyproxy/ratelimit's `src/service_cmd`).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use sluice_testkit::redis::Standalone;
use sluice_testkit::xds::XdsServer;

const NODE: &str = "envoy-ratelimit";

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
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true".into()),
    ]);
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_answers_as_envoyproxy_ratelimit_on_the_same_pushed_limits() {
    let redis = Standalone::start().await;
    let server = XdsServer::start();
    server.set(NODE, "1", &common::pushed::limits(3, 2, false));

    let (grpc, http) = (common::free_port(), common::free_port());
    let reference = common::Running(
        Command::new(common::pushed::reference_binary())
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
    // The reference serves gRPC and HTTP from two goroutines: either may listen first.
    common::pushed::until_listening(grpc);
    common::pushed::until_listening(http);
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
    // Both halves, the update between them included, in one minute (see there).
    let minute = common::pushed::clear_of_a_minute_edge(Duration::from_secs(20));
    let codes = common::pushed::alike(
        &mut sluice,
        &mut theirs,
        &[alice, alice, alice, alice, search, search, search, nobody],
    )
    .await;
    use Code::{Ok, OverLimit};
    assert_eq!(codes, [Ok, Ok, Ok, OverLimit, Ok, Ok, OverLimit, Ok]);

    // An update: both follow it, and answer alike again.
    server.set(NODE, "2", &common::pushed::limits(3, 2, true));
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
    assert_eq!(
        common::pushed::minute_now(),
        minute,
        "the update took the calls into the next minute"
    );
    let codes = common::pushed::alike(&mut sluice, &mut theirs, &[tenant, tenant, alice]).await;
    assert_eq!(codes, [Ok, OverLimit, OverLimit]);
    drop(reference);
}
