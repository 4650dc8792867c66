//! `sluice serve`: configuration first, then ports, then serving until a signal.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use prometheus::Registry;
use sluice_core::{ConfigError, SystemClock};
use sluice_engine::{Engine, EngineMetrics, EngineSettings, GlobalStore, MemoryStore};
use sluice_redis::{RedisMetrics, RedisStore};
use sluice_server::metrics::ServerMetrics;
use sluice_server::reload::{ReloadMetrics, ReloadOptions};
use sluice_server::{AppState, Runtime, ServeOptions};

use crate::cli::ServeArgs;
use crate::reference_env::FromEnv;

/// Why `serve` stopped with an error.
#[derive(Debug)]
pub enum RunError {
    /// The configuration is invalid (exit 64).
    Config(ConfigError),
    /// Anything else: ports, runtime.
    Other(anyhow::Error),
}

impl From<anyhow::Error> for RunError {
    fn from(e: anyhow::Error) -> Self {
        RunError::Other(e)
    }
}

/// Where the configuration comes from.
pub enum Source {
    /// `--config`: a file or directory.
    File(PathBuf),
    /// No `--config`: envoyproxy/ratelimit's environment ([`crate::reference_env`]).
    Environment(FromEnv),
}

/// Loads and validates the config before any port is bound, then serves until SIGTERM/SIGINT.
pub fn serve(args: ServeArgs, source: Source) -> Result<(), RunError> {
    type Load = fn(&Path) -> Result<sluice_core::config::Config, ConfigError>;
    let (config, watched, load, grpc_addr, admin_addr): (_, PathBuf, Load, _, _) = match source {
        Source::File(path) => {
            let load: Load = match args.check_addr {
                Some(_) => crate::config::load_for_check,
                None => crate::config::load,
            };
            let config = load(&path).map_err(RunError::Config)?;
            let grpc = args.grpc_addr.unwrap_or(([127, 0, 0, 1], 8081).into());
            let admin = args.admin_addr.unwrap_or(([0, 0, 0, 0], 8080).into());
            (config, path, load, grpc, admin)
        }
        Source::Environment(from) => {
            if args.check_addr.is_some() {
                return Err(RunError::Other(anyhow::anyhow!(
                    "--check-addr needs --config: the HTTP check reads a `check:` section, which envoyproxy/ratelimit's environment has no variable for"
                )));
            }
            for (variable, instead) in &from.notes {
                tracing::warn!(
                    variable,
                    instead,
                    "an envoyproxy/ratelimit variable sluice does not act on"
                );
            }
            let config = crate::config::load_env(&from).map_err(RunError::Config)?;
            let grpc = args.grpc_addr.unwrap_or(from.grpc_addr);
            let admin = args.admin_addr.unwrap_or(from.admin_addr);
            let load: Load = crate::config::reload_env;
            (config, from.dir, load, grpc, admin)
        }
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(n) = args.worker_threads {
        runtime.worker_threads(usize::from(n));
    }
    let runtime = runtime.build().context("starting the async runtime")?;
    runtime.block_on(async move {
        let shutdown = shutdown_signal()?;
        let registry = Registry::new();
        let clock = Arc::new(SystemClock::new());
        let (store, redis): (Arc<dyn GlobalStore>, Option<Arc<RedisStore>>) = match &config.redis {
            None => (
                MemoryStore::with_max_keys(SystemClock::new(), config.engine.max_keys),
                None,
            ),
            Some(settings) => {
                let metrics =
                    RedisMetrics::register(&registry).context("registering Redis metrics")?;
                let redis =
                    RedisStore::start(settings.clone(), metrics).context("configuring Redis")?;
                (redis.clone(), Some(redis))
            }
        };
        let store_name = store.name();
        let engine_metrics =
            EngineMetrics::register(&registry).context("registering engine metrics")?;
        let server_metrics =
            ServerMetrics::register(&registry).context("registering server metrics")?;
        let rules_count = config.rules.rules().len();
        let tls_mode = match &config.tls {
            None => "off",
            Some(t) if t.client_ca_pem.is_some() => "mutual",
            Some(_) => "on",
        };
        let reload = if args.reload_interval.is_zero() {
            None
        } else {
            let metrics =
                ReloadMetrics::register(&registry).context("registering reload metrics")?;
            Some((
                ReloadOptions::for_config(&watched, &config, args.reload_interval)
                    .loading_with(load),
                metrics,
            ))
        };
        let runtime_config = Runtime::of(&config);
        let engine = Arc::new(Engine::new(
            config.rules,
            store,
            clock,
            EngineSettings::from(&config.engine),
            engine_metrics,
        ));
        let state = Arc::new(AppState::new(
            engine,
            runtime_config,
            server_metrics,
            registry,
        ));
        let grpc = tokio::net::TcpListener::bind(grpc_addr)
            .await
            .with_context(|| format!("binding gRPC on {grpc_addr}"))?;
        let admin = tokio::net::TcpListener::bind(admin_addr)
            .await
            .with_context(|| format!("binding admin HTTP on {admin_addr}"))?;
        let check = match args.check_addr {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding the HTTP check on {addr}"))?,
            ),
            None => None,
        };
        let check_at = match &check {
            Some(l) => l.local_addr().context("HTTP check address")?.to_string(),
            None => "off".to_string(),
        };
        tracing::info!(
            check = %check_at,
            grpc = %grpc.local_addr().context("gRPC address")?,
            admin = %admin.local_addr().context("admin address")?,
            config = %watched.display(),
            version = %config.version,
            rules = rules_count,
            store = store_name,
            tls = tls_mode,
            "sluice serving"
        );
        let tls = config
            .tls
            .as_ref()
            .map(|t| {
                sluice_server::grpc::tls_config(
                    t.cert_pem.as_ref(),
                    t.key_pem.as_ref(),
                    t.client_ca_pem.as_deref().map(AsRef::as_ref),
                )
            })
            .transpose()
            .context("the gRPC port's TLS")?;
        let options = ServeOptions {
            tls,
            drain_delay: args.drain_delay,
            shutdown_grace: args.shutdown_grace,
            reload,
        };
        sluice_server::serve_with_check(state, grpc, admin, check, options, shutdown)
            .await
            .context("serving")?;
        if let Some(redis) = redis {
            redis.shutdown().await;
        }
        Ok(())
    })
}

/// Registers SIGTERM and SIGINT handlers now (so a signal that arrives right after start-up is
/// not missed) and returns a future that resolves on either.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    })
}
