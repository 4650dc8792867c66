//! sluice started as envoyproxy/ratelimit is (issue 43): the image's `/bin/ratelimit` (here a
//! symlink named `ratelimit` to the binary), no arguments, configured only by the reference's
//! environment variables, with its domain files in `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config`
//! and a real Redis. It serves on `GRPC_PORT` and `PORT`, answers `/healthcheck` as the reference
//! does, enforces the files' limits with its keys under `CACHE_KEY_PREFIX`, names the variables
//! it does not act on, and refuses to start on one that cannot work.

mod common;

use std::time::Duration;

use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use sluice_testkit::redis::Standalone;

const LIMITS: &str = "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_as_envoyproxy_ratelimit_it_serves_its_environment() {
    let redis = Standalone::start().await;
    let root = tempfile::tempdir().expect("tempdir");
    let files = root.path().join("ratelimit/config");
    std::fs::create_dir_all(&files).expect("mkdir");
    std::fs::write(files.join("limits.yaml"), LIMITS).expect("write");
    let (grpc, http) = (common::free_port(), common::free_port());
    let mut env = common::serving_on(grpc, http);
    env.extend([
        ("RUNTIME_ROOT", root.path().display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("RUNTIME_IGNOREDOTFILES", "true".into()),
        ("RUNTIME_WATCH_ROOT", "false".into()),
        ("USE_STATSD", "true".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port)),
        ("CACHE_KEY_PREFIX", "fleet-a_".into()),
    ]);
    let bin = tempfile::tempdir().expect("tempdir");
    let mut child = common::Running(common::ratelimit(bin.path(), &env).spawn().expect("spawn"));
    let lines = common::until_serving(&mut child.0);
    // The variables it does not act on are named, with what it does instead.
    let named = common::named_not_applicable(&lines);
    assert_eq!(
        named,
        ["USE_STATSD", "RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES"]
    );
    let serving = &lines[lines.len() - 1]["fields"];
    assert_eq!(serving["grpc"], format!("127.0.0.1:{grpc}"));
    assert_eq!(serving["store"], "redis");

    let health = common::http_get(http, "/healthcheck", &[]);
    assert_eq!((health.status, health.body.as_str()), (200, "OK"));

    let mut client = RateLimitServiceClient::connect(format!("http://127.0.0.1:{grpc}"))
        .await
        .expect("connect");
    let mut codes = Vec::new();
    for _ in 0..4 {
        let answer = client
            .should_rate_limit(common::rls_request("rl", "user", "alice"))
            .await
            .expect("answer");
        codes.push(answer.into_inner().overall_code);
    }
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(codes, [ok, ok, ok, over]);

    // Its buckets are in Redis, under the prefix.
    let conn = redis::Client::open(redis.url()).expect("client");
    let mut conn = conn
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert!(
        keys.iter()
            .any(|k| k.starts_with("fleet-a_sluice:{") && k.contains("alice")),
        "{keys:?}"
    );
    assert!(keys.iter().all(|k| k.starts_with("fleet-a_")), "{keys:?}");

    // Draining after SIGTERM, /healthcheck says 500 with no body, as the reference does.
    child.sigterm();
    std::thread::sleep(Duration::from_millis(300));
    let health = common::http_get(http, "/healthcheck", &[]);
    assert_eq!((health.status, health.body.as_str()), (500, ""));
    assert!(child.0.wait().expect("exit").success());
}

#[test]
fn a_variable_that_cannot_work_stops_the_start_naming_it() {
    let root = tempfile::tempdir().expect("tempdir");
    for (env, says) in [
        (
            vec![
                ("REDIS_TYPE", "SENTINEL".to_string()),
                ("REDIS_URL", "127.0.0.1:26379".into()),
            ],
            "REDIS_URL: with REDIS_TYPE=SENTINEL, the master's name",
        ),
        (
            vec![("CONFIG_TYPE", "GRPC_XDS_DELTA".to_string())],
            "CONFIG_TYPE: \"GRPC_XDS_DELTA\": FILE or GRPC_XDS_SOTW",
        ),
        (
            vec![(
                "RUNTIME_ROOT",
                root.path().join("none").display().to_string(),
            )],
            "no such directory",
        ),
    ] {
        let mut child = common::Running(common::ratelimit(root.path(), &env).spawn().expect("run"));
        // It must stop at once: one that started instead would wait here for good.
        let status = child.exit_within(Duration::from_secs(10), &format!("{env:?}"));
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.0.stderr.take().expect("stderr"), &mut stderr)
            .expect("stderr");
        assert_eq!(status.code(), Some(64), "{env:?}: {stderr}");
        assert!(stderr.contains(says), "{env:?}: {stderr}");
    }
}
