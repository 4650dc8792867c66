//! The P2 baseline: a gRPC server on the same stack as sluice (tonic, reflection) whose
//! `ShouldRateLimit` and `Check` answer OK without deciding anything.
//!
//! `noop-rls --addr 127.0.0.1:18181`

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
}

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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(sluice_proto::ENVOY_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(sluice_proto::ENVOY_DESCRIPTOR_SET)
        .build_v1alpha()?;
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(reflection)
        .add_service(reflection_alpha)
        .add_service(RateLimitServiceServer::new(Noop))
        .add_service(AuthorizationServer::new(Noop))
        .serve(args.addr)
        .await?;
    Ok(())
}
