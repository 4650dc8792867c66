//! The multi-instance accuracy harness (P3, P5, P7): N sluice processes on one Redis (or a Redis
//! Cluster), a paced offered load through `ShouldRateLimit`, and a comparison of what was admitted
//! with the ideal `B + L·t`.
//!
//! `cargo run --release -p sluice-loadtest --bin accuracy -- --help`

mod cluster_faults;
mod drive;
mod sidecars;
mod windows;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use sluice_testkit::process::{Sluice, http_get};
use sluice_testkit::redis::{Cluster, Standalone};

use crate::drive::{KeyPicker, Tally, drive};
use crate::sidecars::script_calls;

/// Measures how accurately N sidecars enforce one global limit.
#[derive(Debug, Parser)]
struct Args {
    /// The sluice binary (build with `cargo build --release -p sluice`).
    #[arg(long, default_value = "target/release/sluice")]
    sluice: std::path::PathBuf,
    /// Every sidecar's k-th request at the same moment (issue 42's table: each step is one
    /// request per sidecar); by default each sidecar's requests start at a phase of their own.
    #[arg(long)]
    in_step: bool,
    /// Sidecar processes.
    #[arg(long, default_value_t = 4)]
    sidecars: usize,
    /// Limit per key, requests per second (L).
    #[arg(long, default_value_t = 1000)]
    limit: u64,
    /// Burst (B); default L.
    #[arg(long)]
    burst: Option<u64>,
    /// Total offered load, requests per second, split evenly over the sidecars.
    #[arg(long, default_value_t = 4000.0)]
    offered: f64,
    /// Seconds of load.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Keys: 1 is a single hot key; more draws keys with Zipf(1) skew.
    #[arg(long, default_value_t = 1)]
    keys: usize,
    /// Run against a 3-master Redis Cluster instead of a standalone Redis.
    #[arg(long)]
    cluster: bool,
    /// Replicas per cluster master (failover needs 1).
    #[arg(long, default_value_t = 0)]
    replicas: u16,
    /// A fault between sluice and a standalone Redis, from `--fault-at` to `--fault-until`.
    #[arg(long, value_enum)]
    fault: Option<Fault>,
    /// Seconds into the run the fault starts.
    #[arg(long, default_value_t = 10)]
    fault_at: u64,
    /// Seconds into the run the fault ends (Redis healthy again).
    #[arg(long, default_value_t = 20)]
    fault_until: u64,
    /// Sharing mode of the rule.
    #[arg(long, default_value = "strict")]
    mode: String,
    /// The rule's algorithm: token_bucket, fixed_window or sliding_window (windows of a second;
    /// `--burst` applies to token buckets only).
    #[arg(long, default_value = "token_bucket")]
    algorithm: String,
    /// `redis.batch_linger` of the sidecars (e.g. `2ms`; default: sluice's own).
    #[arg(long)]
    batch_linger: Option<String>,
    /// `redis.batch_min_wait` of the sidecars (e.g. `5ms`; default: none).
    #[arg(long)]
    batch_min_wait: Option<String>,
    /// Start the traffic as soon as every sidecar reaches Redis, while the fleet may still be
    /// counting itself (the first sidecars read fewer live instances until their next
    /// heartbeat); by default it waits until every sidecar counts them all.
    #[arg(long)]
    cold_count: bool,
    /// `engine.rate_lease_ttl` of the sidecars: leases of rate (e.g. `10s`), or `off` for token leases only (default: sluice's, `10s`).
    #[arg(long)]
    rate_lease_ttl: Option<String>,
}

/// Faults the harness injects (P7 and the hardening issue's real faults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Fault {
    /// `docker pause`: Redis stops answering, connections stay open.
    Pause,
    /// Redis stopped and started again: connections drop, data and scripts are gone.
    Restart,
    /// 50 ms added each way (Toxiproxy), above the 20 ms store timeout.
    Latency,
    /// Every connection reset as soon as data flows (Toxiproxy `reset_peer`).
    Reset,
    /// Data stops flowing, connections stay open (Toxiproxy `timeout` 0).
    Stall,
    /// Cluster: the master serving the hot key dies; its replica takes over (`--replicas 1`).
    Failover,
    /// Cluster: the hot key's slot migrates to another master, and back at `--fault-until`.
    Reshard,
}

impl Fault {
    /// The Toxiproxy toxic and its attributes, for network faults.
    fn toxic(self) -> Option<(&'static str, &'static str)> {
        match self {
            Fault::Latency => Some(("latency", r#"{"latency":50,"jitter":0}"#)),
            Fault::Reset => Some(("reset_peer", r#"{"timeout":0}"#)),
            Fault::Stall => Some(("timeout", r#"{"timeout":0}"#)),
            _ => None,
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.sluice.exists() {
        bail!(
            "{} not found: cargo build --release -p sluice",
            args.sluice.display()
        );
    }
    let burst = args.burst.unwrap_or(args.limit);
    let (standalone, cluster) = if args.cluster {
        (None, Some(Cluster::start_with(args.replicas).await))
    } else {
        (Some(Standalone::start().await), None)
    };
    let cluster_fault = matches!(args.fault, Some(Fault::Failover | Fault::Reshard));
    if args.fault.is_some() && args.cluster != cluster_fault {
        bail!("failover and reshard need --cluster; the other faults a standalone Redis");
    }
    if args.fault == Some(Fault::Failover) && args.replicas == 0 {
        bail!("failover needs --replicas 1");
    }
    // Network faults go through Toxiproxy in front of Redis; the sidecars connect to the proxy.
    let toxiproxy = match (args.fault.and_then(Fault::toxic), &standalone) {
        (Some(_), Some(s)) => {
            let t = sluice_testkit::toxiproxy::Toxiproxy::start();
            let listen = sluice_testkit::process::free_port();
            t.proxy("redis", listen, s.port);
            Some((t, listen))
        }
        _ => None,
    };
    let linger = args
        .batch_linger
        .iter()
        .map(|l| format!(", batch_linger: {l}"))
        .chain(
            args.batch_min_wait
                .iter()
                .map(|w| format!(", batch_min_wait: {w}")),
        )
        .collect::<String>();
    let redis_section = match (&standalone, &cluster) {
        (Some(_), _) if toxiproxy.is_some() => format!(
            "redis: {{url: \"redis://127.0.0.1:{}\"}}",
            toxiproxy.as_ref().map_or(0, |t| t.1)
        ),
        (Some(s), _) => format!("redis: {{url: \"{}\"{linger}}}", s.url()),
        (_, Some(c)) => format!(
            "redis: {{cluster_nodes: [{}]{linger}}}",
            c.nodes()
                .iter()
                .map(|n| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => unreachable!("one of them is set"),
    };
    let windows = args.algorithm != "token_bucket";
    let shape = if windows {
        format!("algorithm: {}", args.algorithm)
    } else {
        format!("burst: {burst}")
    };
    let engine = match &args.rate_lease_ttl {
        Some(ttl) => format!("engine:\n  rate_lease_ttl: {ttl}\n"),
        None => String::new(),
    };
    let config = format!(
        "domains:\n  - domain: acc\n    descriptors:\n      - key: k\n        rate_limit: {{unit: second, requests_per_unit: {}, {shape}, mode: {}}}\n{redis_section}\n{engine}",
        args.limit, args.mode
    );
    let sidecars: Vec<Sluice> = (0..args.sidecars)
        .map(|_| Sluice::start(&args.sluice, &config))
        .collect();
    sidecars::wait_connected(&sidecars).await?;
    let counted = if args.cold_count {
        None
    } else {
        Some(wait_counted(&sidecars).await)
    };
    let mut redis_ports: Vec<u16> = match (&standalone, &cluster) {
        (Some(s), _) => vec![s.port],
        (_, Some(c)) => c.ports.clone(),
        _ => Vec::new(),
    };
    let calls_before = script_calls(&redis_ports).await?;
    let trips_before = round_trips(&sidecars);
    let key_calls_before = key_calls(&sidecars);
    let returns_before = returns(&sidecars);
    let fallbacks_before = fallback_decisions(&sidecars);

    let keys = KeyPicker::zipf(args.keys);
    let tally = Tally::new(keys.len());
    let start = Instant::now();
    let until = start + Duration::from_secs(args.seconds);
    let mut drivers = Vec::new();
    for (i, s) in sidecars.iter().enumerate() {
        let client = RateLimitServiceClient::connect(format!("http://{}", s.grpc))
            .await
            .context("connect")?;
        drivers.push(tokio::spawn(drive(
            client,
            args.offered / args.sidecars as f64,
            keys.clone(),
            Arc::clone(&tally),
            start,
            until,
            0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1),
            args.in_step,
        )));
    }
    // Cumulative admitted (all keys) sampled every 100 ms, for the never-over check.
    let mut worst_excess = f64::MIN;
    let mut samples_over = 0u32;
    let mut fault_at = None;
    let mut enforcement_back: Option<Duration> = None;
    let mut moved_back = false;
    // Decisions answered by a rule's fallback (the store too slow, failing or unreachable), and
    // how long they kept coming (100 ms samples in which the count grew).
    let (mut fallbacks, mut fallback_samples) = (fallback_decisions(&sidecars), 0u32);
    // The second half of the run (a fleet's queue of turns forms in its first `n / C` seconds):
    // when it began, and the key calls and admitted requests by then.
    let mut second_half: Option<(f64, f64, u64)> = None;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t = start.elapsed().as_secs_f64();
        if second_half.is_none() && t >= args.seconds as f64 / 2.0 {
            second_half = Some((t, key_calls(&sidecars), tally.total_admitted()));
        }
        if fault_at.is_some() {
            let now = fallback_decisions(&sidecars);
            fallback_samples += u32::from(now > fallbacks);
            fallbacks = now;
        }
        if args.keys == 1 && !windows {
            let ideal = burst as f64 + args.limit as f64 * t;
            let excess = tally.total_admitted() as f64 - ideal;
            worst_excess = worst_excess.max(excess);
            samples_over += u32::from(excess > 0.0);
        }
        if let (Some(fault), Some(c)) = (args.fault, &cluster) {
            if fault_at.is_none() && t >= args.fault_at as f64 {
                match fault {
                    Fault::Failover => {
                        let dead = cluster_faults::fail_master(&c.ports).await?;
                        redis_ports.retain(|&p| p != dead);
                    }
                    _ => cluster_faults::move_hot_slot(&c.ports).await?,
                }
                fault_at = Some(Instant::now());
            }
            if fault == Fault::Reshard && !moved_back && t >= args.fault_until as f64 {
                cluster_faults::move_hot_slot(&c.ports).await?;
                moved_back = true;
            }
            continue;
        }
        let (Some(fault), Some(s)) = (args.fault, &standalone) else {
            continue;
        };
        if fault_at.is_none() && t >= args.fault_at as f64 {
            match (fault, &toxiproxy) {
                (Fault::Pause, _) => s.container.pause().await.context("pause Redis")?,
                (Fault::Restart, _) => s.container.stop().await.context("stop Redis")?,
                (f, Some((proxy, _))) => {
                    let (toxic, attributes) = f.toxic().unwrap_or_default();
                    proxy.add("redis", toxic, attributes);
                }
                (_, None) => unreachable!("network faults have a proxy"),
            }
            fault_at = Some(Instant::now());
        }
        if fault_at.is_some() && enforcement_back.is_none() && t >= args.fault_until as f64 {
            match (fault, &toxiproxy) {
                (Fault::Pause, _) => s.container.unpause().await.context("unpause Redis")?,
                (Fault::Restart, _) => s.container.start().await.context("start Redis")?,
                (f, Some((proxy, _))) => {
                    proxy.remove("redis", f.toxic().map_or("", |t| t.0));
                }
                (_, None) => unreachable!("network faults have a proxy"),
            }
            let restored = Instant::now();
            loop {
                let all = sidecars.iter().all(|s| {
                    http_get(s.admin.port(), "/readyz", &[])
                        .body
                        .contains("degraded: false")
                });
                if all || restored.elapsed() > Duration::from_secs(10) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            enforcement_back = Some(restored.elapsed());
        }
    }
    for d in drivers {
        d.await.context("driver")?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let calls = script_calls(&redis_ports)
        .await?
        .saturating_sub(calls_before);
    let trips = (round_trips(&sidecars) - trips_before) as u64;
    let key_calls_now = key_calls(&sidecars);
    let key_calls = (key_calls_now - key_calls_before) as u64;
    let returns = (returns(&sidecars) - returns_before) as u64;
    let settled = second_half.map(|(t, calls_then, admitted_then)| Settled {
        seconds: elapsed - t,
        key_calls: key_calls_now - calls_then,
        admitted: tally.total_admitted() - admitted_then,
    });
    report(
        &args,
        burst,
        elapsed,
        &keys,
        &tally,
        (worst_excess, samples_over),
        (calls, (key_calls, returns), trips),
        settled,
        fault_at.map(|_| ()),
        enforcement_back,
        (
            fallback_decisions(&sidecars).saturating_sub(fallbacks_before),
            f64::from(fallback_samples) / 10.0,
        ),
        windows.then(|| windows::check(&tally.log.records(), args.limit, 1_000_000)),
        counted,
    );
    Ok(())
}

/// Waits (up to 10 s) until every sidecar counts the whole fleet live
/// (`sluice_live_instances`), as every sidecar of a fleet that has been up for a heartbeat
/// does; returns the mean count they reported when first asked. A fleet that starts all at once
/// counts itself as it registers: the first sidecars read fewer, and size their share of the
/// burst for a smaller fleet until their next heartbeat (`--cold-count` keeps that start).
async fn wait_counted(sidecars: &[Sluice]) -> f64 {
    let live = |s: &Sluice| {
        sidecars::sum_metric(std::slice::from_ref(s), |l| {
            l.starts_with("sluice_live_instances")
        })
    };
    let n = sidecars.len() as f64;
    let first = sidecars.iter().map(live).sum::<f64>() / n;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && sidecars.iter().any(|s| live(s) < n) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    first
}

/// The second half of a run, once a fleet has settled.
struct Settled {
    seconds: f64,
    key_calls: f64,
    admitted: u64,
}

/// `sluice_store_calls_total` summed over the sidecars: the calls on the keys (leases, returns,
/// reads, usage), without the heartbeats and probes each sidecar sends whatever its keys.
fn key_calls(sidecars: &[Sluice]) -> f64 {
    sidecars::sum_metric(sidecars, |l| l.starts_with("sluice_store_calls_total"))
}

/// Of [`key_calls`], the returns of unspent leases (`op="release"`): what a key costs after
/// its decisions, off their path.
fn returns(sidecars: &[Sluice]) -> f64 {
    sidecars::sum_metric(sidecars, |l| {
        l.starts_with("sluice_store_calls_total{") && l.contains("op=\"release\"")
    })
}

/// `sluice_redis_round_trips_total` summed over the sidecars (a batch of calls is one).
fn round_trips(sidecars: &[Sluice]) -> f64 {
    sidecars::sum_metric(sidecars, |l| {
        l.starts_with("sluice_redis_round_trips_total")
    })
}

/// `sluice_decisions_total{outcome="fallback"}` summed over the sidecars.
fn fallback_decisions(sidecars: &[Sluice]) -> u64 {
    sidecars::sum_metric(sidecars, |l| {
        l.starts_with("sluice_decisions_total{") && l.contains("outcome=\"fallback\"")
    }) as u64
}

#[allow(clippy::too_many_arguments, clippy::print_stdout)]
fn report(
    args: &Args,
    burst: u64,
    elapsed: f64,
    keys: &KeyPicker,
    tally: &Tally,
    (worst_excess, samples_over): (f64, u32),
    (calls, (key_calls, returns), trips): (u64, (u64, u64), u64),
    settled: Option<Settled>,
    fault: Option<()>,
    enforcement_back: Option<Duration>,
    (fallbacks, fallback_secs): (u64, f64),
    per_window: Option<windows::WindowReport>,
    counted: Option<f64>,
) {
    let sent: u64 = tally.sent.iter().map(|s| s.load(Ordering::Relaxed)).sum();
    let admitted = tally.total_admitted();
    // Ideal per key: everything offered, up to B + L·t.
    let mut ideal = 0.0;
    let mut over_keys = 0;
    for k in 0..keys.len() {
        let cap = burst as f64 + args.limit as f64 * elapsed;
        let offered = tally.sent[k].load(Ordering::Relaxed) as f64;
        ideal += offered.min(cap);
        if tally.admitted[k].load(Ordering::Relaxed) as f64 > cap {
            over_keys += 1;
        }
    }
    let mut lat = tally
        .latencies
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    let p99 = |v: &mut Vec<u64>| -> f64 {
        v.sort_unstable();
        let at = (v.len() * 99 / 100).min(v.len().saturating_sub(1));
        v.get(at).map_or(0.0, |m| *m as f64 / 1000.0)
    };
    let (mut normal, mut outage): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
    let (kill, restore) = match args.fault {
        Some(_) => (args.fault_at * 1000, args.fault_until * 1000),
        None => (u64::MAX, u64::MAX),
    };
    for (at, micros) in lat.drain(..) {
        if at >= kill && at < restore {
            outage.push(micros)
        } else {
            normal.push(micros)
        }
    }
    // Denials, and those a single bucket would not have made: a key is denied under its limit
    // when it admitted less than all it was offered, capped at B + L·t.
    let denied = sent.saturating_sub(admitted);
    let under = ideal - admitted as f64;
    let under = if under >= 0.5 {
        format!("{under:.0}")
    } else {
        "0".to_string()
    };
    let target = if args.cluster {
        "3-master cluster"
    } else {
        "standalone"
    };
    if let Some(w) = per_window {
        // Windows: L per aligned window; the token bucket's B + L·t does not apply.
        println!(
            "accuracy: {} sidecars, {target}, {} L={}/window of 1s, offered {:.0}/s, {} key(s), {:.1}s: sent {sent}, admitted {admitted}; per window: {} windows, over L: {} (most surely in one window {}, at most {} counting requests across an edge), admitted {} of ideal {} in whole windows ({:.2}%); Redis script calls {calls} ({:.2} per 100 decisions), errors {}, p99 {:.2} ms",
            args.sidecars,
            args.algorithm,
            args.limit,
            args.offered,
            keys.len(),
            elapsed,
            w.windows,
            w.over,
            w.worst_sure,
            w.worst_possible,
            w.admitted,
            w.ideal,
            100.0 * w.admitted as f64 / w.ideal.max(1) as f64,
            100.0 * calls as f64 / sent.max(1) as f64,
            tally.errors.load(Ordering::Relaxed),
            p99(&mut normal),
        );
        return;
    }
    println!(
        "accuracy: {} sidecars, {target}, L={}/s B={burst}, offered {:.0}/s, {} key(s), {:.1}s: sent {sent}, admitted {admitted}, ideal {:.0} ({:.2}%), keys over B+L·t: {over_keys}{}, denied {denied} (of them under the ideal: {under}), Redis script calls {calls} ({:.2} per 100 decisions, {:.2} per key-second; on the keys, without heartbeats and probes: {key_calls}, {:.2} per 100 decisions, {:.2} per key-second, of them returns of leases {returns}; first sights of a key on a sidecar: {}, {:.2} per 100 decisions), round trips {trips} ({:.2} per 100 decisions){}, errors {}, p99 {:.2} ms{}{}{}",
        args.sidecars,
        args.limit,
        args.offered,
        keys.len(),
        elapsed,
        ideal,
        100.0 * admitted as f64 / ideal.max(1.0),
        if args.keys == 1 {
            format!(
                " (worst cumulative excess {worst_excess:.0}; over the bound for {:.1}s)",
                f64::from(samples_over) / 10.0
            )
        } else {
            String::new()
        },
        100.0 * calls as f64 / sent.max(1) as f64,
        calls as f64 / keys.len() as f64 / elapsed,
        100.0 * key_calls as f64 / sent.max(1) as f64,
        key_calls as f64 / keys.len() as f64 / elapsed,
        tally.first_sights.load(Ordering::Relaxed),
        100.0 * tally.first_sights.load(Ordering::Relaxed) as f64 / sent.max(1) as f64,
        100.0 * trips as f64 / sent.max(1) as f64,
        settled.map_or(String::new(), |s| format!(
            "; second half ({:.1}s): {:.2} calls on the keys a second, {:.2} per key-second, admitted {}{}",
            s.seconds,
            s.key_calls / s.seconds,
            s.key_calls / keys.len() as f64 / s.seconds,
            s.admitted,
            if args.keys == 1 {
                format!(" ({:.2}% of L·t)", 100.0 * s.admitted as f64 / (args.limit as f64 * s.seconds))
            } else {
                String::new()
            }
        )),
        tally.errors.load(Ordering::Relaxed),
        p99(&mut normal),
        match (fault, enforcement_back) {
            (Some(()), back) => format!(
                ", fault {}: p99 during it {:.2} ms, {fallbacks} decisions by fallback (over {fallback_secs:.1}s){}",
                args.fault
                    .map_or(String::new(), |f| format!("{f:?}").to_lowercase()),
                p99(&mut outage),
                back.map_or(String::new(), |b| format!(
                    ", enforcement back {:.2}s after Redis",
                    b.as_secs_f64()
                ))
            ),
            // Without a fault, fallbacks mean the store answered too late (or the sidecar
            // could not reach it): a denial under the limit then is the fallback's.
            _ => format!(", {fallbacks} decisions by fallback"),
        },
        denied_at(tally, denied),
        match counted {
            Some(first) => format!(
                "; traffic began once every sidecar counted all {} live (at first they counted {first:.1} on average)",
                args.sidecars
            ),
            None => " (--cold-count: traffic began as the fleet still counted itself)".to_string(),
        },
    );
}

/// When the denials of a run with few of them were sent (seconds after its first request), so
/// a denial under the limit can be matched to what the sidecars were doing then: nothing when
/// there are none or more than 20.
fn denied_at(tally: &Tally, denied: u64) -> String {
    if denied == 0 || denied > 20 {
        return String::new();
    }
    let records = tally.log.records();
    let first = records.iter().map(|r| r.sent).min().unwrap_or(0);
    let mut at: Vec<f64> = records
        .iter()
        .filter(|r| !r.admitted)
        .map(|r| (r.sent - first) as f64 / 1e6)
        .collect();
    at.sort_by(f64::total_cmp);
    let at: Vec<String> = at.iter().map(|s| format!("{s:.3}")).collect();
    format!("; denied at (s): {}", at.join(", "))
}
