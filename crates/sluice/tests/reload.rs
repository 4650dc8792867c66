//! Live reload as an operator does it: edit the file, or swap a ConfigMap's `..data` symlink.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

fn config(limit: u32) -> String {
    format!(
        "domain: edge\ndescriptors:\n  - key: demo\n    rate_limit: {{name: demo, unit: minute, requests_per_unit: {limit}}}\n"
    )
}

/// The limit `ShouldRateLimit` reports for a fresh value.
async fn limit_now(client: &mut RateLimitServiceClient<Channel>, value: &str) -> u32 {
    let resp = client
        .should_rate_limit(common::rls_request("edge", "demo", value))
        .await
        .expect("rpc")
        .into_inner();
    resp.statuses[0]
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit)
}

async fn wait_for_limit(client: &mut RateLimitServiceClient<Channel>, want: u32) -> Duration {
    let started = Instant::now();
    let mut i = 0;
    loop {
        i += 1;
        if limit_now(client, &format!("probe-{want}-{i}")).await == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "limit {want} not in force within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (at most 5 s) until `/metrics` counts one rejected reload, of `what`.
async fn wait_for_rejected_reload(sluice: &sluice_testkit::process::Sluice, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = common::http_get(sluice.admin.port(), "/metrics", &[]).body;
        if metrics.contains(r#"sluice_config_reloads_total{outcome="error"} 1"#) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} was not rejected:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_applies_without_restart_and_a_broken_edit_is_rejected() {
    let sluice = common::start_with(&config(2), &["--reload-interval", "200ms"]);
    let mut client = RateLimitServiceClient::connect(format!("http://{}", sluice.grpc))
        .await
        .expect("connect");
    assert_eq!(limit_now(&mut client, "a").await, 2);

    write_atomically(&sluice.config_path(), &config(7));
    let took = wait_for_limit(&mut client, 7).await;
    assert!(took < Duration::from_secs(2), "reload took {took:?}");

    write_atomically(
        &sluice.config_path(),
        &config(7).replace("minute", "fortnight"),
    );
    wait_for_rejected_reload(&sluice, "the broken edit").await;
    assert_eq!(
        limit_now(&mut client, "b").await,
        7,
        "the old config keeps working"
    );
    let logs: Vec<String> = sluice.stderr.try_iter().collect();
    assert!(
        logs.iter().any(|l| l.contains("fortnight")),
        "the log says why: {logs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_symlink_swap_is_picked_up() {
    // Kubernetes mounts a ConfigMap as `sluice.yaml -> ..data/sluice.yaml`, `..data -> ..2026_v1`,
    // and updates it by pointing `..data` at a new directory.
    let dir = tempfile::tempdir().expect("tempdir");
    let v1 = dir.path().join("..v1");
    let v2 = dir.path().join("..v2");
    std::fs::create_dir(&v1).expect("mkdir");
    std::fs::create_dir(&v2).expect("mkdir");
    std::fs::write(v1.join("sluice.yaml"), config(3)).expect("write");
    std::fs::write(v2.join("sluice.yaml"), config(9)).expect("write");
    std::os::unix::fs::symlink("..v1", dir.path().join("..data")).expect("symlink");
    std::os::unix::fs::symlink("..data/sluice.yaml", dir.path().join("sluice.yaml"))
        .expect("symlink");

    let path = dir.path().join("sluice.yaml");
    let sluice = sluice_testkit::process::Sluice::start_path(
        common::bin(),
        &path,
        &["--reload-interval", "200ms"],
    );
    let mut client = RateLimitServiceClient::connect(format!("http://{}", sluice.grpc))
        .await
        .expect("connect");
    assert_eq!(limit_now(&mut client, "a").await, 3);
    std::os::unix::fs::symlink("..v2", dir.path().join("..data_tmp")).expect("symlink");
    std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).expect("swap");
    let took = wait_for_limit(&mut client, 9).await;
    assert!(took < Duration::from_secs(2), "reload took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_of_unchanged_rules_keep_their_state_across_a_reload() {
    let two = |other: u32| {
        format!(
            "domain: edge\ndescriptors:\n  - key: kept\n    rate_limit: {{name: kept, unit: hour, requests_per_unit: 3}}\n  - key: demo\n    rate_limit: {{name: demo, unit: minute, requests_per_unit: {other}}}\n"
        )
    };
    let sluice = common::start_with(&two(2), &["--reload-interval", "100ms"]);
    let mut client = RateLimitServiceClient::connect(format!("http://{}", sluice.grpc))
        .await
        .expect("connect");
    let remaining =
        |resp: sluice_proto::envoy::ratelimit::RateLimitResponse| resp.statuses[0].limit_remaining;
    let first = client
        .should_rate_limit(common::rls_request("edge", "kept", "x"))
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(remaining(first), 2);
    write_atomically(&sluice.config_path(), &two(8));
    wait_for_limit(&mut client, 8).await;
    let after = client
        .should_rate_limit(common::rls_request("edge", "kept", "x"))
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(
        remaining(after),
        1,
        "the unchanged rule's bucket was kept, not refilled"
    );
}

/// A config file swapped for a FIFO is a rejected reload (counted, the old config stays), not a
/// wedged one: the fixed file is applied next, and SIGTERM still stops the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_place_of_the_config_neither_wedges_reload_nor_shutdown() {
    let mut sluice = common::start_with(&config(2), &["--reload-interval", "100ms"]);
    let mut client = RateLimitServiceClient::connect(format!("http://{}", sluice.grpc))
        .await
        .expect("connect");
    let path = sluice.config_path();
    let fifo = path.with_extension("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    std::fs::rename(&fifo, &path).expect("swap in the FIFO");
    wait_for_rejected_reload(&sluice, "the FIFO").await;
    assert_eq!(limit_now(&mut client, "a").await, 2, "the old config stays");
    write_atomically(&path, &config(5));
    wait_for_limit(&mut client, 5).await;
    let logs: Vec<String> = sluice.stderr.try_iter().collect();
    assert!(
        logs.iter().any(|l| l.contains("FIFO")),
        "the log says why: {logs:?}"
    );
    assert_eq!(sluice.terminate(), Some(0), "SIGTERM stops it");
}

/// With the HTTP check port on, a reload that drops `check:` (which headers carry the request)
/// is rejected like any broken edit: the running one stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_dropping_check_is_rejected_while_the_check_port_is_on() {
    let with_check = "domains:\n  - domain: edge\n    descriptors:\n      - {key: demo, rate_limit: {unit: minute, requests_per_unit: 2}}\ncheck: {proxy: caddy}\n";
    let sluice = common::start_with(
        with_check,
        &["--reload-interval", "200ms", "--check-addr", "127.0.0.1:0"],
    );
    let without = with_check.replace("check: {proxy: caddy}\n", "");
    write_atomically(&sluice.config_path(), &without);
    wait_for_rejected_reload(&sluice, "dropping check:").await;
}
