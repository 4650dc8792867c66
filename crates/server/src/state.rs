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

use crate::admission::Admission;
use crate::limits::{Limits, TableScans};
use crate::metrics::ServerMetrics;

/// The parts of the configuration handlers read on each request, swapped whole on reload.
#[derive(Debug)]
pub struct Runtime {
    /// How ext_authz requests become descriptors.
    pub authz: Option<AuthzPlan>,
    /// Where the HTTP check reads the request its proxy forwards (`check:`).
    pub check: Option<sluice_core::check::CheckPlan>,
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

/// What a refused read is told when no read token is set.
const NOT_FROM_LOOPBACK: &str = "quota and config reads show descriptor values: without a read token (admin.read_token_env or read_token_file) they are served only on loopback or to a client certificate";

/// What a refused read is told when a read token is set.
const NEEDS_READ_TOKEN: &str = "quota and config reads need `authorization: Bearer <read token>` (admin.read_token_env or read_token_file)";

/// Who is reading, as far as the connection tells.
#[derive(Debug, Clone, Copy, Default)]
pub struct Caller {
    /// The peer address is a loopback address (127.0.0.0/8, ::1, or ::ffff:127.x.y.z).
    pub loopback: bool,
    /// The connection presented a client certificate the server verified (mutual TLS).
    pub client_certificate: bool,
}

impl Caller {
    /// A caller at `peer` (`None`: unknown, e.g. a Unix socket in tests: not loopback).
    pub fn at(peer: Option<std::net::SocketAddr>, client_certificate: bool) -> Self {
        Self {
            loopback: peer.is_some_and(|p| p.ip().to_canonical().is_loopback()),
            client_certificate,
        }
    }
}

impl Runtime {
    /// Whether a caller may read quotas and config (reads that show descriptor values): with a
    /// read token set, whoever presents `Bearer <read token>` or `Bearer <reset token>` in
    /// `authorization` (the header's value); without one, only callers on this host's loopback
    /// (`from.loopback`: the pod's own containers, `kubectl exec` or `port-forward`) or
    /// authenticated by a client certificate (`from.client_certificate`). So a default install
    /// shows no descriptor value beyond the pod, whatever address its ports are bound to.
    pub fn may_read(&self, authorization: Option<&str>, from: Caller) -> Result<(), &'static str> {
        let Some(read) = &self.read_token else {
            return if from.loopback || from.client_certificate {
                Ok(())
            } else {
                Err(NOT_FROM_LOOPBACK)
            };
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
        if by_read | by_reset {
            Ok(())
        } else {
            Err(NEEDS_READ_TOKEN)
        }
    }

    /// The runtime part of a loaded config.
    pub fn of(config: &Config) -> Self {
        Self {
            authz: config.authz.clone(),
            check: config.check.clone(),
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
    /// Sampled logs of denials (a line a second per rule, values as digests).
    pub denial_log: crate::denials::DenialLog,
    /// Background tasks.
    pub background: Background,
    /// Bounds on connections, streams, request bytes, long-lived calls and time.
    pub limits: Limits,
    /// What gRPC clients hold while their calls are open, under `limits`.
    pub admission: Arc<Admission>,
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
            admission: Admission::new(&Limits::default(), &metrics.refused),
            metrics,
            registry,
            draining: AtomicBool::new(false),
            shadow_log: crate::shadow::ShadowLog::default(),
            denial_log: crate::denials::DenialLog::default(),
            background: Background::default(),
            limits: Limits::default(),
            scans: Arc::default(),
            drain: CancellationToken::new(),
            rlqs: crate::assignments::Streams::default(),
        }
    }

    /// The same state with other limits.
    pub fn with_limits(self, limits: Limits) -> Self {
        Self {
            admission: Admission::new(&limits, &self.metrics.refused),
            limits,
            ..self
        }
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

#[cfg(test)]
mod tests {
    use super::{Caller, NOT_FROM_LOOPBACK, Runtime};

    fn open_runtime() -> Runtime {
        Runtime {
            authz: None,
            check: None,
            response: Default::default(),
            version: String::new(),
            shadow_mode: false,
            reset_token: None,
            read_token: None,
        }
    }

    #[test]
    fn loopback_is_every_spelling_of_it_and_nothing_else() {
        let at = |a: &str| Caller::at(Some(a.parse().expect("address")), false).loopback;
        assert!(at("127.0.0.1:9"));
        assert!(at("127.3.4.5:9"));
        assert!(at("[::1]:9"));
        assert!(at("[::ffff:127.0.0.1]:9"), "IPv4-mapped loopback");
        assert!(!at("10.1.2.3:9"));
        assert!(!at("[::ffff:10.1.2.3]:9"));
        assert!(!at("0.0.0.0:9"));
        assert!(!at("[fe80::1]:9"));
        assert!(!Caller::at(None, false).loopback, "unknown is not loopback");
    }

    #[test]
    fn without_a_read_token_only_loopback_or_a_client_certificate_reads() {
        let runtime = open_runtime();
        let beyond = Caller::at(Some("10.1.2.3:5".parse().expect("address")), false);
        let local = Caller::at(Some("127.0.0.1:5".parse().expect("address")), false);
        let certified = Caller::at(Some("10.1.2.3:5".parse().expect("address")), true);
        assert_eq!(runtime.may_read(None, beyond), Err(NOT_FROM_LOOPBACK));
        assert_eq!(
            runtime.may_read(Some("Bearer anything-at-all-here"), beyond),
            Err(NOT_FROM_LOOPBACK),
            "no token is configured, so none opens it"
        );
        assert_eq!(runtime.may_read(None, local), Ok(()));
        assert_eq!(runtime.may_read(None, certified), Ok(()));
    }
}
