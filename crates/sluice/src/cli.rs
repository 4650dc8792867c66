//! The command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// sluice: a distributed rate-limiting sidecar for Envoy.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "SLUICE_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log formats.
#[derive(Debug, Clone, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the sidecar: Envoy's RLS and ext_authz over gRPC, admin HTTP.
    Serve(ServeArgs),
    /// Work with configuration files.
    Config {
        /// What to do with the configuration.
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Ask a running sluice about quotas (sluice.v1.Quota), without consuming any.
    Quota {
        /// What to ask.
        #[command(subcommand)]
        command: QuotaCommand,
    },
    /// List the rules a running sluice has loaded.
    Rules(Target),
    /// Send one ShouldRateLimit request (consumes `--hits` tokens) and print the answer.
    Check {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        descriptor: DescriptorArgs,
        /// Tokens the request costs.
        #[arg(long, default_value_t = 1)]
        hits: u32,
    },
    /// Report usage a request already had to a post-paid rule (sluice.v1.Usage/Report): charged
    /// in full, even into debt, and print the budget after it.
    Report {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        descriptor: DescriptorArgs,
        /// Tokens used.
        #[arg(long)]
        tokens: u64,
    },
    /// Take or give back a hold of a concurrency limit or reservation (sluice.v1.Holds), as
    /// Envoy's `sluice-hold` descriptors do.
    Hold {
        /// Acquire or release.
        #[command(subcommand)]
        command: HoldCommand,
    },
}

/// `sluice hold …`.
#[derive(Debug, Subcommand)]
pub enum HoldCommand {
    /// Take a slot of each concurrency limit (reserve on each reserving rule) the descriptor
    /// matches; prints the hold's token, or exits 1 if denied.
    Acquire {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        descriptor: DescriptorArgs,
        /// Reservations: the estimate (default: the rule's `reserve.default`).
        #[arg(long)]
        estimate: Option<u64>,
    },
    /// Give back what a token holds on the descriptor's keys (settle a reservation with
    /// `--used`).
    Release {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        descriptor: DescriptorArgs,
        /// The token `hold acquire` printed.
        #[arg(long)]
        token: String,
        /// Reservations and post-paid rules: the usage to settle or report.
        #[arg(long, default_value_t = 0)]
        used: u64,
    },
}

/// Which rules a listing covers (`quota list`, `quota top`); empty: all.
#[derive(Debug, Args)]
pub struct RuleFilter {
    /// Only this domain.
    #[arg(long, default_value = "")]
    pub domain: String,
    /// Only this rule (its label, as `sluice rules` shows).
    #[arg(long, default_value = "")]
    pub rule: String,
}

/// Where the running sluice is, and how to print.
#[derive(Debug, Args)]
pub struct Target {
    /// sluice's gRPC address.
    #[arg(long, env = "SLUICE_ADDR", default_value = "http://127.0.0.1:8081")]
    pub addr: String,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "table")]
    pub output: Output,
    /// CA certificate (PEM) to verify a TLS server with (`https://` addresses).
    #[arg(long, env = "SLUICE_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS.
    #[arg(long, env = "SLUICE_CERT_FILE", requires = "key_file")]
    pub cert_file: Option<PathBuf>,
    /// Client private key (PEM) for mutual TLS.
    #[arg(long, env = "SLUICE_KEY_FILE", requires = "cert_file")]
    pub key_file: Option<PathBuf>,
}

/// Output formats of client commands.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// JSON for scripts.
    Json,
}

/// One descriptor: a domain and `key=value` entries.
#[derive(Debug, Args)]
pub struct DescriptorArgs {
    /// The domain.
    #[arg(long)]
    pub domain: String,
    /// An entry `key=value` (repeat for nested descriptors, outermost first).
    #[arg(short = 'd', long = "descriptor", value_name = "KEY=VALUE", required = true, value_parser = parse_entry)]
    pub entries: Vec<(String, String)>,
}

/// `sluice quota …`.
#[derive(Debug, Subcommand)]
pub enum QuotaCommand {
    /// Peek at one descriptor's quota: matched rule, limit, global remaining, local lease.
    Get {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        descriptor: DescriptorArgs,
    },
    /// List the keys this instance tracks.
    List {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        rules: RuleFilter,
        /// Only values starting with this (`key=value|…`).
        #[arg(long, default_value = "")]
        prefix: String,
        /// Most keys to show.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Who is being limited: the descriptor values with the most denied hits over about the
    /// last minute, across every sidecar sharing the store, most first.
    Top {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        rules: RuleFilter,
        /// Most rows (1 to 1000).
        #[arg(short = 'n', long = "limit", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
    /// Refill one descriptor's global bucket (needs `admin.allow_reset` and the reset token).
    Reset {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        descriptor: DescriptorArgs,
        /// The environment variable holding the reset token.
        #[arg(long, default_value = "SLUICE_RESET_TOKEN")]
        token_env: String,
    },
    /// List the RLQS buckets this instance assigns, with each Envoy's share and usage.
    Assignments {
        #[command(flatten)]
        target: Target,
        /// Only this domain.
        #[arg(long, default_value = "")]
        domain: String,
    },
    /// Print a snapshot of one descriptor's quota every interval until interrupted.
    Watch {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        descriptor: DescriptorArgs,
        /// Time between snapshots.
        #[arg(long, default_value = "1s", value_parser = parse_duration)]
        interval: Duration,
    },
}

fn parse_entry(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("'{s}' is not key=value"))
}

/// `sluice config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a config file or directory: exit 0, or exit 64 with `file:line: message`.
    Check {
        /// A sluice config file, an envoyproxy/ratelimit domain file, or a directory of them.
        path: PathBuf,
    },
}

/// `sluice serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A sluice config file, an envoyproxy/ratelimit domain file, or a directory of them.
    /// Without it, sluice reads envoyproxy/ratelimit's environment variables (RUNTIME_ROOT,
    /// REDIS_URL, GRPC_PORT, …) as the reference does: docs/migrating.md.
    #[arg(long, env = "SLUICE_CONFIG")]
    pub config: Option<PathBuf>,
    /// gRPC address (RLS, ext_authz, RLQS, usage reports, the Quota API, health, reflection).
    /// Loopback by default (127.0.0.1:8081): Envoy beside sluice reaches it there, and nothing
    /// else can spend quota; a pod or container that must answer on its own address (kubelet's
    /// gRPC probes, Envoy in another container) says `0.0.0.0:8081`. Without --config:
    /// GRPC_HOST:GRPC_PORT (0.0.0.0:8081).
    #[arg(long, env = "SLUICE_GRPC_ADDR")]
    pub grpc_addr: Option<SocketAddr>,
    /// Admin HTTP address (/metrics, /healthz, /readyz for Prometheus and kubelet, and
    /// envoyproxy/ratelimit's /healthcheck; /config and /quota, which show descriptor values,
    /// answer beyond loopback only with a read token). Default 0.0.0.0:8080; without --config:
    /// HOST:PORT (0.0.0.0:8080).
    #[arg(long, env = "SLUICE_ADMIN_ADDR")]
    pub admin_addr: Option<SocketAddr>,
    /// The HTTP check for proxies that are not Envoy (nginx `auth_request`, Caddy
    /// `forward_auth`, Traefik `ForwardAuth`): decided as ext_authz from the `authz:` section,
    /// the request read from the headers the config's `check:` section names (required with
    /// this flag). Off unless given (e.g. 127.0.0.1:8082).
    #[arg(long, env = "SLUICE_CHECK_ADDR")]
    pub check_addr: Option<SocketAddr>,
    /// After SIGTERM, how long to keep answering while health reports NOT_SERVING (e.g. 2s).
    #[arg(long, env = "SLUICE_DRAIN_DELAY", default_value = "2s", value_parser = parse_duration)]
    pub drain_delay: Duration,
    /// Then, how long in-flight requests may take to finish (e.g. 10s, 500ms).
    #[arg(long, env = "SLUICE_SHUTDOWN_GRACE", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// How often to check the config files for changes (e.g. 1s); `0s` turns live reload off.
    #[arg(long, env = "SLUICE_RELOAD_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub reload_interval: Duration,
    /// Worker threads, 1 to 1024 (default: one per CPU the process may use; on Linux that
    /// counts a cgroup CPU limit, such as a pod's).
    #[arg(long, env = "SLUICE_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub worker_threads: Option<u16>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    s.parse::<sluice_core::config::HumanDuration>().map(|d| d.0)
}
