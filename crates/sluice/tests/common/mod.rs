//! The sluice binary and real Envoy, from sluice-testkit.
#![allow(dead_code, unused_imports)]

pub mod pushed;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use sluice_testkit::process::{Envoy, HttpResponse, free_port, http_get};

/// The `sluice` binary under test.
pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sluice"))
}

/// Starts the binary under test on `yaml` with extra `serve` arguments.
pub fn start_with(yaml: &str, extra: &[&str]) -> sluice_testkit::process::Sluice {
    sluice_testkit::process::Sluice::start_with(bin(), yaml, extra)
}

/// Starts the binary under test on `yaml`.
pub fn start(yaml: &str) -> sluice_testkit::process::Sluice {
    sluice_testkit::process::Sluice::start(bin(), yaml)
}

/// A `ShouldRateLimit` request with one descriptor `key=value` in `domain`.
pub fn rls_request(
    domain: &str,
    key: &str,
    value: &str,
) -> sluice_proto::envoy::ratelimit::RateLimitRequest {
    use sluice_proto::envoy::common_ratelimit::RateLimitDescriptor;
    use sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::Entry;
    sluice_proto::envoy::ratelimit::RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// `sluice quota get --addr ADDR --domain DOMAIN -d E… -o json`, parsed (panics if it fails).
pub fn quota_get_json(addr: &str, domain: &str, entries: &[&str]) -> serde_json::Value {
    let mut cmd = std::process::Command::new(bin());
    cmd.args([
        "quota", "get", "--addr", addr, "--domain", domain, "-o", "json",
    ]);
    for e in entries {
        cmd.args(["-d", e]);
    }
    let out = cmd.output().expect("sluice quota get");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// A file of `deploy/examples/<dir>`, as shipped.
pub fn example(dir: &str, name: &str) -> String {
    let path: std::path::PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "../../deploy/examples",
        dir,
        name,
    ]
    .iter()
    .collect();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `text` with each `port_value: FROM` replaced by `port_value: TO`; each must be present.
pub fn with_ports(text: &str, ports: &[(u16, u16)]) -> String {
    ports.iter().fold(text.to_string(), |t, (from, to)| {
        let from = format!("port_value: {from}");
        assert!(t.contains(&from), "the example has no {from}");
        t.replace(&from, &format!("port_value: {to}"))
    })
}

/// Waits for the start of a fresh second, so a burst of requests falls in one second.
pub fn next_second() {
    use sluice_core::Clock as _;
    let into = sluice_core::SystemClock::new().now_micros() / 1_000 % 1_000;
    std::thread::sleep(std::time::Duration::from_millis(1_000 - into + 20));
}

/// `ratelimit` (a symlink to the binary under test, in `dir`) started with only `env`.
pub fn ratelimit(dir: &std::path::Path, env: &[(&str, String)]) -> Command {
    let link = dir.join("ratelimit");
    if !link.exists() {
        std::os::unix::fs::symlink(bin(), &link).expect("symlink");
    }
    let mut cmd = Command::new(&link);
    cmd.env_clear()
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Its log lines until "sluice serving" (JSON, `LOG_FORMAT=json`).
pub fn until_serving(child: &mut Child) -> Vec<serde_json::Value> {
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Read to the end: a closed pipe would fail the process's next log line.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lines = Vec::new();
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("not serving in 20 s; logged: {lines:?}"));
        let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
        let serving = v["fields"]["message"] == "sluice serving";
        lines.push(v);
        if serving {
            return lines;
        }
    }
}

/// envoyproxy/ratelimit's variables for where it serves and how it logs: gRPC on
/// 127.0.0.1:`grpc`, HTTP (`/healthcheck`) on 127.0.0.1:`http`, JSON lines at `info` (what
/// [`until_serving`] reads).
pub fn serving_on(grpc: u16, http: u16) -> Vec<(&'static str, String)> {
    vec![
        ("LOG_LEVEL", "info".into()),
        ("LOG_FORMAT", "json".into()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("GRPC_PORT", grpc.to_string()),
        ("HOST", "127.0.0.1".into()),
        ("PORT", http.to_string()),
    ]
}

/// envoyproxy/ratelimit's variables for limits pushed by `server` to node `node` (a stream
/// that fails is reopened after 100 ms).
pub fn pushed_by(
    server: &sluice_testkit::xds::XdsServer,
    node: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".into()),
        ("CONFIG_GRPC_XDS_SERVER_URL", server.grpc.to_string()),
        ("CONFIG_GRPC_XDS_NODE_ID", node.into()),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms".into()),
    ]
}

/// The variables sluice's log `lines` named as not applicable, in order.
pub fn named_not_applicable(lines: &[serde_json::Value]) -> Vec<&str> {
    lines
        .iter()
        .filter_map(|l| l["fields"]["variable"].as_str())
        .collect()
}

/// A child process, killed when dropped (also when a test fails before it stops it).
pub struct Running(pub Child);

impl Running {
    /// Sends it SIGTERM.
    pub fn sigterm(&self) {
        sluice_testkit::process::sigterm(&self.0);
    }

    /// Its exit status, waiting at most `limit` (panics beyond, naming `what`): one that should
    /// stop but does not would otherwise hold the test for good.
    pub fn exit_within(&mut self, limit: Duration, what: &str) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().expect("wait") {
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "{what}: still running after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
