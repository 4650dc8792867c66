//! Starts a real sluice server on 127.0.0.1:0 and gives tests real gRPC clients.
#![allow(dead_code)]

pub mod rlqs;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use prometheus::Registry;
use sluice_core::SystemClock;
use sluice_engine::{Engine, EngineMetrics, EngineSettings, MemoryStore};
use sluice_proto::envoy::auth::attribute_context::{HttpRequest, Peer, Request};
use sluice_proto::envoy::auth::authorization_client::AuthorizationClient;
use sluice_proto::envoy::auth::check_response::HttpResponse;
use sluice_proto::envoy::auth::{AttributeContext, CheckRequest, CheckResponse};
use sluice_proto::envoy::common_ratelimit::RateLimitDescriptor;
use sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::Entry;
use sluice_proto::envoy::core::{Address, SocketAddress, address};
use sluice_proto::envoy::ratelimit::RateLimitRequest;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use sluice_server::metrics::ServerMetrics;
use sluice_server::{AppState, Runtime, ServeOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tonic::transport::Channel;

/// A running server; stops when dropped or on [`TestServer::stop`].
pub struct TestServer {
    pub grpc: SocketAddr,
    pub admin: SocketAddr,
    pub state: Arc<AppState>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), sluice_server::ServeError>>>,
}

impl TestServer {
    /// Starts a server on the config `yaml`.
    pub async fn start(yaml: &str) -> Self {
        Self::start_with_limits(yaml, sluice_server::limits::Limits::default()).await
    }

    /// Starts a server on the config `yaml` with `limits`.
    pub async fn start_with_limits(yaml: &str, limits: sluice_server::limits::Limits) -> Self {
        let config = sluice_core::parse_config(yaml).expect("valid config");
        let registry = Registry::new();
        let runtime = Runtime::of(&config);
        let engine = Arc::new(Engine::new(
            config.rules,
            // As `sluice serve` makes it: bounded by `engine.max_keys`.
            MemoryStore::with_max_keys(SystemClock::new(), config.engine.max_keys),
            Arc::new(SystemClock::new()),
            EngineSettings::from(&config.engine),
            EngineMetrics::register(&registry).expect("metrics"),
        ));

        let metrics = ServerMetrics::register(&registry).expect("metrics");
        let state = Arc::new(AppState::new(engine, runtime, metrics, registry).with_limits(limits));
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let (grpc_addr, admin_addr) = (
            grpc.local_addr().expect("addr"),
            admin.local_addr().expect("addr"),
        );
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(sluice_server::serve(
            Arc::clone(&state),
            grpc,
            admin,
            ServeOptions::default(),
            async move {
                let _ = rx.await;
            },
        ));
        Self {
            grpc: grpc_addr,
            admin: admin_addr,
            state,
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.grpc))
            .expect("uri")
            .connect()
            .await
            .expect("connect")
    }

    pub async fn rls(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::new(self.channel().await)
    }

    pub async fn authz(&self) -> AuthorizationClient<Channel> {
        AuthorizationClient::new(self.channel().await)
    }

    /// GETs `path` on the admin port; returns (status, body).
    pub async fn admin_get(&self, path: &str) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(self.admin)
            .await
            .expect("connect admin");
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        let status = out
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("status line");
        let body = out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    /// Stops the server and waits for it to finish.
    pub async fn stop(mut self) -> Result<(), sluice_server::ServeError> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.task.take().expect("task").await.expect("join")
    }
}

/// A `sluice.v1` descriptor entry.
pub fn entry(k: &str, v: &str) -> sluice_proto::sluice::v1::Entry {
    sluice_proto::sluice::v1::Entry {
        key: k.into(),
        value: v.into(),
    }
}

/// A request with one descriptor per `&[(key, value)]`.
pub fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors: descriptors
            .iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .iter()
                    .map(|(k, v)| Entry {
                        key: (*k).to_string(),
                        value: (*v).to_string(),
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

pub const CONFIG: &str = r#"
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {name: per_client, unit: minute, requests_per_unit: 3}
      - key: user
        rate_limit: {unit: second, requests_per_unit: 100}
      - key: shadowed
        shadow_mode: true
        rate_limit: {name: shadowed, unit: hour, requests_per_unit: 1}
authz:
  domain: edge
  trusted_hops: 1
  descriptors:
    - [{key: remote_address, from: client_ip}]
"#;

/// An ext_authz `CheckRequest` for `GET /hello` from 192.0.2.1 with `headers`.
pub fn check_request(headers: &[(&str, &str)]) -> CheckRequest {
    let headers: HashMap<String, String> = headers
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: Some(Address {
                    address: Some(address::Address::SocketAddress(SocketAddress {
                        address: "192.0.2.1".into(),
                        ..SocketAddress::default()
                    })),
                }),
                ..Peer::default()
            }),
            request: Some(Request {
                http: Some(HttpRequest {
                    method: "GET".into(),
                    path: "/hello".into(),
                    host: "example.com".into(),
                    headers,
                    ..HttpRequest::default()
                }),
                ..Request::default()
            }),
            ..AttributeContext::default()
        }),
    }
}

/// The headers an ext_authz answer adds (allowed) or sends (denied).
pub fn headers_of(resp: &CheckResponse) -> HashMap<String, String> {
    let list = match &resp.http_response {
        Some(HttpResponse::OkResponse(ok)) => &ok.response_headers_to_add,
        Some(HttpResponse::DeniedResponse(denied)) => &denied.headers,
        other => panic!("unexpected http_response {other:?}"),
    };
    list.iter()
        .filter_map(|h| h.header.as_ref())
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}
