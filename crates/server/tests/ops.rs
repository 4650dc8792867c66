//! Health, reflection, admin HTTP and shutdown, as an operator sees them.

mod common;

use common::{CONFIG, TestServer, request};
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_admin_endpoints_report_serving() {
    let server = TestServer::start(CONFIG).await;
    let mut health = HealthClient::new(server.channel().await);
    for service in [
        "",
        "envoy.service.ratelimit.v3.RateLimitService",
        "envoy.service.auth.v3.Authorization",
    ] {
        let resp = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health")
            .into_inner();
        assert_eq!(resp.status, ServingStatus::Serving as i32, "{service}");
    }
    assert_eq!(server.admin_get("/healthz").await.0, 200);
    let (code, body) = server.admin_get("/readyz").await;
    assert_eq!(code, 200);
    assert!(body.contains("store: memory"), "{body}");
    assert_eq!(server.admin_get("/nope").await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_and_describes_every_service() {
    let server = TestServer::start(CONFIG).await;
    let mut client = ServerReflectionClient::new(server.channel().await);
    let requests = vec![
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        },
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(
                "envoy.service.auth.v3.Authorization".into(),
            )),
        },
    ];
    let mut stream = client
        .server_reflection_info(tokio_stream::iter(requests))
        .await
        .expect("reflection")
        .into_inner();
    let Some(Ok(list)) = stream.next().await else {
        panic!("no list")
    };
    let Some(MessageResponse::ListServicesResponse(list)) = list.message_response else {
        panic!("not a list")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for want in [
        "envoy.service.ratelimit.v3.RateLimitService",
        "envoy.service.auth.v3.Authorization",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
    let Some(Ok(file)) = stream.next().await else {
        panic!("no file")
    };
    let Some(MessageResponse::FileDescriptorResponse(files)) = file.message_response else {
        panic!("not a file descriptor response")
    };
    assert!(!files.file_descriptor_proto.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_and_returns_cleanly() {
    let server = TestServer::start(CONFIG).await;
    let mut rls = server.rls().await;
    let resp = rls
        .should_rate_limit(request("edge", &[&[("user", "u")]]))
        .await
        .expect("rpc")
        .into_inner();
    assert_eq!(resp.overall_code, Code::Ok as i32);
    let state = std::sync::Arc::clone(&server.state);
    server.stop().await.expect("serve returns Ok");
    assert!(state.is_draining());
    assert!(
        rls.should_rate_limit(request("edge", &[&[("user", "u")]]))
            .await
            .is_err(),
        "no longer serving"
    );
}

use tokio_stream::StreamExt;
