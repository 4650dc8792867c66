//! The post-paid accuracy harness: N sluice processes on one Redis share a budget of tokens per
//! second; each sidecar's clients check the budget before a request (`hits_addend` 0), "serve" it,
//! and report a random usage after it (`hits_addend` u), as Envoy's `apply_on_stream_done` entry
//! does. It checks that nothing reported is lost (what Redis charged, read back from the global
//! bucket, equals what was reported) and how far the usage admitted runs past the budget `L·t`
//! (bounded by the requests in flight and what other sidecars have not yet seen).
//!
//! `cargo run --release -p sluice-loadtest --bin post-paid -- --help`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use sluice_proto::envoy::common_ratelimit::RateLimitDescriptor;
use sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::Entry;
use sluice_proto::envoy::protobuf::UInt64Value;
use sluice_proto::envoy::ratelimit::RateLimitRequest;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use sluice_testkit::process::Sluice;
use sluice_testkit::redis::{Cluster, Standalone};
use tonic::transport::Channel;

use crate::sidecars::script_calls;

mod sidecars;

/// Measures post-paid budgets shared by N sidecars: nothing lost, bounded overshoot.
#[derive(Debug, Parser)]
struct Args {
    /// The sluice binary (build with `cargo build --release -p sluice`).
    #[arg(long, default_value = "target/release/sluice")]
    sluice: std::path::PathBuf,
    /// Sidecar processes.
    #[arg(long, default_value_t = 4)]
    sidecars: usize,
    /// Requests in flight per sidecar (clients each checking, serving, reporting in turn).
    #[arg(long, default_value_t = 1)]
    in_flight: usize,
    /// Budget, tokens per second (L); the burst is the same.
    #[arg(long, default_value_t = 1000)]
    limit: u64,
    /// Largest usage one request reports (each is uniform in 1..=this).
    #[arg(long, default_value_t = 200)]
    max_usage: u64,
    /// Time a request is "served" between its check and its report, in milliseconds.
    #[arg(long, default_value_t = 20)]
    serve_ms: u64,
    /// The rule's `max_debt` (default: the burst, as sluice's own default).
    #[arg(long)]
    max_debt: Option<u64>,
    /// Seconds of load.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Run against a 3-master Redis Cluster instead of a standalone Redis.
    #[arg(long)]
    cluster: bool,
}

/// What the clients did, summed over all of them.
#[derive(Default)]
struct Tally {
    checks: AtomicU64,
    admitted: AtomicU64,
    reports: AtomicU64,
    reported: AtomicU64,
    errors: AtomicU64,
}

fn request(hits: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: "acc".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: "tenant".into(),
            }],
            hits_addend: Some(UInt64Value { value: hits }),
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// One client: check, serve, report, until `until`.
async fn client(
    mut c: RateLimitServiceClient<Channel>,
    args: Arc<Args>,
    tally: Arc<Tally>,
    until: Instant,
    mut rng: u64,
) {
    while Instant::now() < until {
        tally.checks.fetch_add(1, Ordering::Relaxed);
        let code = match c.should_rate_limit(request(0)).await {
            Ok(r) => r.into_inner().overall_code,
            Err(_) => {
                tally.errors.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        if code != Code::Ok as i32 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        tally.admitted.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(args.serve_ms)).await;
        // xorshift64*: a small, fast PRNG is all usage sizes need.
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        let usage = 1 + rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % args.max_usage;
        match c.should_rate_limit(request(usage)).await {
            Ok(_) => {
                tally.reports.fetch_add(1, Ordering::Relaxed);
                tally.reported.fetch_add(usage, Ordering::Relaxed);
            }
            Err(_) => {
                tally.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The only bucket in Redis, on whichever node holds it: (tokens, ts in Redis TIME microseconds).
async fn bucket(nodes: &mut [redis::aio::MultiplexedConnection]) -> anyhow::Result<(f64, f64)> {
    let mut found = Vec::new();
    for c in nodes.iter_mut() {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*:k=tenant").query_async(c).await?;
        for key in keys {
            let state: (f64, f64) = redis::cmd("HMGET")
                .arg(&key)
                .arg("tokens")
                .arg("ts")
                .query_async(c)
                .await?;
            found.push(state);
        }
    }
    let [state] = found.as_slice() else {
        bail!("expected one bucket in Redis, found {}", found.len());
    };
    Ok(*state)
}

/// `sluice_usage_tokens_total{outcome}` summed over the sidecars.
fn usage_metric(sidecars: &[Sluice], outcome: &str) -> f64 {
    let series = format!("sluice_usage_tokens_total{{outcome=\"{outcome}\"}} ");
    sidecars::sum_metric(sidecars, |l| l.starts_with(&series))
}

#[tokio::main]
#[allow(clippy::print_stdout)]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    if !args.sluice.exists() {
        bail!(
            "{} not found: cargo build --release -p sluice",
            args.sluice.display()
        );
    }
    let max_debt = args.max_debt.unwrap_or(args.limit);
    // Standalone, or a 3-master cluster (all its nodes share one clock: one container).
    let (_standalone, _cluster, ports, redis_section) = if args.cluster {
        let c = Cluster::start_with(0).await;
        let nodes: Vec<String> = c.nodes().iter().map(|n| format!("\"{n}\"")).collect();
        let section = format!("redis: {{cluster_nodes: [{}]}}", nodes.join(", "));
        let ports = c.ports.clone();
        (None, Some(c), ports, section)
    } else {
        let s = Standalone::start().await;
        let section = format!("redis: {{url: \"{}\"}}", s.url());
        let ports = vec![s.port];
        (Some(s), None, ports, section)
    };
    let mut conns = Vec::new();
    for port in &ports {
        conns.push(
            redis::Client::open(format!("redis://127.0.0.1:{port}"))?
                .get_multiplexed_async_connection()
                .await?,
        );
    }
    let config = format!(
        "domains:\n  - domain: acc\n    descriptors:\n      - key: k\n        rate_limit: {{unit: second, requests_per_unit: {}, charge: post_paid, max_debt: {max_debt}}}\n{redis_section}\n",
        args.limit,
    );
    let mut sidecars: Vec<Sluice> = (0..args.sidecars)
        .map(|_| Sluice::start_with(&args.sluice, &config, &["--drain-delay", "0s"]))
        .collect();
    sidecars::wait_connected(&sidecars).await?;
    let mut clients = Vec::new();
    for s in &sidecars {
        for _ in 0..args.in_flight {
            clients.push(
                RateLimitServiceClient::connect(format!("http://{}", s.grpc))
                    .await
                    .context("connect")?,
            );
        }
    }
    // Empty the budget first (a report of the whole burst), so the bucket starts at a known
    // level and time and stays below full: then Redis charged exactly tokens₀ + L·Δt − tokens.
    clients[0]
        .should_rate_limit(request(args.limit))
        .await
        .context("first report")?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (tokens0, ts0) = bucket(&mut conns).await?;
    let calls_before = script_calls(&ports).await?;
    let tally = Arc::new(Tally::default());
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conns[0]).await?;
    let start = Instant::now();
    // The budget the bucket had refilled between its reading and the start.
    let head = tokens0 + args.limit as f64 * ((secs * 1_000_000 + micros) as f64 - ts0) / 1e6;
    let until = start + Duration::from_secs(args.seconds);
    let mut tasks = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let seed = 0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1);
        tasks.push(tokio::spawn(client(
            c,
            Arc::clone(&args),
            Arc::clone(&tally),
            until,
            seed,
        )));
    }
    // Usage reported so far against the budget since the start, every 50 ms.
    let mut worst_excess = f64::MIN;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let budget = head + args.limit as f64 * start.elapsed().as_secs_f64();
        let excess = tally.reported.load(Ordering::Relaxed) as f64 - budget;
        worst_excess = worst_excess.max(excess);
    }
    for t in tasks {
        t.await.context("client")?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let calls = script_calls(&ports).await?.saturating_sub(calls_before);
    // Usage pending goes within a lease horizon (200 ms): read the bucket after two.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let clamped = usage_metric(&sidecars, "clamped");
    let unconfirmed = usage_metric(&sidecars, "unconfirmed");
    let (tokens, ts) = bucket(&mut conns).await?;
    let mut charged = tokens0 + args.limit as f64 * (ts - ts0) / 1e6 - tokens;
    // Graceful stops send whatever usage is still pending: add what they charged, if anything.
    for s in &sidecars {
        s.send_sigterm();
    }
    for s in &mut sidecars {
        s.wait_exit();
    }
    let at_exit = match bucket(&mut conns).await {
        Ok((after, ts_after)) if ts_after > ts => {
            (tokens + args.limit as f64 * (ts_after - ts) / 1e6).min(args.limit as f64) - after
        }
        _ => 0.0,
    };
    charged += at_exit;
    let reported = tally.reported.load(Ordering::Relaxed) as f64;
    let checks = tally.checks.load(Ordering::Relaxed);
    let reports = tally.reports.load(Ordering::Relaxed);
    let decisions = (checks + reports).max(1);
    let in_flight_bound = (args.sidecars * args.in_flight) as f64 * args.max_usage as f64;
    println!(
        "post-paid: {} sidecars x {} in flight, {}, L={}/s, max_debt {max_debt}, usage 1..={}, serve {} ms, {elapsed:.1}s: checks {checks}, admitted {}, reported {reported:.0} in {reports} reports, charged by Redis {charged:.1} ({at_exit:.0} at shutdown; diff {:+.1}; clamped {clamped:.0}, unconfirmed {unconfirmed:.0}), budget L·t {:.0}, reported/budget {:.2}%, worst excess {worst_excess:.0} tokens (in-flight bound {in_flight_bound:.0}), Redis script calls {calls} ({:.2} per 100 decisions), errors {}, bucket at end {tokens:.1}",
        args.sidecars,
        args.in_flight,
        if args.cluster {
            "3-master cluster"
        } else {
            "standalone"
        },
        args.limit,
        args.max_usage,
        args.serve_ms,
        tally.admitted.load(Ordering::Relaxed),
        charged - reported,
        args.limit as f64 * elapsed,
        100.0 * reported / (args.limit as f64 * elapsed),
        100.0 * calls as f64 / decisions as f64,
        tally.errors.load(Ordering::Relaxed),
    );
    Ok(())
}
