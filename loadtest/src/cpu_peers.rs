//! CPU per request against every peer, in one sitting (issue 29, DESIGN P17): sluice (embedded
//! store, Redis, Redis with `mode: exact`), Kuadrant's Limitador (memory, Redis, Redis cached),
//! envoyproxy/ratelimit (Redis) and the no-op RLS (on sluice's gRPC server and on tonic's), one
//! at a time on this machine, each through the same ghz load: `ShouldRateLimit` on one hot key,
//! then on 100 000 keys, `-c 50` on one connection, a warm-up, then `--requests` measured.
//!
//! Per service and load: the server's CPU per request (user + system time from /proc/PID/stat,
//! the figure that does not depend on ghz's share of the cores), its write syscalls and context
//! switches per request (/proc/PID/io, /proc/PID/task/*/status), req/s, p50/p99, RSS after, and
//! on Redis the commands clients sent per decision and Redis's own CPU per decision. Each round
//! starts every service afresh (and a fresh Redis); the table gives each figure's range over the
//! rounds.
//!
//! Limitador is not on any registry this machine reaches: `--limitador` (or `LIMITADOR_BIN`)
//! names a binary built from its source; rows without it are left out, and so are
//! envoyproxy/ratelimit's without `--ratelimit`.
//!
//! `cargo run --release -p sluice-loadtest --bin cpu-peers -- --help`

// A command-line report: printing is its output.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod ghz;
#[allow(dead_code)] // only the command counts are needed here
mod sidecars;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use sluice_testkit::process::free_port;
use sluice_testkit::redis::Standalone;

/// Which services, how much load, how many rounds.
#[derive(Debug, Parser)]
struct Args {
    /// The sluice binary.
    #[arg(long, default_value = "target/release/sluice")]
    sluice: PathBuf,
    /// The no-op RLS binary.
    #[arg(long, default_value = "target/release/noop-rls")]
    noop: PathBuf,
    /// Limitador's server, built from its source (no row for it without one).
    #[arg(long, env = "LIMITADOR_BIN")]
    limitador: Option<PathBuf>,
    /// envoyproxy/ratelimit's `service_cmd` (no row for it if it is missing).
    #[arg(long, default_value = "~/go/bin/service_cmd")]
    ratelimit: String,
    /// ghz.
    #[arg(long, default_value = "~/go/bin/ghz")]
    ghz: String,
    /// Requests measured per service and load (after a warm-up of 20 000).
    #[arg(long, default_value_t = 60_000)]
    requests: u64,
    /// Rounds over every service.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Only the services whose name contains one of these (comma-separated).
    #[arg(long)]
    only: Option<String>,
    /// Sends the measured requests at this many a second in all (ghz `-r`) instead of as fast
    /// as 50 in flight allow: latency at a load every server sustains, not at saturation.
    #[arg(long)]
    rate: Option<u32>,
    /// sluice's `engine.rate_lease_ttl` (e.g. `off`: token leases only, for an A/B against
    /// sluice's default, leases of rate).
    #[arg(long)]
    rate_lease_ttl: Option<String>,
}

/// The services compared, in the order they run in each round.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Service {
    Noop,
    NoopTonic,
    Sluice,
    Limitador,
    SluiceRedis,
    SluiceExact,
    LimitadorRedis,
    LimitadorCached,
    Ratelimit,
}

impl Service {
    const ALL: [Service; 9] = [
        Service::Noop,
        Service::NoopTonic,
        Service::Sluice,
        Service::Limitador,
        Service::SluiceRedis,
        Service::SluiceExact,
        Service::LimitadorRedis,
        Service::LimitadorCached,
        Service::Ratelimit,
    ];

    fn name(self) -> &'static str {
        match self {
            Service::Noop => "no-op (sluice's gRPC server)",
            Service::NoopTonic => "no-op (tonic's server)",
            Service::Sluice => "sluice, embedded store",
            Service::Limitador => "Limitador, memory",
            Service::SluiceRedis => "sluice, Redis",
            Service::SluiceExact => "sluice, Redis, `mode: exact`",
            Service::LimitadorRedis => "Limitador, Redis",
            Service::LimitadorCached => "Limitador, Redis cached",
            Service::Ratelimit => "envoyproxy/ratelimit, Redis",
        }
    }

    fn on_redis(self) -> bool {
        matches!(
            self,
            Service::SluiceRedis
                | Service::SluiceExact
                | Service::LimitadorRedis
                | Service::LimitadorCached
                | Service::Ratelimit
        )
    }

    /// Whether Redis's command `name` was sent by this service's client (scripts' own commands
    /// are counted by `INFO commandstats` too, and the harness's INFO is not the service's).
    fn sent(self, name: &str) -> bool {
        match self {
            Service::SluiceRedis | Service::SluiceExact => matches!(name, "evalsha" | "eval"),
            Service::LimitadorRedis | Service::LimitadorCached => {
                matches!(name, "evalsha" | "eval" | "mget")
            }
            _ => !["info", "ping", "command", "client", "hello"]
                .iter()
                .any(|skip| name.starts_with(skip)),
        }
    }
}

/// The loads: one hot key, and 100 000 keys drawn at random.
const LOADS: [(&str, &str); 2] = [
    (
        "one hot key",
        r#"{"domain":"bench","descriptors":[{"entries":[{"key":"client","value":"hot"}]}]}"#,
    ),
    (
        "100 000 keys",
        r#"{"domain":"bench","descriptors":[{"entries":[{"key":"client","value":"k{{randomInt 0 100000}}"}]}]}"#,
    ),
];

/// One limit per `client` value, far above the load: the cost of a decision, not of a denial.
fn sluice_config(redis: Option<&str>, exact: bool, rate_lease_ttl: Option<&str>) -> String {
    let mode = if exact { ", mode: exact" } else { "" };
    let rates = rate_lease_ttl.map_or(String::new(), |t| format!(", rate_lease_ttl: {t}"));
    let mut y = format!(
        "domains:\n  - domain: bench\n    descriptors:\n      - key: client\n        rate_limit: {{unit: second, requests_per_unit: 1000000000{mode}}}\nengine: {{max_keys: 2000000{rates}}}\n"
    );
    if let Some(url) = redis {
        y.push_str(&format!("redis: {{url: \"{url}\"}}\n"));
    }
    y
}

/// A running service: its process and where it answers.
struct Running {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `addr` accepts connections (30 s at most).
fn wait_listening(addr: &str, child: &mut Child, log: &Path) -> anyhow::Result<()> {
    for _ in 0..300 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("did not listen on {addr} in 30 s")
}

fn start(args: &Args, service: Service, redis: Option<&Standalone>) -> anyhow::Result<Running> {
    let dir = tempfile::tempdir()?;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let log = dir.path().join("service.log");
    let url = redis.map(|r| r.url());
    let mut cmd = match service {
        Service::Noop | Service::NoopTonic => {
            let mut c = Command::new(&args.noop);
            c.args(["--addr", &addr]);
            if service == Service::NoopTonic {
                c.arg("--tonic-server");
            }
            c
        }
        Service::Sluice | Service::SluiceRedis | Service::SluiceExact => {
            let config = dir.path().join("sluice.yaml");
            let exact = service == Service::SluiceExact;
            std::fs::write(
                &config,
                sluice_config(url.as_deref(), exact, args.rate_lease_ttl.as_deref()),
            )?;
            let mut c = Command::new(&args.sluice);
            c.arg("serve")
                .arg("--config")
                .arg(&config)
                .args(["--grpc-addr", &addr, "--admin-addr", "127.0.0.1:0"])
                .args(["--reload-interval", "0s"])
                .env("SLUICE_LOG", "warn");
            c
        }
        Service::Limitador | Service::LimitadorRedis | Service::LimitadorCached => {
            let bin = args
                .limitador
                .as_ref()
                .context("no Limitador binary (--limitador or LIMITADOR_BIN)")?;
            let limits = dir.path().join("limits.yaml");
            std::fs::write(
                &limits,
                "- namespace: bench\n  max_value: 1000000000\n  seconds: 1\n  conditions: []\n  variables: [\"descriptors[0].client\"]\n",
            )?;
            let mut c = Command::new(bin);
            // Loopback only (its defaults listen on every interface).
            c.args([
                "-b",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-B",
                "127.0.0.1",
            ])
            .args(["-P", &free_port().to_string()])
            .arg(&limits);
            match service {
                Service::Limitador => c.arg("memory"),
                Service::LimitadorRedis => c.args(["redis", url.as_deref().unwrap_or_default()]),
                _ => c.args(["redis_cached", url.as_deref().unwrap_or_default()]),
            };
            c
        }
        Service::Ratelimit => {
            let config = dir.path().join("ratelimit/config");
            std::fs::create_dir_all(&config)?;
            std::fs::write(
                config.join("bench.yaml"),
                "domain: bench\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n",
            )?;
            let redis_addr = url
                .as_deref()
                .unwrap_or_default()
                .trim_start_matches("redis://")
                .to_string();
            let mut c = Command::new(ghz::home(&args.ratelimit));
            c.env("USE_STATSD", "false")
                .env("LOG_LEVEL", "warn")
                .env("RUNTIME_ROOT", dir.path())
                .env("RUNTIME_SUBDIRECTORY", "ratelimit")
                .env("RUNTIME_WATCH_ROOT", "false")
                .env("REDIS_SOCKET_TYPE", "tcp")
                .env("REDIS_TYPE", "single")
                .env("REDIS_URL", redis_addr)
                .env("HOST", "127.0.0.1")
                .env("GRPC_HOST", "127.0.0.1")
                .env("DEBUG_HOST", "127.0.0.1")
                .env("PORT", free_port().to_string())
                .env("DEBUG_PORT", free_port().to_string())
                .env("GRPC_PORT", port.to_string());
            c
        }
    };
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .with_context(|| format!("start {}", service.name()))?;
    wait_listening(&addr, &mut child, &log).with_context(|| service.name())?;
    Ok(Running {
        child,
        addr,
        _dir: dir,
    })
}

/// A process's counters: CPU ticks, write syscalls, context switches (all threads), RSS.
#[derive(Debug, Clone, Copy)]
struct Counters {
    ticks: u64,
    writes: u64,
    switches: u64,
    rss_kib: u64,
}

fn counters(pid: u32) -> anyhow::Result<Counters> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces), from field 3 on.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let mut switches = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))?.flatten() {
        if let Ok(s) = std::fs::read_to_string(task.path().join("status")) {
            switches +=
                field(&s, "voluntary_ctxt_switches:") + field(&s, "nonvoluntary_ctxt_switches:");
        }
    }
    Ok(Counters {
        ticks,
        writes: field(&io, "syscw:"),
        switches,
        rss_kib: field(&status, "VmRSS:"),
    })
}

/// Redis's own CPU seconds (user + system) and the commands `service` sent it.
async fn redis_counters(redis: &Standalone, service: Service) -> anyhow::Result<(f64, u64)> {
    let client = redis::Client::open(redis.url())?;
    let mut c = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO").arg("cpu").query_async(&mut c).await?;
    let cpu: f64 = info
        .lines()
        .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
        .filter_map(|l| {
            l.split_once(':')
                .and_then(|(_, v)| v.trim().parse::<f64>().ok())
        })
        .sum();
    let sent = sidecars::commands_served(&[redis.port], |name| service.sent(name)).await?;
    Ok((cpu, sent))
}

/// One measured figure set.
#[derive(Debug, Clone, Copy)]
struct Figures {
    cpu_us: f64,
    writes: f64,
    switches: f64,
    rps: f64,
    p50: f64,
    p99: f64,
    rss_mib: f64,
    redis_calls: Option<f64>,
    redis_cpu_us: Option<f64>,
    errors: u64,
}

async fn measure(
    args: &Args,
    service: Service,
    running: &Running,
    redis: Option<&Standalone>,
    data: &str,
    tick_hz: f64,
) -> anyhow::Result<Figures> {
    let pid = running.child.id();
    ghz::rls(&args.ghz, &running.addr, data, &["-c", "50", "-n", "20000"])?;
    let before = counters(pid)?;
    let redis_before = match redis {
        Some(r) => Some(redis_counters(r, service).await?),
        None => None,
    };
    let n = args.requests.to_string();
    let rate = args.rate.map(|r| r.to_string());
    let mut load = vec!["-c", "50", "-n", &n];
    if let Some(r) = &rate {
        load.extend(["-r", r]);
    }
    let run = ghz::rls(&args.ghz, &running.addr, data, &load)?;
    let after = counters(pid)?;
    let per = |d: u64| d as f64 / args.requests as f64;
    let (redis_calls, redis_cpu_us) = match (redis, redis_before) {
        (Some(r), Some((cpu0, sent0))) => {
            let (cpu1, sent1) = redis_counters(r, service).await?;
            (
                Some(per(sent1.saturating_sub(sent0))),
                Some((cpu1 - cpu0) * 1e6 / args.requests as f64),
            )
        }
        _ => (None, None),
    };
    Ok(Figures {
        cpu_us: (after.ticks - before.ticks) as f64 / tick_hz * 1e6 / args.requests as f64,
        writes: per(after.writes.saturating_sub(before.writes)),
        switches: per(after.switches.saturating_sub(before.switches)),
        rps: run.rps,
        p50: run.p50,
        p99: run.p99,
        rss_mib: after.rss_kib as f64 / 1024.0,
        redis_calls,
        redis_cpu_us,
        errors: run.errors,
    })
}

/// `lo–hi` of `values` with `digits` decimals (one value if they agree at that precision).
fn range(values: &[f64], digits: usize) -> String {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (a, b) = (format!("{lo:.digits$}"), format!("{hi:.digits$}"));
    if a == b { a } else { format!("{a}–{b}") }
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tick_hz: f64 = String::from_utf8(Command::new("getconf").arg("CLK_TCK").output()?.stdout)?
        .trim()
        .parse()?;
    let services: Vec<Service> = Service::ALL
        .into_iter()
        .filter(|s| {
            args.only
                .as_ref()
                .is_none_or(|o| o.split(',').any(|o| s.name().contains(o)))
        })
        .filter(|s| match s {
            Service::Limitador | Service::LimitadorRedis | Service::LimitadorCached => {
                args.limitador.is_some()
            }
            Service::Ratelimit => Path::new(&ghz::home(&args.ratelimit)).exists(),
            _ => true,
        })
        .collect();
    let mut seen: BTreeMap<(usize, usize), Vec<Figures>> = BTreeMap::new();
    for round in 1..=args.rounds {
        for (i, &service) in services.iter().enumerate() {
            let redis = if service.on_redis() {
                Some(Standalone::start().await)
            } else {
                None
            };
            let running = start(&args, service, redis.as_ref())?;
            for (j, (load, data)) in LOADS.iter().enumerate() {
                let f = measure(&args, service, &running, redis.as_ref(), data, tick_hz).await?;
                println!(
                    "round {round}: {} / {load}: {:.2} µs CPU, {:.3} writes, {:.3} switches, {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, RSS {:.1} MiB, Redis {:?} calls {:?} µs, {} errors",
                    service.name(),
                    f.cpu_us,
                    f.writes,
                    f.switches,
                    f.rps,
                    f.p50,
                    f.p99,
                    f.rss_mib,
                    f.redis_calls,
                    f.redis_cpu_us,
                    f.errors
                );
                seen.entry((i, j)).or_default().push(f);
            }
        }
    }
    let floor: Vec<Option<f64>> = (0..LOADS.len())
        .map(|j| {
            services
                .iter()
                .position(|s| *s == Service::Noop)
                .and_then(|i| seen.get(&(i, j)))
                .map(|f| median(&f.iter().map(|x| x.cpu_us).collect::<Vec<_>>()))
        })
        .collect();
    println!("cpu-peers-table:");
    for ((i, j), figures) in &seen {
        let col = |f: fn(&Figures) -> f64, d| range(&figures.iter().map(f).collect::<Vec<_>>(), d);
        let opt = |f: fn(&Figures) -> Option<f64>, d| {
            let v: Vec<f64> = figures.iter().filter_map(f).collect();
            if v.is_empty() {
                "–".to_string()
            } else {
                range(&v, d)
            }
        };
        let cpu = median(&figures.iter().map(|f| f.cpu_us).collect::<Vec<_>>());
        let ratio = floor[*j].map_or(String::new(), |n| format!(" ({:.2}×)", cpu / n));
        let errors: u64 = figures.iter().map(|f| f.errors).sum();
        println!(
            "| {} | {} | {}{ratio} | {} | {} | {} | {} / {} | {} | {} | {} | {errors} |",
            services[*i].name(),
            LOADS[*j].0,
            col(|f| f.cpu_us, 1),
            col(|f| f.writes, 2),
            col(|f| f.switches, 2),
            col(|f| f.rps, 0),
            col(|f| f.p50, 2),
            col(|f| f.p99, 2),
            col(|f| f.rss_mib, 1),
            opt(|f| f.redis_calls, 3),
            opt(|f| f.redis_cpu_us, 1),
        );
    }
    Ok(())
}
