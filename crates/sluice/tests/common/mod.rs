//! The sluice binary and real Envoy, from sluice-testkit.
#![allow(dead_code, unused_imports)]

use std::path::Path;

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
