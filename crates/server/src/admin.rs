//! The admin HTTP port (hyper 1): `/metrics`, `/healthz`, `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use prometheus::{Encoder, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::incoming::CappedIncoming;
use crate::state::{AppState, Caller};

/// The most bytes of a request's head the admin port reads (a `/quota` query carries a few
/// values): hyper's own default is 400 KiB a connection, 25 MiB over the port's 64.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Serves admin HTTP on `listener` until `stop` is cancelled: at most
/// `limits.admin_max_connections` connections at once (further ones wait in the listen backlog),
/// each closed when a request's headers take longer than `limits.admin_header_timeout`, or when it
/// stays idle that long, or when its head is over [`MAX_HEAD_BYTES`].
pub async fn run(listener: TcpListener, state: Arc<AppState>, stop: CancellationToken) {
    let limits = &state.limits;
    let incoming = CappedIncoming::new(
        listener,
        (
            limits.admin_max_connections,
            limits.admin_max_connections_per_peer,
        ),
        limits.tcp_keepalive,
        state.metrics.refusals("admin_connections_per_peer"),
    );
    let answer = |state: Arc<AppState>, req: Request<Incoming>, peer| async move {
        handle(&state, &req, peer).await
    };
    crate::http1::serve(incoming, state, stop, "admin", Some(MAX_HEAD_BYTES), answer).await;
}

/// Whether the request may read quota and config (`Runtime::may_read`: the read token, or
/// without one, a caller on loopback).
fn may_read(
    state: &AppState,
    req: &Request<Incoming>,
    peer: Option<SocketAddr>,
) -> Result<(), &'static str> {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    state
        .runtime
        .load()
        .may_read(presented, Caller::at(peer, false))
}

/// Answers one admin request.
pub async fn handle(
    state: &AppState,
    req: &Request<Incoming>,
    peer: Option<SocketAddr>,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
    }
    match req.uri().path() {
        "/metrics" => metrics(state),
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        // envoyproxy/ratelimit's health check, as Envoy Gateway's probes ask it: `OK` (no
        // newline) while serving, 500 with no body once draining. Like /readyz, a Redis that is
        // down still answers OK: the fallbacks keep deciding.
        "/healthcheck" if state.is_draining() => text(StatusCode::INTERNAL_SERVER_ERROR, String::new()),
        "/healthcheck" => text(StatusCode::OK, "OK".into()),
        "/config" | "/quota" | "/quota/top" if let Err(why) = may_read(state, req, peer) => {
            let mut r = text(StatusCode::UNAUTHORIZED, format!("{why}\n"));
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer"),
            );
            r
        }
        "/config" => json(StatusCode::OK, &config_json(state)),
        "/quota" => quota(state, req.uri().query().unwrap_or("")).await,
        "/quota/top" => top(state, req.uri().query().unwrap_or("")).await,
        "/readyz" => {
            // Degraded (global store down) is still ready: traffic must keep flowing on fallbacks.
            let runtime = state.runtime.load();
            let store = state.engine.store();
            let body = format!(
                "store: {}\ndegraded: {}\nconfig: {}\n",
                store.name(),
                store.degraded(),
                runtime.version
            );
            if state.is_draining() {
                text(StatusCode::SERVICE_UNAVAILABLE, format!("draining\n{body}"))
            } else {
                text(StatusCode::OK, format!("ready\n{body}"))
            }
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /healthz, /readyz, /healthcheck, /config or /quota?domain=D&key=value\n"
                .into(),
        ),
    }
}

fn metrics(state: &AppState) -> Response<Full<Bytes>> {
    let mut body = Vec::new();
    let encoder = TextEncoder::new();
    match encoder.encode(&state.registry.gather(), &mut body) {
        Ok(()) => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, encoder.format_type())
            .body(Full::new(Bytes::from(body)))
            .unwrap_or_else(|_| {
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "response build failed\n".into(),
                )
            }),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("metrics encoding failed: {e}\n"),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// `/config`: the loaded rules and config version.
fn config_json(state: &AppState) -> serde_json::Value {
    let rules = state.engine.rules();
    let runtime = state.runtime.load();
    let list: Vec<serde_json::Value> = rules
        .rules()
        .iter()
        .map(|r| crate::quota::rule_json(&crate::quota::rule_of(r)))
        .collect();
    serde_json::json!({
        "version": runtime.version,
        "store": state.engine.store().name(),
        "domains": rules.domains(),
        "authz_domain": runtime.authz.as_ref().map(|a| a.domain.clone()),
        "rules": list,
    })
}

/// `/quota?domain=D&key=value&…`: the same peek as `GetQuota`, as JSON.
async fn quota(state: &AppState, query: &str) -> Response<Full<Bytes>> {
    let mut domain = String::new();
    let mut entries = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k), percent_decode(v));
        if k == "domain" {
            domain = v;
        } else {
            entries.push(sluice_proto::sluice::v1::Entry { key: k, value: v });
        }
    }
    let entries = match crate::quota::entries_of(&domain, &entries) {
        Ok(e) => e,
        Err(status) => {
            return json(
                StatusCode::BAD_REQUEST,
                &serde_json::json!({"error": status.message(), "usage": "/quota?domain=D&key=value&..."}),
            );
        }
    };
    let s = crate::quota::peek(state, &domain, &entries).await;
    json(StatusCode::OK, &crate::quota::state_json(&s))
}

/// `/quota/top?domain=D&rule=R&n=N`: the same as `TopDenied`, as JSON.
async fn top(state: &AppState, query: &str) -> Response<Full<Bytes>> {
    let usage = "/quota/top?domain=D&rule=R&n=N (each optional)";
    let mut req = sluice_proto::sluice::v1::TopDeniedRequest::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v);
        match percent_decode(k).as_str() {
            "domain" => req.domain = v,
            "rule" => req.rule = v,
            "n" => match v.parse() {
                Ok(n @ 1..=1000) => req.limit = n,
                _ => {
                    let error = format!("n must be a whole number from 1 to 1000, not {v:?}");
                    return json(
                        StatusCode::BAD_REQUEST,
                        &serde_json::json!({"error": error, "usage": usage}),
                    );
                }
            },
            other => {
                let error = format!("unknown parameter {other:?}");
                return json(
                    StatusCode::BAD_REQUEST,
                    &serde_json::json!({"error": error, "usage": usage}),
                );
            }
        }
    }
    match crate::top::top(state, req).await {
        Ok(t) => json(StatusCode::OK, &crate::top::top_json(&t)),
        Err(status) => {
            let code = match status.code() {
                tonic::Code::NotFound => StatusCode::NOT_FOUND,
                tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            json(code, &serde_json::json!({"error": status.message()}))
        }
    }
}

/// Decodes `%XX` and `+` in a query component (invalid escapes are kept as written).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (escaped, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn decodes_query_components() {
        assert_eq!(percent_decode("a%20b+c"), "a b c");
        assert_eq!(percent_decode("%2Fapi%2F"), "/api/");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
