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
    #[arg(long, env = "SLUICE_CONFIG")]
    pub config: PathBuf,
    /// gRPC address (RLS, ext_authz, health, reflection).
    #[arg(long, env = "SLUICE_GRPC_ADDR", default_value = "0.0.0.0:8081")]
    pub grpc_addr: SocketAddr,
    /// Admin HTTP address (/metrics, /healthz, /readyz).
    #[arg(long, env = "SLUICE_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    pub admin_addr: SocketAddr,
    /// How long in-flight requests may take to finish after SIGTERM (e.g. 10s, 500ms).
    #[arg(long, env = "SLUICE_SHUTDOWN_GRACE", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// How often to check the config files for changes (e.g. 1s); `0s` turns live reload off.
    #[arg(long, env = "SLUICE_RELOAD_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub reload_interval: Duration,
    /// Worker threads (default: one per core).
    #[arg(long, env = "SLUICE_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    s.parse::<sluice_core::config::HumanDuration>().map(|d| d.0)
}
