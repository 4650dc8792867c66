//! Numbers in the shape envoyproxy/ratelimit publishes, with it in the same run: p99 at a fixed
//! 500 req/s with 1, 2 and 10 descriptors per request on a 3-master Redis Cluster, saturated
//! req/s, and Redis commands per decision. One sluice and one envoyproxy/ratelimit
//! (`go install github.com/envoyproxy/ratelimit/src/service_cmd@…`), each alone on the same
//! cluster in turn, driven by ghz with the same requests.
//!
//! `cargo run --release -p sluice-loadtest --bin peers -- --help`

// A command-line report: printing is its output.
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[allow(dead_code)] // peers reads only some of a run
mod ghz;
#[allow(dead_code)] // peers needs only some of it
mod sidecars;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use ghz::home;
use sluice_testkit::process::{Sluice, free_port};
use sluice_testkit::redis::Cluster;

/// Runs both services through the same load.
#[derive(Debug, Parser)]
struct Args {
    /// The sluice binary.
    #[arg(long, default_value = "target/release/sluice")]
    sluice: PathBuf,
    /// envoyproxy/ratelimit's binary.
    #[arg(long, default_value = "~/go/bin/service_cmd")]
    ratelimit: String,
    /// ghz.
    #[arg(long, default_value = "~/go/bin/ghz")]
    ghz: String,
    /// Seconds of each fixed-rate run.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Seconds of each saturated run.
    #[arg(long, default_value_t = 10)]
    saturate_seconds: u64,
    /// Distinct values per descriptor key (keys = values × descriptors).
    #[arg(long, default_value_t = 1000)]
    values: u32,
}

/// The descriptor counts of the published benchmark.
const SHAPES: [usize; 3] = [1, 2, 10];

/// The rules: one per descriptor key, far above the offered load (the benchmark measures the
/// cost of a decision, not of a denial). The same file serves both services.
fn rules() -> String {
    let mut y = String::from("domain: bench\ndescriptors:\n");
    for i in 0..10 {
        y.push_str(&format!(
            "  - key: d{i}\n    rate_limit: {{unit: second, requests_per_unit: 1000000}}\n"
        ));
    }
    y
}

/// ghz's request: `n` descriptors, each one entry with a random value.
fn request(n: usize, values: u32) -> String {
    let ds: Vec<String> = (0..n)
        .map(|i| {
            format!(r#"{{"entries":[{{"key":"d{i}","value":"v{{{{randomInt 0 {values}}}}}"}}]}}"#)
        })
        .collect();
    format!(r#"{{"domain":"bench","descriptors":[{}]}}"#, ds.join(","))
}

/// Commands clients sent to Redis, summed over the nodes. `INFO commandstats` also counts the
/// commands scripts run inside Redis, so for sluice (every call a script) only EVALSHA and EVAL
/// count; envoyproxy/ratelimit runs no script, so every command counts but the ones the harness
/// sends (INFO) and cluster upkeep (CLUSTER, PING, COMMAND, CLIENT, HELLO, READONLY).
async fn commands(ports: &[u16], scripts_only: bool) -> anyhow::Result<u64> {
    sidecars::commands_served(ports, |name| {
        if scripts_only {
            matches!(name, "evalsha" | "eval")
        } else {
            ![
                "info", "cluster", "ping", "command", "client", "hello", "readonly",
            ]
            .iter()
            .any(|skip| name.starts_with(skip))
        }
    })
    .await
}

/// Starts envoyproxy/ratelimit on the cluster; returns it and its gRPC address.
fn start_ratelimit(
    args: &Args,
    ports: &[u16],
    dir: &std::path::Path,
) -> anyhow::Result<(Child, String)> {
    let config = dir.join("ratelimit/config");
    std::fs::create_dir_all(&config)?;
    std::fs::write(config.join("bench.yaml"), rules())?;
    let grpc = free_port();
    let urls: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let child = Command::new(home(&args.ratelimit))
        .env("USE_STATSD", "false")
        .env("LOG_LEVEL", "warn")
        .env("RUNTIME_ROOT", dir)
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("RUNTIME_WATCH_ROOT", "false")
        .env("REDIS_SOCKET_TYPE", "tcp")
        .env("REDIS_TYPE", "cluster")
        .env("REDIS_URL", urls.join(","))
        // Its README: a pipeline window is required in cluster mode (150–500 µs advised).
        .env("REDIS_PIPELINE_WINDOW", "150us")
        .env("PORT", free_port().to_string())
        .env("DEBUG_PORT", free_port().to_string())
        .env("GRPC_PORT", grpc.to_string())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("ratelimit.log"))?)
        .spawn()
        .context("start envoyproxy/ratelimit (go install github.com/envoyproxy/ratelimit/src/service_cmd@latest)")?;
    let addr = format!("127.0.0.1:{grpc}");
    for _ in 0..100 {
        if std::net::TcpStream::connect(&addr).is_ok() {
            return Ok((child, addr));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("envoyproxy/ratelimit did not listen on {addr} in 10 s")
}

/// The rows of one service: per shape, p99 at 500 req/s, saturated req/s, commands per decision.
async fn measure(
    args: &Args,
    name: &str,
    addr: &str,
    ports: &[u16],
) -> anyhow::Result<Vec<String>> {
    let mut rows = Vec::new();
    // Warm-up: connections, scripts, the first lease of the hottest keys.
    ghz::rls(
        &args.ghz,
        addr,
        &request(10, args.values),
        &["-c", "10", "-n", "2000"],
    )?;
    for n in SHAPES {
        let data = request(n, args.values);
        let scripts_only = name == "sluice";
        let before = commands(ports, scripts_only).await?;
        let fixed = format!("{}s", args.seconds);
        let ghz::Run {
            rps, p99, errors, ..
        } = ghz::rls(
            &args.ghz,
            addr,
            &data,
            &["--rps", "500", "-c", "20", "-z", &fixed],
        )?;
        let per_decision = (commands(ports, scripts_only).await? - before) as f64
            / (rps * args.seconds as f64).max(1.0);
        let sat = format!("{}s", args.saturate_seconds);
        let saturated = ghz::rls(&args.ghz, addr, &data, &["-c", "50", "-z", &sat])?;
        let (sat_rps, sat_p99, sat_errors) = (saturated.rps, saturated.p99, saturated.errors);
        rows.push(format!(
            "| {name} | {n} | {p99:.2} ms ({rps:.0} req/s, {errors} errors) | {sat_rps:.0} (p99 {sat_p99:.2} ms, {sat_errors} errors) | {per_decision:.3} |"
        ));
        println!("{}", rows.last().map_or("", String::as_str));
    }
    Ok(rows)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cluster = Cluster::start().await;
    let ports = cluster.ports.clone();
    let nodes: Vec<String> = cluster.nodes().iter().map(|n| format!("\"{n}\"")).collect();
    let config = format!(
        "domains:\n  - {}\nredis: {{cluster_nodes: [{}]}}\n",
        rules().replace('\n', "\n    ").trim_end(),
        nodes.join(", ")
    );
    let sluice = Sluice::start(&args.sluice, &config);
    sidecars::wait_connected(std::slice::from_ref(&sluice)).await?;
    let mut rows = measure(&args, "sluice", &sluice.grpc.to_string(), &ports).await?;
    drop(sluice);

    let dir = tempfile::tempdir()?;
    let (mut ratelimit, addr) = start_ratelimit(&args, &ports, dir.path())?;
    let theirs = measure(&args, "envoyproxy/ratelimit", &addr, &ports).await;
    if theirs.is_err() {
        let log = std::fs::read_to_string(dir.path().join("ratelimit.log")).unwrap_or_default();
        eprintln!("envoyproxy/ratelimit's log:\n{log}");
    }
    let _ = ratelimit.kill();
    let _ = ratelimit.wait();
    rows.extend(theirs?);
    println!("peers-table:");
    for r in rows {
        println!("{r}");
    }
    Ok(())
}
