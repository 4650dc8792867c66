//! What every handler shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use prometheus::Registry;
use sluice_core::authz::AuthzPlan;
use sluice_core::config::{Config, ResponseSettings};
use sluice_engine::Engine;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::limits::{Limits, TableScans, Watchers};
use crate::metrics::ServerMetrics;

/// The parts of the configuration handlers read on each request, swapped whole on reload.
#[derive(Debug)]
pub struct Runtime {
    /// How ext_authz requests become descriptors.
    pub authz: Option<AuthzPlan>,
    /// Response options.
    pub response: ResponseSettings,
    /// The config version.
    pub version: String,
    /// Global dry run: every decision answers OK; would-deny is counted and logged (sampled).
    pub shadow_mode: bool,
    /// The bearer token `ResetQuota` requires; `None`: resets are disabled.
    pub reset_token: Option<sluice_core::config::load::ResetToken>,
    /// The bearer token the Quota read API and admin `/config`, `/quota` need; `None`: open.
    pub read_token: Option<sluice_core::config::load::ResetToken>,
}

impl Runtime {
    /// Whether `authorization` (the header's value) may read quotas: always if no read token is
    /// set; else with `Bearer <read token>` or `Bearer <reset token>`.
    pub fn may_read(&self, authorization: Option<&str>) -> bool {
        let Some(read) = &self.read_token else {
            return true;
        };
        let presented = authorization
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        // Both compared, so the time does not tell which one matched.
        let by_read = read.matches(presented);
        let by_reset = self
            .reset_token
            .as_ref()
            .is_some_and(|t| t.matches(presented));
        by_read | by_reset
    }

    /// The runtime part of a loaded config.
    pub fn of(config: &Config) -> Self {
        Self {
            authz: config.authz.clone(),
            response: config.response.clone(),
            version: config.version.clone(),
            shadow_mode: config.shadow_mode,
            reset_token: config.reset_token.clone(),
            read_token: config.read_token.clone(),
        }
    }
}

/// The server's background tasks (admin connections, config reload, quota watchers, engine
/// maintenance): every one is spawned on `tasks` and ends when `stop` is cancelled, so shutdown
/// knows when all of them are done.
#[derive(Debug, Clone, Default)]
pub struct Background {
    /// Tracks every task.
    pub tasks: TaskTracker,
    /// Cancelled at shutdown, once gRPC stopped answering.
    pub stop: CancellationToken,
}

/// Shared server state.
#[derive(Debug)]
pub struct AppState {
    /// The decision engine.
    pub engine: Arc<Engine>,
    /// Swappable runtime config (read lock-free on every request).
    pub runtime: ArcSwap<Runtime>,
    /// Request and decision metrics.
    pub metrics: ServerMetrics,
    /// The registry `/metrics` exposes.
    pub registry: Registry,
    /// Set when shutdown begins: `/readyz` and gRPC health report not serving.
    draining: AtomicBool,
    /// Sampling for would-deny logs.
    pub shadow_log: crate::shadow::ShadowLog,
    /// Background tasks.
    pub background: Background,
    /// Bounds on connections, streams, watchers and time.
    pub limits: Limits,
    /// Open `WatchQuota` streams.
    pub watchers: Arc<Watchers>,
    /// `ListQuotas` pages being listed.
    pub scans: Arc<TableScans>,
    /// Cancelled when shutdown begins: long-lived streams (RLQS) end and hand back what they
    /// leased.
    pub drain: CancellationToken,
    /// What RLQS streams share.
    pub rlqs: crate::assignments::Streams,
}

impl AppState {
    /// State over `engine`, exposing `registry`.
    pub fn new(
        engine: Arc<Engine>,
        runtime: Runtime,
        metrics: ServerMetrics,
        registry: Registry,
    ) -> Self {
        Self {
            engine,
            runtime: ArcSwap::from_pointee(runtime),
            metrics,
            registry,
            draining: AtomicBool::new(false),
            shadow_log: crate::shadow::ShadowLog::default(),
            background: Background::default(),
            limits: Limits::default(),
            watchers: Arc::default(),
            scans: Arc::default(),
            drain: CancellationToken::new(),
            rlqs: crate::assignments::Streams::default(),
        }
    }

    /// The same state with other limits.
    pub fn with_limits(self, limits: Limits) -> Self {
        Self { limits, ..self }
    }

    /// Marks the server as draining.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.drain.cancel();
    }

    /// Whether shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
}
