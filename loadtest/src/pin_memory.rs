//! What hostile clients can make one sluice hold in memory (issue 41): each scenario starts a
//! fresh `sluice serve` on the embedded store, opens what it says from one or more loopback
//! addresses, holds it past the request deadline, and reports the server's RSS before, at its
//! peak and at the end, and how the server answered the streams.
//!
//! `loadtest/pin-memory.sh` runs every scenario against a release build and appends the table to
//! `loadtest/RESULTS.md`; `crates/sluice/tests/memory_bounds.rs` runs the same attacks, smaller, in
//! CI.

#![allow(clippy::print_stdout, clippy::print_stderr)] // the table is the program's output

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use sluice_testkit::hostile::{self, Client, End, Open};
use sluice_testkit::process::Sluice;

#[derive(Parser)]
#[command(about = "Memory hostile clients can pin in one sluice")]
struct Args {
    /// The sluice binary.
    #[arg(long, default_value = "target/release/sluice")]
    sluice: PathBuf,
    /// Scenarios to run (all if none): partial-rls, partial-rlqs, idle-streams, reflection,
    /// everything.
    scenarios: Vec<String>,
    /// Rounds of each scenario on the same server (memory kept between rounds shows).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// How long the streams are held before the last RSS reading.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    hold: Duration,
}

const CONFIG: &str = "domains:\n- domain: edge\n  descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n";

/// One kind of call a scenario opens.
#[derive(Clone, Copy)]
enum Call {
    /// A ShouldRateLimit whose message says 4 MiB and stops 100 bytes short, never ended.
    PartialRls,
    /// A ShouldRateLimit whose 100-byte message stops after 50 bytes, never ended.
    SmallPartialRls,
    /// The same on an RLQS stream.
    PartialRlqs,
    /// A whole ShouldRateLimit, on a connection that never reads an answer.
    UnreadRls,
    /// An RLQS stream reporting 4 096 buckets (ids of ~60 bytes), never reading an answer.
    RlqsBuckets,
    /// An RLQS stream that sends nothing.
    IdleRlqs,
    /// A Health/Watch of the server's overall status.
    HealthWatch,
    /// A reflection stream that sends nothing.
    IdleReflection,
}

const RLS: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const RLQS: &str = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

impl Call {
    async fn open(self, client: &mut Client) -> std::io::Result<Open> {
        // One buffer shared by every stream (a `Bytes` clone is a reference).
        static PARTIAL: std::sync::LazyLock<bytes::Bytes> = std::sync::LazyLock::new(|| {
            const PROMISED: u32 = 4 << 20;
            hostile::frame(PROMISED, &vec![0u8; PROMISED as usize - 100])
        });
        let partial = || PARTIAL.clone();
        match self {
            Call::PartialRls => client.open(RLS, partial(), false).await,
            Call::UnreadRls => {
                use prost::Message as _;
                let request = sluice_proto::envoy::ratelimit::RateLimitRequest {
                    domain: "edge".into(),
                    descriptors: vec![sluice_proto::envoy::common_ratelimit::RateLimitDescriptor {
                        entries: vec![
                            sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::Entry {
                                key: "k".into(),
                                value: "v".into(),
                            },
                        ],
                        ..Default::default()
                    }],
                    hits_addend: 0,
                };
                let bytes = request.encode_to_vec();
                client
                    .open(RLS, hostile::frame(bytes.len() as u32, &bytes), true)
                    .await
            }
            Call::RlqsBuckets => {
                use prost::Message as _;
                use sluice_proto::envoy::rlqs::{
                    BucketId, RateLimitQuotaUsageReports,
                    rate_limit_quota_usage_reports::BucketQuotaUsage,
                };
                let usages = (0..4096)
                    .map(|i| BucketQuotaUsage {
                        bucket_id: Some(BucketId {
                            bucket: [
                                ("name".to_string(), format!("bucket-{i:08}")),
                                (
                                    "user".to_string(),
                                    format!("someone-with-a-longer-name-{i:08}"),
                                ),
                            ]
                            .into(),
                        }),
                        time_elapsed: Some(Default::default()),
                        num_requests_allowed: 1,
                        num_requests_denied: 0,
                    })
                    .collect();
                let report = RateLimitQuotaUsageReports {
                    domain: "edge".into(),
                    bucket_quota_usages: usages,
                };
                let bytes = report.encode_to_vec();
                client
                    .open(RLQS, hostile::frame(bytes.len() as u32, &bytes), false)
                    .await
            }
            Call::SmallPartialRls => client.open(RLS, hostile::frame(100, &[0; 50]), false).await,
            Call::PartialRlqs => client.open(RLQS, partial(), false).await,
            Call::IdleRlqs => client.open(RLQS, bytes::Bytes::new(), false).await,
            Call::HealthWatch => {
                client
                    .open("/grpc.health.v1.Health/Watch", hostile::frame(0, &[]), true)
                    .await
            }
            Call::IdleReflection => {
                client
                    .open(
                        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                        bytes::Bytes::new(),
                        false,
                    )
                    .await
            }
        }
    }
}

/// `calls` opened `each` times on each of `connections` connections from each of `addresses`
/// loopback addresses.
struct Scenario {
    name: &'static str,
    addresses: u8,
    connections: usize,
    calls: Vec<(Call, usize)>,
}

fn scenarios() -> Vec<Scenario> {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let custom_call = match std::env::var("CALL").as_deref() {
        Ok("rlqs") => Call::PartialRlqs,
        Ok("small") => Call::SmallPartialRls,
        Ok("unread") => Call::UnreadRls,
        Ok("buckets") => Call::RlqsBuckets,
        Ok("idle-rlqs") => Call::IdleRlqs,
        Ok("watch") => Call::HealthWatch,
        Ok("reflection") => Call::IdleReflection,
        _ => Call::PartialRls,
    };
    vec![
        Scenario {
            name: "custom",
            addresses: env("ADDRS", 1) as u8,
            connections: env("CONNS", 1),
            calls: vec![(custom_call, env("N", 1))],
        },
        Scenario {
            name: "partial-rls",
            addresses: 1,
            connections: 1,
            calls: vec![(Call::PartialRls, 64)],
        },
        Scenario {
            name: "partial-rlqs",
            addresses: 1,
            connections: 1,
            calls: vec![(Call::PartialRlqs, 64)],
        },
        Scenario {
            name: "idle-streams",
            addresses: 1,
            connections: 16,
            calls: vec![(Call::IdleRlqs, 500), (Call::HealthWatch, 500)],
        },
        Scenario {
            name: "reflection",
            addresses: 1,
            connections: 16,
            calls: vec![(Call::IdleReflection, 500)],
        },
        Scenario {
            name: "unread-answers",
            addresses: 1,
            connections: 8,
            calls: vec![(Call::UnreadRls, 1024)],
        },
        Scenario {
            name: "rlqs-buckets",
            addresses: 1,
            connections: 4,
            calls: vec![(Call::RlqsBuckets, 8)],
        },
        Scenario {
            name: "connections",
            addresses: 4,
            connections: 64,
            calls: vec![],
        },
        Scenario {
            name: "partial-everywhere",
            addresses: 4,
            connections: 64,
            calls: vec![(Call::PartialRls, 32)],
        },
        Scenario {
            name: "everything",
            addresses: 4,
            connections: 64,
            calls: vec![
                (Call::PartialRls, 32),
                (Call::PartialRlqs, 8),
                (Call::IdleRlqs, 64),
                (Call::HealthWatch, 64),
                (Call::IdleReflection, 64),
            ],
        },
    ]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!(
        "| scenario | RSS before | peak | after {:?} | streams opened | ended by the server (how) | connections refused |",
        args.hold
    );
    println!("|---|---|---|---|---|---|---|");
    for s in scenarios() {
        if !args.scenarios.is_empty() && !args.scenarios.iter().any(|n| n == s.name) {
            continue;
        }
        run(&args, &s).await?;
    }
    Ok(())
}

async fn run(args: &Args, s: &Scenario) -> anyhow::Result<()> {
    let sluice = Sluice::start(&args.sluice, CONFIG);
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..args.rounds {
        round(args, s, &sluice).await?;
    }
    Ok(())
}

async fn round(args: &Args, s: &Scenario, sluice: &Sluice) -> anyhow::Result<()> {
    let pid = sluice.child.id();
    let before = hostile::rss_bytes(pid);
    let started = Instant::now();
    let (peak, (clients, open, refused_connections)) =
        hostile::peak_rss(pid, Duration::from_millis(50), async {
            let mut clients = Vec::new();
            let mut open = Vec::new();
            let mut refused = 0;
            for a in 0..s.addresses {
                let from = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + a));
                for _ in 0..s.connections {
                    let window = if s
                        .calls
                        .iter()
                        .any(|(c, _)| matches!(c, Call::UnreadRls | Call::RlqsBuckets))
                    {
                        0
                    } else {
                        u32::MAX >> 1
                    };
                    let Ok(mut client) =
                        Client::connect_with_window(sluice.grpc, from, window).await
                    else {
                        refused += 1;
                        continue;
                    };
                    for &(call, n) in &s.calls {
                        for _ in 0..n {
                            match tokio::time::timeout(
                                Duration::from_secs(2),
                                call.open(&mut client),
                            )
                            .await
                            {
                                Ok(Ok(stream)) => open.push(stream),
                                _ => break,
                            }
                        }
                    }
                    clients.push(client);
                }
            }
            tokio::time::sleep(args.hold.saturating_sub(started.elapsed())).await;
            (clients, open, refused)
        })
        .await;
    let after = hostile::rss_bytes(pid);
    if std::env::var_os("SHOW_METRICS").is_some() {
        let metrics = sluice_testkit::process::http_get(sluice.admin.port(), "/metrics", &[]);
        for line in metrics
            .body
            .lines()
            .filter(|l| l.starts_with("sluice_refused_total"))
        {
            eprintln!("{line}");
        }
    }
    if std::env::var_os("SHOW_LOG").is_some() {
        for line in sluice
            .stderr
            .try_iter()
            .filter(|l| !l.contains("\"received\"") && !l.contains("\"send\""))
            .take(60)
        {
            eprintln!("{line}");
        }
    }
    let mut ends: BTreeMap<String, usize> = BTreeMap::new();
    for stream in &open {
        if let Some(end) = stream.end() {
            let how = match end {
                End::Status(code) => format!("status {code}"),
                End::Reset(reason) => format!("reset {reason:?}"),
                End::Gone(_) => "connection gone".to_string(),
            };
            *ends.entry(how).or_default() += 1;
        }
    }
    let refused_connections = refused_connections + clients.iter().filter(|c| !c.is_open()).count();
    let opened = open.len();
    drop((clients, open));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let closed = hostile::rss_bytes(pid);
    let mib = |b: u64| format!("{:.0} MiB", b as f64 / (1 << 20) as f64);
    println!(
        "| {} | {} | {} | {} | {} | {} | {:?} | {} |",
        s.name,
        mib(before),
        mib(peak),
        mib(after),
        mib(closed),
        opened,
        ends,
        refused_connections
    );
    Ok(())
}
