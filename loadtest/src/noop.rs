//! The P2 baseline: a gRPC server on the same stack as sluice (tonic's services and reflection,
//! served by sluice's gRPC server, `sluice_server::grpc`, each connection in one task, and the
//! same allocator) whose `ShouldRateLimit` and `Check` answer OK without deciding anything;
//! with `--tonic-server`, on tonic's own server instead (the floor before issue 29, for
//! comparison); with `--http-addr`, also
//! the P15 baseline: an HTTP/1.1 forward-auth check on the same stack as sluice's
//! (`--check-addr`: hyper's http1 server, one task per connection) answering 200 to anything.
//!
//! `noop-rls --addr 127.0.0.1:18181 [--http-addr 127.0.0.1:18182] [--tonic-server]`

use std::net::SocketAddr;

use clap::Parser;
use sluice_proto::envoy::auth::authorization_server::{Authorization, AuthorizationServer};
use sluice_proto::envoy::auth::{CheckRequest, CheckResponse};
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use sluice_proto::envoy::ratelimit::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

/// A no-op RLS and ext_authz server.
#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:18181")]
    addr: SocketAddr,
    /// Address of the HTTP check (none unless given).
    #[arg(long)]
    http_addr: Option<SocketAddr>,
    /// Serve gRPC with tonic's own server (a task per stream), not sluice's.
    #[arg(long)]
    tonic_server: bool,
}

/// As sluice's binary: the allocator is part of the stack being compared.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Noop;

#[tonic::async_trait]
impl RateLimitService for Noop {
    async fn should_rate_limit(
        &self,
        r: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let n = r.into_inner().descriptors.len();
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![Default::default(); n],
            ..RateLimitResponse::default()
        }))
    }
}

#[tonic::async_trait]
impl Authorization for Noop {
    async fn check(&self, _: Request<CheckRequest>) -> Result<Response<CheckResponse>, Status> {
        Ok(Response::new(CheckResponse {
            status: Some(sluice_proto::envoy::rpc::Status::default()),
            ..CheckResponse::default()
        }))
    }
}

/// Answers every HTTP/1.1 request on `addr` with an empty 200, as sluice's check port serves
/// its connections (hyper http1, nodelay, a header timeout).
async fn http_check(addr: SocketAddr) -> anyhow::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let listener = tokio::net::TcpListener::bind(addr).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(async move {
            let ok = hyper::service::service_fn(|_req| async {
                Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                    bytes::Bytes::new(),
                )))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(5))
                .serve_connection(TokioIo::new(stream), ok)
                .await;
        });
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(sluice_proto::ENVOY_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(sluice_proto::ENVOY_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let grpc = async {
        if args.tonic_server {
            return tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .add_service(reflection)
                .add_service(reflection_alpha)
                .add_service(RateLimitServiceServer::new(Noop))
                .add_service(AuthorizationServer::new(Noop))
                .serve(args.addr)
                .await
                .map_err(anyhow::Error::from);
        }
        let mut routes = tonic::service::Routes::builder();
        routes
            .add_service(reflection)
            .add_service(reflection_alpha)
            .add_service(RateLimitServiceServer::new(Noop))
            .add_service(AuthorizationServer::new(Noop));
        let listener = tokio::net::TcpListener::bind(args.addr).await?;
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let limits = sluice_server::limits::Limits::default();
        let settings = sluice_server::grpc::GrpcSettings::new(&limits, None);
        let never = tokio_util::sync::CancellationToken::new();
        sluice_server::grpc::serve(incoming, routes.routes(), settings, never).await;
        Ok(())
    };
    match args.http_addr {
        Some(addr) => tokio::try_join!(grpc, http_check(addr)).map(|_| ()),
        None => grpc.await,
    }
}
