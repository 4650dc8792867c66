//! Wiring: gRPC (RLS, ext_authz, RLQS, health, reflection) and admin HTTP, with graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sluice_proto::envoy::auth::authorization_server::AuthorizationServer;
use sluice_proto::envoy::ratelimit::rate_limit_service_server::RateLimitServiceServer;
use sluice_proto::envoy::rlqs::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use sluice_proto::sluice::v1::holds_server::HoldsServer;
use sluice_proto::sluice::v1::quota_server::QuotaServer;
use sluice_proto::sluice::v1::usage_server::UsageServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;

use crate::authz::Authz;
use crate::grpc::GrpcSettings;
use crate::holds::HoldsService;
use crate::incoming::CappedIncoming;
use crate::quota::QuotaService;
use crate::reload::{ReloadMetrics, ReloadOptions};
use crate::rlqs::RlqsService;
use crate::rls::Rls;
use crate::state::AppState;
use crate::tls::ServerTls;
use crate::usage::UsageService;

/// The gRPC services sluice serves (and advertises by reflection).
pub const SERVICES: &[&str] = &[
    "envoy.service.ratelimit.v3.RateLimitService",
    "envoy.service.auth.v3.Authorization",
    "envoy.service.rate_limit_quota.v3.RateLimitQuotaService",
    "sluice.v1.Quota",
    "sluice.v1.Usage",
    "sluice.v1.Holds",
    "grpc.health.v1.Health",
];

/// The reflection services, advertised alongside [`SERVICES`].
const REFLECTION: &[&str] = &[
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// How serving behaves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// After shutdown begins, how long to keep answering new requests while reporting
    /// NOT_SERVING, so callers (Envoy, load balancers) move away before connections close.
    pub drain_delay: Duration,
    /// How long in-flight requests may take to finish once sluice stops accepting.
    pub shutdown_grace: Duration,
    /// Live reload of the config, if wanted.
    pub reload: Option<(ReloadOptions, ReloadMetrics)>,
    /// TLS (and mutual TLS) on the gRPC port ([`crate::tls`]).
    pub tls: Option<Arc<ServerTls>>,
    /// How often the TLS files are read again to follow a rotation (zero: never).
    pub tls_reload_interval: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            drain_delay: Duration::ZERO,
            shutdown_grace: Duration::from_secs(10),
            reload: None,
            tls: None,
            tls_reload_interval: Duration::ZERO,
        }
    }
}

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The reflection service could not be built from the descriptor sets.
    #[error("gRPC reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}

/// Serves gRPC on `grpc` and admin HTTP on `admin` until `shutdown` resolves, then: reports
/// NOT_SERVING while still answering for `drain_delay`, stops accepting, lets in-flight requests
/// finish (up to `shutdown_grace`), returns every lease to the global store, and returns.
pub async fn serve(
    state: Arc<AppState>,
    grpc: TcpListener,
    admin: TcpListener,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    serve_with_check(state, grpc, admin, None, options, shutdown).await
}

/// [`serve`], and the HTTP check (forward auth, [`crate::forward`]) on `check` if given.
pub async fn serve_with_check(
    state: Arc<AppState>,
    grpc: TcpListener,
    admin: TcpListener,
    check: Option<TcpListener>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    for service in SERVICES.iter().chain([&""]) {
        health
            .set_service_status(*service, ServingStatus::Serving)
            .await;
    }
    let mut reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(sluice_proto::ENVOY_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(sluice_proto::SLUICE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET);
    let mut reflection_alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(sluice_proto::ENVOY_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(sluice_proto::SLUICE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET);
    for service in SERVICES.iter().chain(REFLECTION) {
        reflection = reflection.with_service_name(*service);
        reflection_alpha = reflection_alpha.with_service_name(*service);
    }

    // Read from the admission in force when scraped; a state served twice registered it once.
    match crate::admission::Gauges::new(Arc::clone(&state.admission)) {
        Ok(gauges) => match state.registry.register(Box::new(gauges)) {
            Ok(()) | Err(prometheus::Error::AlreadyReg) => {}
            Err(e) => tracing::warn!(error = %e, "admission gauges not registered"),
        },
        Err(e) => tracing::warn!(error = %e, "admission gauges not created"),
    }
    let stop_grpc = CancellationToken::new();
    let stop_maintenance = CancellationToken::new();
    let background = state.background.clone();
    background.tasks.spawn(crate::admin::run(
        admin,
        Arc::clone(&state),
        background.stop.clone(),
    ));
    if let Some(check) = check {
        background.tasks.spawn(crate::forward::run(
            check,
            Arc::clone(&state),
            background.stop.clone(),
        ));
    }
    if let Some((opts, metrics)) = options.reload.clone() {
        background.tasks.spawn(crate::reload::watch(
            Arc::clone(&state),
            opts,
            metrics,
            background.stop.clone(),
        ));
    }
    if let Some(tls) = &options.tls
        && !options.tls_reload_interval.is_zero()
    {
        background
            .tasks
            .spawn(Arc::clone(tls).watch(options.tls_reload_interval, background.stop.clone()));
    }
    let maintenance = background.tasks.spawn(
        Arc::clone(&state.engine).maintain_until(stop_maintenance.clone().cancelled_owned()),
    );

    let limits = &state.limits;
    let mut routes = tonic::service::Routes::builder();
    routes
        .add_service(health_service)
        .add_service(reflection.build_v1()?)
        .add_service(reflection_alpha.build_v1alpha()?)
        .add_service(RateLimitServiceServer::new(Rls::new(Arc::clone(&state))))
        .add_service(AuthorizationServer::new(Authz::new(Arc::clone(&state))))
        .add_service(RateLimitQuotaServiceServer::new(RlqsService::new(
            Arc::clone(&state),
        )))
        .add_service(QuotaServer::new(QuotaService::new(Arc::clone(&state))))
        .add_service(UsageServer::new(UsageService::new(Arc::clone(&state))))
        .add_service(HoldsServer::new(HoldsService::new(Arc::clone(&state))));
    let settings = GrpcSettings {
        preface: Some((
            limits.preface_timeout,
            state.metrics.refusals("grpc_preface_timeout"),
        )),
        shutdown_grace: options.shutdown_grace,
        admission: Arc::clone(&state.admission),
        ..GrpcSettings::new(limits, options.tls.clone())
    };
    // TCP_NODELAY and keepalive on every accepted connection (without NODELAY: 1.8 k req/s
    // instead of tens of thousands), and at most `max_connections` open.
    let incoming = CappedIncoming::new(
        grpc,
        (limits.max_connections, limits.max_connections_per_peer),
        limits.tcp_keepalive,
        state.metrics.refusals("grpc_connections_per_peer"),
    );
    let grpc_server = crate::grpc::serve(
        incoming,
        routes.routes().prepare(),
        settings,
        stop_grpc.clone(),
    );
    tokio::pin!(grpc_server);

    let result = tokio::select! {
        () = &mut grpc_server => Ok(()),
        () = shutdown => {
            tracing::info!("shutting down: reporting NOT_SERVING and draining");
            state.start_draining();
            for service in SERVICES.iter().chain([&""]) {
                health.set_service_status(*service, ServingStatus::NotServing).await;
            }
            // Keep answering while callers notice NOT_SERVING; the server may also end on its own.
            let _ = tokio::time::timeout(options.drain_delay, &mut grpc_server).await;
            stop_grpc.cancel();
            // Each connection closes by itself within the grace (`GrpcSettings::shutdown_grace`),
            // cutting streams that outlive it; this wait only bounds a server that would not.
            let started = tokio::time::Instant::now();
            let backstop = options.shutdown_grace + Duration::from_secs(1);
            if tokio::time::timeout(backstop, &mut grpc_server).await.is_err() {
                tracing::warn!(grace = ?options.shutdown_grace, "gRPC connections outlived the grace period");
            } else if started.elapsed() >= options.shutdown_grace {
                tracing::warn!(grace = ?options.shutdown_grace, "in-flight requests outlived the grace period");
            }
            Ok(())
        }
    };
    // gRPC answers no more: the engine stops its background refills, waits for those in flight
    // and hands every lease back; then every other background task ends.
    stop_maintenance.cancel();
    if let Err(e) = maintenance.await {
        tracing::warn!(error = %e, "maintenance task ended abnormally");
    }
    background.stop.cancel();
    background.tasks.close();
    background.tasks.wait().await;
    tracing::info!("stopped");
    result
}
