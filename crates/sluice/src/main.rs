//! `sluice`: the rate-limiting sidecar's binary.
//!
//! # Layout
//! - `cli`: the command line (clap).
//! - `run`: `sluice serve`: load config, bind ports, serve until SIGTERM/SIGINT.
//! - client commands against a running sluice, one module each: `quota` (`sluice quota …`),
//!   `rules` (`sluice rules`), `check` (`sluice check`), `report` (`sluice report`); what they
//!   share sits below them: `connect` (channel, read token, entries, status errors) and `output`
//!   (lines, tables, periods).
//! - `config`: loading and checking the config, the same for `serve` and `config check`.
//! - `reference_env`: envoyproxy/ratelimit's environment variables as a config (`serve`
//!   without `--config`, and the image's `/bin/ratelimit`); `xds`: the ADS client for the limits
//!   a management server pushes (`CONFIG_TYPE=GRPC_XDS_SOTW`).
//! - this file: parsing, logging, dispatch and exit codes.

mod check;
mod cli;
mod config;
mod connect;
mod hold;
mod output;
mod quota;
mod reference_env;
mod report;
mod rules;
mod run;
mod state;
mod watch;
mod xds;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, ConfigCommand};

/// mimalloc, not the system allocator: a decision's short-lived allocations (a request's
/// strings, HTTP/2 frames, the answer) made and freed on different threads cost glibc's malloc
/// ~25% of the CPU at 100 k keys (its arena locks and `malloc_consolidate`; perf, issue 29).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code for a configuration error (EX_USAGE in sysexits.h).
const EXIT_CONFIG: u8 = 64;

fn main() -> ExitCode {
    let cli = Cli::parse_from(arguments());
    // Without --config, envoyproxy/ratelimit's environment, which also says how to log.
    let from_env = match &cli.command {
        Command::Serve(args) if args.config.is_none() => {
            match reference_env::read(&|name| std::env::var(name).ok()) {
                Ok(from) => Some(from),
                Err(e) => {
                    eprintln_plain(&e.to_string());
                    return ExitCode::from(EXIT_CONFIG);
                }
            }
        }
        _ => None,
    };
    let json = matches!(cli.log_format, cli::LogFormat::Json)
        || from_env.as_ref().is_some_and(|f| f.json_logs);
    init_logging(json, from_env.as_ref().and_then(|f| f.log_filter));
    match cli.command {
        Command::Serve(args) => {
            let source = match (args.config.clone(), from_env) {
                (Some(path), _) => run::Source::File(path),
                (None, Some(from)) => run::Source::Environment(Box::new(from)),
                (None, None) => unreachable!("the environment is read without --config"),
            };
            serve(args, source)
        }
        Command::Quota { command } => client_command(quota::quota(command)),
        Command::Rules(target) => client_command(rules::rules(target)),
        Command::Check {
            target,
            descriptor,
            hits,
        } => client_command(check::check(target, descriptor, hits)),
        Command::Report {
            target,
            descriptor,
            tokens,
        } => client_command(report::report(target, descriptor, tokens)),
        Command::Hold { command } => client_command(hold::hold(command)),
        Command::Config {
            command: ConfigCommand::Check { path },
        } => match config::load(&path) {
            Ok(config) => {
                let rules = config.rules.rules().len();
                let domains = config.rules.domains().len();
                println_plain(&format!(
                    "{}: ok ({}, {}, version {})",
                    path.display(),
                    count(domains, "domain"),
                    count(rules, "rule"),
                    config.version
                ));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln_plain(&e.to_string());
                ExitCode::from(EXIT_CONFIG)
            }
        },
    }
}

/// `sluice serve`, and its exit code.
fn serve(args: cli::ServeArgs, source: run::Source) -> ExitCode {
    match run::serve(args, source) {
        Ok(()) => ExitCode::SUCCESS,
        Err(run::RunError::Config(e)) => {
            tracing::error!("invalid configuration: {e}");
            eprintln_plain(&e.to_string());
            ExitCode::from(EXIT_CONFIG)
        }
        Err(run::RunError::Other(e)) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The command line, with `ratelimit` (the image's `/bin/ratelimit`, where Envoy Gateway and
/// envoyproxy/ratelimit's own manifests start the reference, with no arguments) read as
/// `sluice serve`: without `--config`, serve reads the reference's environment.
fn arguments() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let invoked_as = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_os_string());
    if invoked_as.is_some_and(|n| n == "ratelimit") {
        args.splice(0..1, ["sluice".into(), "serve".into()]);
    }
    args
}

/// Runs a client command on a small runtime; errors print as one line and exit 1.
fn client_command(f: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln_plain(&format!("sluice: cannot start a runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(f) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln_plain(&format!("sluice: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr: `text` for people, `json` for log pipelines; the level comes from `SLUICE_LOG`
/// (or `RUST_LOG`), else `level` (envoyproxy/ratelimit's `LOG_LEVEL`), default `info`.
fn init_logging(json: bool, level: Option<&str>) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.unwrap_or("info")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// The CLI's own output (not logging).
#[allow(clippy::print_stdout)]
fn println_plain(line: &str) {
    println!("{line}");
}

/// The CLI's own error output (not logging).
#[allow(clippy::print_stderr)]
fn eprintln_plain(line: &str) {
    eprintln!("{line}");
}

/// "1 rule", "2 rules": the count and the noun, plural when it is not one.
fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}
