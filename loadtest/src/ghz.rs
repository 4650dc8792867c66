//! Driving an RLS server with ghz, the same way for every service a harness compares.

use std::process::Command;

use anyhow::{Context, bail};

/// `path` with a leading `~/` taken as `$HOME/`.
pub fn home(path: &str) -> String {
    match path.strip_prefix("~/") {
        Some(rest) => format!("{}/{rest}", std::env::var("HOME").unwrap_or_default()),
        None => path.to_string(),
    }
}

/// ghz's `--proto` and `-i` for RLS v3, from the envoy-types crate's proto tree in the cargo
/// registry (envoyproxy/ratelimit serves no reflection; every service is called the same way).
pub fn proto_args() -> anyhow::Result<Vec<String>> {
    let cargo = std::env::var("CARGO_HOME").unwrap_or_else(|_| home("~/.cargo"));
    let mut found = Vec::new();
    for index in std::fs::read_dir(format!("{cargo}/registry/src"))?.flatten() {
        for krate in std::fs::read_dir(index.path())?.flatten() {
            if krate
                .file_name()
                .to_string_lossy()
                .starts_with("envoy-types-")
            {
                found.push(krate.path().join("proto"));
            }
        }
    }
    found.sort();
    let Some(root) = found.pop() else {
        bail!("envoy-types' protos not found under {cargo}/registry/src (cargo build first)");
    };
    let mut imports: Vec<String> = std::fs::read_dir(&root)?
        .flatten()
        .map(|d| d.path().display().to_string())
        .collect();
    imports.sort();
    Ok(vec![
        "--proto".into(),
        root.join("data-plane-api/envoy/service/ratelimit/v3/rls.proto")
            .display()
            .to_string(),
        "-i".into(),
        imports.join(","),
    ])
}

/// What one ghz run saw.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Requests a second.
    pub rps: f64,
    /// Median latency, ms.
    pub p50: f64,
    /// 99th percentile latency, ms.
    pub p99: f64,
    /// Requests that failed.
    pub errors: u64,
}

/// One ghz run of `ShouldRateLimit` with `data` against `addr`, with `load` (`-c`, `-n`, …).
pub fn rls(bin: &str, addr: &str, data: &str, load: &[&str]) -> anyhow::Result<Run> {
    let out = Command::new(home(bin))
        .args(proto_args()?)
        .args([
            "--insecure",
            "--call",
            "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            "-d",
            data,
            "-O",
            "json",
        ])
        .args(load)
        .arg(addr)
        .output()
        .context("run ghz (go install github.com/bojand/ghz/cmd/ghz@latest)")?;
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "ghz answered no JSON: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let percentile = |p: u64| {
        r["latencyDistribution"]
            .as_array()
            .and_then(|d| d.iter().find(|x| x["percentage"] == p))
            .and_then(|x| x["latency"].as_f64())
            .unwrap_or(f64::NAN)
            / 1e6
    };
    let errors = r["errorDistribution"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum());
    Ok(Run {
        rps: r["rps"].as_f64().unwrap_or(0.0),
        p50: percentile(50),
        p99: percentile(99),
        errors,
    })
}
