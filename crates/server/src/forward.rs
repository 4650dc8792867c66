//! The HTTP check port: forward auth for proxies that are not Envoy (nginx `auth_request`, Caddy
//! `forward_auth`, Traefik `ForwardAuth`, Envoy's HTTP ext_authz).
//!
//! Each asks "may this request pass?" with an HTTP request carrying the original request in its
//! headers. That request becomes the `CheckRequest` Envoy's gRPC ext_authz would send, and goes
//! through ext_authz's `Wire` on the one handler path: the same `authz:` descriptors, decisions,
//! answers (200 with `RateLimit-Policy`/`RateLimit`; 429 with `Retry-After` and problem+json),
//! metrics (`api="http"`) and limits. Off unless `--check-addr` is given.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use sluice_engine::Decision;
use sluice_proto::envoy::auth::attribute_context::{self, HttpRequest, Peer};
use sluice_proto::envoy::auth::check_response::HttpResponse;
use sluice_proto::envoy::auth::{AttributeContext, CheckRequest, CheckResponse};
use sluice_proto::envoy::core::{Address, HeaderValueOption, SocketAddress, address};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::authz::Authz;
use crate::handler::{self, Intake, Wire};
use crate::incoming::CappedIncoming;
use crate::metrics::Api;
use crate::state::{AppState, Runtime};

/// The most bytes of a request's head (URI and headers) the port takes: beyond it the request is
/// answered 431 without a decision (hyper also stops reading a head larger than its buffer).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The header a proxy sets to have denials answered with another status: nginx's
/// `auth_request` turns any status but 2xx, 401 and 403 into a 500, so its config asks for 403
/// here and turns it into a 429 of its own (`deploy/examples/nginx/`). 401, 403 or 429.
pub const DENY_STATUS_HEADER: &str = "x-sluice-deny-status";

/// Serves the HTTP check on `listener` until `stop` is cancelled: at most
/// `limits.max_connections` connections at once, each closed when a request's head takes longer
/// than `limits.admin_header_timeout` to arrive or is larger than [`MAX_HEAD_BYTES`].
pub async fn run(listener: TcpListener, state: Arc<AppState>, stop: CancellationToken) {
    let limits = &state.limits;
    // A proxy is one peer with many connections: only the total is capped.
    let incoming = CappedIncoming::new(
        listener,
        (limits.max_connections, limits.max_connections),
        limits.tcp_keepalive,
        state.metrics.refusals("check_connections_per_peer"),
    );
    let answer = |state: Arc<AppState>, req, peer| async move { check(&state, req, peer).await };
    crate::http1::serve(incoming, state, stop, "check", Some(MAX_HEAD_BYTES), answer).await;
}

/// ext_authz's wire, counted as `api="http"`.
struct HttpCheck(Authz);

impl Wire for HttpCheck {
    type Request = CheckRequest;
    type Response = CheckResponse;
    const API: Api = Api::Http;

    fn intake<'r>(
        &self,
        state: &AppState,
        runtime: &'r Runtime,
        req: &'r CheckRequest,
    ) -> Result<Intake<'r, CheckResponse>, Status> {
        self.0.intake(state, runtime, req)
    }

    fn answer(&self, runtime: &Runtime, req: &CheckRequest, decision: &Decision) -> CheckResponse {
        self.0.answer(runtime, req, decision)
    }
}

/// Answers one forward-auth request (any method, any path: proxies call one fixed URL).
async fn check(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    peer: Option<SocketAddr>,
) -> Response<Full<Bytes>> {
    // hyper bounds what it buffers; this bounds what a request may carry into a decision.
    let head: usize = req
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum::<usize>()
        + req.uri().to_string().len();
    if head > MAX_HEAD_BYTES {
        let mut r = Response::new(Full::new(Bytes::from(format!(
            "request head of {head} bytes; the limit is {MAX_HEAD_BYTES}\n"
        ))));
        *r.status_mut() = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
        return r;
    }
    let deny_status = req
        .headers()
        .get(DENY_STATUS_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u16>().ok())
        .filter(|s| matches!(s, 401 | 403 | 429));
    let check = check_request(&req, peer);
    let wire = HttpCheck(Authz::new(Arc::clone(state)));
    match handler::handle(state, &wire, tonic::Request::new(check)).await {
        Ok(answer) => to_http(answer.into_inner(), deny_status),
        Err(status) => {
            let mut r = Response::new(Full::new(Bytes::from(format!("{}\n", status.message()))));
            *r.status_mut() = StatusCode::BAD_REQUEST;
            r
        }
    }
}

/// The `CheckRequest` Envoy would send for the request a proxy forwards: method, URI and host
/// from `X-Forwarded-Method`, `X-Forwarded-Uri` (nginx: `X-Original-URI`) and
/// `X-Forwarded-Host` when present, else the check request's own; every header as sent (a name
/// sent twice is joined with commas, as Envoy joins it); the proxy as the peer, so
/// `authz.trusted_hops` takes the client from the `X-Forwarded-For` the proxy appended to.
fn check_request<B>(req: &Request<B>, peer: Option<SocketAddr>) -> CheckRequest {
    let headers = joined(req.headers());
    let pick = |name: &str| headers.get(name).cloned();
    let method = pick("x-forwarded-method").unwrap_or_else(|| req.method().to_string());
    let path = pick("x-forwarded-uri")
        .or_else(|| pick("x-original-uri"))
        .unwrap_or_else(|| {
            req.uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string()
        });
    let host = pick("x-forwarded-host")
        .or_else(|| pick("host"))
        .unwrap_or_default();
    let scheme = pick("x-forwarded-proto").unwrap_or_default();
    let source = peer.map(|p| Peer {
        address: Some(Address {
            address: Some(address::Address::SocketAddress(SocketAddress {
                address: p.ip().to_string(),
                port_specifier: Some(
                    sluice_proto::envoy::core::socket_address::PortSpecifier::PortValue(u32::from(
                        p.port(),
                    )),
                ),
                ..SocketAddress::default()
            })),
        }),
        ..Peer::default()
    });
    CheckRequest {
        attributes: Some(AttributeContext {
            source,
            request: Some(attribute_context::Request {
                http: Some(HttpRequest {
                    method,
                    path,
                    host,
                    scheme,
                    headers,
                    ..HttpRequest::default()
                }),
                ..attribute_context::Request::default()
            }),
            ..AttributeContext::default()
        }),
    }
}

/// The headers by lower-case name, repeated names joined with `,` (values not valid UTF-8 are
/// read lossily).
fn joined(headers: &HeaderMap) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = HashMap::with_capacity(headers.len());
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        out.entry(name.as_str().to_string())
            .and_modify(|v| {
                v.push(',');
                v.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    out
}

/// ext_authz's answer as HTTP: allowed, 200 with the headers Envoy would add to the response;
/// denied, its status (or the one the proxy asked for), headers and body.
fn to_http(answer: CheckResponse, deny_status: Option<u16>) -> Response<Full<Bytes>> {
    let (status, headers, body) = match answer.http_response {
        Some(HttpResponse::DeniedResponse(d)) => {
            let status = deny_status
                .or_else(|| d.status.and_then(|s| u16::try_from(s.code).ok()))
                .unwrap_or(429);
            (status, d.headers, d.body)
        }
        Some(HttpResponse::OkResponse(ok)) => (200, ok.response_headers_to_add, String::new()),
        // sluice never answers these; allow, as Envoy's `failure_mode_allow` would.
        Some(HttpResponse::ErrorResponse(_)) | None => (200, Vec::new(), String::new()),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    for h in headers
        .iter()
        .filter_map(|h: &HeaderValueOption| h.header.as_ref())
    {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(h.key.as_bytes()),
            http::HeaderValue::from_str(&h.value),
        ) {
            r.headers_mut().append(name, value);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forwarded_request_is_the_one_checked() {
        let req = Request::builder()
            .method("GET")
            .uri("/check")
            .header("host", "sluice:8082")
            .header("x-forwarded-method", "POST")
            .header("x-original-uri", "/v1/orders?id=7")
            .header("x-forwarded-host", "api.example.com")
            .header("x-api-key", "k1")
            .header("x-api-key", "junk")
            .body(())
            .expect("request");
        let peer = "127.0.0.1:5000".parse().ok();
        let check = check_request(&req, peer);
        let attrs = check.attributes.expect("attributes");
        let http = attrs.request.and_then(|r| r.http).expect("http");
        assert_eq!(
            (http.method.as_str(), http.path.as_str(), http.host.as_str()),
            ("POST", "/v1/orders?id=7", "api.example.com")
        );
        assert_eq!(
            http.headers["x-api-key"], "k1,junk",
            "joined as Envoy joins"
        );
        assert!(attrs.source.is_some());
        // Without the forwarded headers, the check request's own.
        let plain = Request::builder()
            .method("PUT")
            .uri("/x?y=1")
            .body(())
            .expect("request");
        let http = check_request(&plain, None)
            .attributes
            .and_then(|a| a.request)
            .and_then(|r| r.http)
            .expect("http");
        assert_eq!(
            (http.method.as_str(), http.path.as_str()),
            ("PUT", "/x?y=1")
        );
    }
}
