//! `sluice serve`: configuration first, then ports, then serving until a signal.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use prometheus::Registry;
use sluice_core::config::Config;
use sluice_core::{ConfigError, SystemClock};
use sluice_engine::{Engine, EngineMetrics, EngineSettings, GlobalStore, MemoryStore};
use sluice_redis::{RedisMetrics, RedisStore};
use sluice_server::metrics::ServerMetrics;
use sluice_server::reload::{ReloadMetrics, ReloadOptions};
use sluice_server::tls::ServerTls;
use sluice_server::{AppState, Runtime, ServeOptions};
use tokio::sync::mpsc;

use crate::cli::ServeArgs;
use crate::reference_env::{FromEnv, Limits};
use crate::xds::Push;

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
    Environment(Box<FromEnv>),
}

/// How the configuration in force changes while serving.
enum Live {
    /// Files polled every `--reload-interval` (none at `0s`), loaded with `load`.
    Files { watched: PathBuf, load: Load },
    /// Limits pushed over xDS, each loaded with the environment's settings.
    Pushed {
        from: Box<FromEnv>,
        pushes: mpsc::Receiver<Push>,
    },
}

type Load = fn(&Path) -> Result<Config, ConfigError>;

/// Loads and validates the config before any port is bound (with limits over xDS, waits for the
/// first push, unless FORCE_START_WITHOUT_INITIAL_CONFIG), then serves until SIGTERM/SIGINT.
pub fn serve(args: ServeArgs, source: Source) -> Result<(), RunError> {
    // The config, or (limits over xDS) what to load it from once the runtime runs.
    let (config, pushed, watched, grpc_addr, admin_addr) = match source {
        Source::File(path) => {
            let load: Load = match args.check_addr {
                Some(_) => crate::config::load_for_check,
                None => crate::config::load,
            };
            let config = load(&path).map_err(RunError::Config)?;
            let grpc = args.grpc_addr.unwrap_or(([127, 0, 0, 1], 8081).into());
            let admin = args.admin_addr.unwrap_or(([0, 0, 0, 0], 8080).into());
            (Some((config, load)), None, path, grpc, admin)
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
            let grpc = args.grpc_addr.unwrap_or(from.grpc_addr);
            let admin = args.admin_addr.unwrap_or(from.admin_addr);
            match from.limits.clone() {
                Limits::Files(dir) => {
                    let config = crate::config::load_env(&from, &dir).map_err(RunError::Config)?;
                    let load: Load = crate::config::reload_env;
                    (Some((config, load)), None, dir, grpc, admin)
                }
                Limits::Xds(xds) => {
                    let watched = PathBuf::from(format!("xds://{}", xds.server));
                    (None, Some((from, xds)), watched, grpc, admin)
                }
            }
        }
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(n) = args.worker_threads {
        runtime.worker_threads(usize::from(n));
    }
    let runtime = runtime.build().context("starting the async runtime")?;
    runtime.block_on(async move {
        let mut shutdown = Box::pin(shutdown_signal()?);
        let (config, live) = match (config, pushed) {
            (Some((config, load)), _) => (
                config,
                Live::Files {
                    watched: watched.clone(),
                    load,
                },
            ),
            (None, Some((from, xds))) => {
                let mut pushes = crate::xds::start(xds.clone());
                let config = if xds.force_start {
                    tracing::warn!(server = %xds.server, "serving with no limits until the first push over xDS (FORCE_START_WITHOUT_INITIAL_CONFIG)");
                    crate::config::load_pushed(&from, "domains: []\n", "none").map_err(RunError::Config)?
                } else {
                    tracing::info!(server = %xds.server, node = %xds.node_id, "waiting for the limits over xDS before serving");
                    tokio::select! {
                        config = first_push(&from, &mut pushes) => config?,
                        // Stopped before it served (a pod deleted while its management server
                        // is away): nothing to drain.
                        () = &mut shutdown => return Ok(()),
                    }
                };
                (config, Live::Pushed { from, pushes })
            }
            (None, None) => unreachable!("a config or an xDS source"),
        };
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
        // Reload series only where the config can change while serving (as before xDS).
        let reload_metrics = || ReloadMetrics::register(&registry).context("registering reload metrics");
        let (reload, pushed) = match live {
            Live::Files { .. } if args.reload_interval.is_zero() => (None, None),
            Live::Files { watched, load } => (
                Some((
                    ReloadOptions::for_config(&watched, &config, args.reload_interval)
                        .loading_with(load),
                    reload_metrics()?,
                )),
                None,
            ),
            Live::Pushed { from, pushes } => (None, Some((from, pushes, reload_metrics()?))),
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
        if let Some((from, pushes, metrics)) = pushed {
            tokio::spawn(apply_pushes(Arc::clone(&state), from, pushes, metrics));
        }
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
        let tls = (config.tls.as_ref())
            .map(ServerTls::new)
            .transpose()
            .context("the gRPC port's TLS")?;
        let options = ServeOptions {
            tls,
            // Certificates rotate whether or not the limits are reloaded from files (with xDS
            // they are not): read as often as a config file would be.
            tls_reload_interval: args.reload_interval,
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

/// Waits for the first push over xDS that loads, NACKing each one that does not.
async fn first_push(from: &FromEnv, pushes: &mut mpsc::Receiver<Push>) -> Result<Config, RunError> {
    loop {
        let Some(push) = pushes.recv().await else {
            return Err(RunError::Other(anyhow::anyhow!("the xDS client stopped")));
        };
        match crate::config::load_pushed(from, &push.domains, &push.version) {
            Ok(config) => {
                let _ = push.applied.send(Ok(()));
                return Ok(config);
            }
            Err(e) => {
                let _ = push.applied.send(Err(e.to_string()));
            }
        }
    }
}

/// Applies each later push as a reload applies a changed file: loaded and checked the same way,
/// swapped in atomically, or refused (NACKed) with the limits in force kept.
async fn apply_pushes(
    state: Arc<AppState>,
    from: Box<FromEnv>,
    mut pushes: mpsc::Receiver<Push>,
    metrics: ReloadMetrics,
) {
    metrics.in_force(&state);
    let from: Arc<FromEnv> = Arc::from(from);
    while let Some(Push {
        version,
        domains,
        applied,
    }) = pushes.recv().await
    {
        // Parsing and checking a push of up to the message limit (4 MiB) is work for a
        // blocking thread, not for a worker that serves decisions.
        let loading = {
            let (from, version) = (Arc::clone(&from), version.clone());
            tokio::task::spawn_blocking(move || {
                crate::config::load_pushed(&from, &domains, &version)
            })
        };
        let answer = match loading.await {
            Ok(Ok(config)) => {
                if config.rules.rules().is_empty() {
                    tracing::warn!(xds_version = %version, "the push over xDS holds no limits: every request is allowed until one that has some");
                }
                tracing::info!(xds_version = %version, "limits pushed over xDS");
                sluice_server::reload::apply(&state, config, &metrics);
                Ok(())
            }
            Ok(Err(e)) => {
                metrics.reloads.with_label_values(&["error"]).inc();
                Err(e.to_string())
            }
            Err(e) => {
                metrics.reloads.with_label_values(&["error"]).inc();
                Err(format!("the push could not be loaded: {e}"))
            }
        };
        let _ = applied.send(answer);
    }
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
