//! Reset → enforced on another sidecar (issue 25 item 12): two `sluice serve` processes on one
//! Redis (or a 3-master cluster). Each round, sidecar B spends a key's tokens (3 an hour) and is
//! denied; an operator resets the key through sidecar A's Quota API; B is asked again and again
//! (one `ShouldRateLimit` after another, no pause) until it admits the key. Reports, over the
//! rounds, how long after the reset returned B admitted it, with `redis.push_resets` on and off
//! in the same run.
//!
//! `cargo run --release -p sluice-loadtest --bin reset-latency -- --help`

// A command-line report: printing is its output.
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[allow(dead_code)] // only the readiness wait is needed here
mod sidecars;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use sluice_proto::envoy::common_ratelimit::RateLimitDescriptor;
use sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::Entry as RlsEntry;
use sluice_proto::envoy::ratelimit::RateLimitRequest;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use sluice_proto::sluice::v1::quota_client::QuotaClient;
use sluice_proto::sluice::v1::{Entry, ResetQuotaRequest};
use sluice_testkit::process::Sluice;
use sluice_testkit::redis::{Cluster, Standalone};
use tonic::transport::Channel;

/// Measures reset → enforced, with and without pushed resets.
#[derive(Debug, Parser)]
struct Args {
    /// The sluice binary.
    #[arg(long, default_value = "target/release/sluice")]
    sluice: PathBuf,
    /// Resets measured per setting.
    #[arg(long, default_value_t = 200)]
    rounds: u32,
    /// A 3-master Redis Cluster instead of a standalone Redis.
    #[arg(long)]
    cluster: bool,
    /// The longest B is asked after a reset before the round counts as never seen.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    cap: Duration,
}

const TOKEN: &str = "reset-latency-token";

fn config(redis: &str, token_file: &std::path::Path, push: bool) -> String {
    format!(
        "admin:\n  allow_reset: true\n  reset_token_file: {}\ndomains:\n  - domain: r\n    descriptors:\n      - key: user\n        rate_limit: {{unit: hour, requests_per_unit: 3}}\nredis:\n  {redis}\n  timeout: 250ms\n  push_resets: {push}\n",
        token_file.display()
    )
}

fn request(user: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "r".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![RlsEntry {
                key: "user".into(),
                value: user.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

async fn code(b: &mut RateLimitServiceClient<Channel>, user: &str) -> anyhow::Result<i32> {
    Ok(b.should_rate_limit(request(user))
        .await?
        .into_inner()
        .overall_code)
}

/// One setting's rounds: how long after each reset B admitted the key (`None`: not within `cap`).
async fn rounds(args: &Args, redis: &str, push: bool) -> anyhow::Result<Vec<Option<Duration>>> {
    let dir = tempfile::tempdir()?;
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN)?;
    let yaml = config(redis, &token, push);
    let sidecars = [
        Sluice::start(&args.sluice, &yaml),
        Sluice::start(&args.sluice, &yaml),
    ];
    sidecars::wait_connected(&sidecars).await?;
    // Subscriptions are made as the sidecars start; give them a moment to be confirmed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut a = QuotaClient::connect(format!("http://{}", sidecars[0].grpc)).await?;
    let mut b = RateLimitServiceClient::connect(format!("http://{}", sidecars[1].grpc)).await?;
    let mut seen = Vec::new();
    let mut skipped = 0;
    for round in 0..args.rounds {
        let user = format!("{push}-{round}");
        let mut codes = Vec::new();
        for _ in 0..4 {
            codes.push(code(&mut b, &user).await?);
        }
        // A fresh key passes 3 and is denied the 4th. Anything else (a Redis call that timed
        // out on a busy machine: the fallback decided) is no round to measure.
        if codes
            != [
                Code::Ok as i32,
                Code::Ok as i32,
                Code::Ok as i32,
                Code::OverLimit as i32,
            ]
        {
            skipped += 1;
            if skipped > args.rounds / 10 {
                bail!("{skipped} rounds where a fresh key was not 3 OK then denied: {codes:?}");
            }
            continue;
        }
        let mut reset = tonic::Request::new(ResetQuotaRequest {
            domain: "r".into(),
            entries: vec![Entry {
                key: "user".into(),
                value: user.clone(),
            }],
        });
        reset
            .metadata_mut()
            .insert("authorization", format!("Bearer {TOKEN}").parse()?);
        a.reset_quota(reset).await.context("ResetQuota")?;
        let start = Instant::now();
        let mut took = None;
        while start.elapsed() < args.cap {
            if code(&mut b, &user).await? == Code::Ok as i32 {
                took = Some(start.elapsed());
                break;
            }
        }
        seen.push(took);
    }
    if skipped > 0 {
        eprintln!(
            "push_resets {push}: {skipped} rounds skipped (a fresh key not 3 OK then denied)"
        );
    }
    Ok(seen)
}

fn report(label: &str, seen: &[Option<Duration>], cap: Duration) {
    let mut ms: Vec<f64> = seen
        .iter()
        .flatten()
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| -> String {
        match ms.get(((ms.len() as f64 * q).ceil() as usize).saturating_sub(1)) {
            Some(v) if !ms.is_empty() => format!("{v:.1}"),
            _ => "-".into(),
        }
    };
    let never = seen.iter().filter(|s| s.is_none()).count();
    println!(
        "| {label} | {} | {} | {} | {} | {} | {never} (not within {cap:?}) |",
        seen.len(),
        at(0.5),
        at(0.9),
        at(0.99),
        ms.last().map_or("-".into(), |v| format!("{v:.1}")),
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (_standalone, _cluster, redis) = if args.cluster {
        let c = Cluster::start().await;
        let nodes = c.nodes().join(", ");
        (None, Some(c), format!("cluster_nodes: [{nodes}]"))
    } else {
        let s = Standalone::start().await;
        let url = s.url();
        (Some(s), None, format!("url: {url}"))
    };
    println!(
        "| push_resets | rounds | p50 ms | p90 ms | p99 ms | max ms | never |\n|---|---|---|---|---|---|---|"
    );
    for push in [true, false] {
        let seen = rounds(&args, &redis, push).await?;
        report(&push.to_string(), &seen, args.cap);
    }
    Ok(())
}
