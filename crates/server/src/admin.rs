//! The admin HTTP port (hyper 1): `/metrics`, `/healthz`, `/readyz`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use prometheus::{Encoder, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::state::AppState;

/// Serves admin HTTP on `listener` until `stop` is cancelled.
pub async fn run(listener: TcpListener, state: Arc<AppState>, stop: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: log, back off briefly, keep serving.
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let state = Arc::clone(&state);
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(handle(&state, &req)) }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = stop.cancelled() => {}
                r = conn => if let Err(e) = r {
                    tracing::debug!(error = %e, "admin connection ended with an error");
                },
            }
        });
    }
}

/// Answers one admin request.
pub fn handle(state: &AppState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
    }
    match req.uri().path() {
        "/metrics" => metrics(state),
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
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
            "not found: try /metrics, /healthz or /readyz\n".into(),
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
