//! The accept loop of sluice's plain HTTP/1.1 ports (admin, the HTTP check): connections from a
//! capped listener, each served by hyper with a header timeout until it closes or `stop`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected as _;

use crate::incoming::CappedIncoming;
use crate::state::AppState;

/// Serves `incoming` until `stop` is cancelled: each connection in a background task, closed
/// when a request's head takes longer than `limits.admin_header_timeout` or it stays idle that
/// long; `max_buf` bounds hyper's read buffer. `port` names the port in logs.
pub(crate) async fn serve<H, F>(
    mut incoming: CappedIncoming,
    state: Arc<AppState>,
    stop: CancellationToken,
    port: &'static str,
    max_buf: Option<usize>,
    handler: H,
) where
    H: Fn(Arc<AppState>, Request<Incoming>, Option<SocketAddr>) -> F
        + Clone
        + Send
        + Sync
        + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    // Out of file descriptors, every accept fails until some close: a line a second.
    let accept_failed = sluice_core::SampledLine::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            a = incoming.next() => a,
        };
        // Each connection holds its place until it closes.
        let stream = match accepted {
            None => return,
            Some(Ok(stream)) => stream,
            Some(Err(e)) => {
                // Out of file descriptors and the like: log, back off briefly, keep serving.
                if let Some(unlogged) = accept_failed.sample_now() {
                    tracing::warn!(
                        error = %e,
                        port,
                        unlogged_since_last_line = unlogged,
                        "accept failed (sampled: at most one line a second)"
                    );
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let tasks = state.background.tasks.clone();
        let state = Arc::clone(&state);
        let stop = stop.clone();
        let header_timeout = state.limits.admin_header_timeout;
        let peer = stream.connect_info().remote_addr();
        let handler = handler.clone();
        tasks.spawn(async move {
            let service = service_fn(move |req| {
                let answer = handler(Arc::clone(&state), req, peer);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            if let Some(max) = max_buf {
                builder.max_buf_size(max);
            }
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = stop.cancelled() => {}
                r = conn => if let Err(e) = r {
                    tracing::debug!(error = %e, port, "connection ended with an error");
                },
            }
        });
    }
}
