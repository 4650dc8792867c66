//! The gRPC port: accepted connections (capped, [`crate::incoming`]), TLS when configured, and
//! HTTP/2 served by tonic's routes, each connection with its streams in one task
//! ([`crate::one_task`]).
//!
//! tonic's own server spawns a task per stream, which costs a write and a wake-up per answer
//! (see `one_task`); this loop is that server with the executor swapped, and the server
//! features sluice uses kept: HTTP/2 settings (concurrent streams, keepalive pings), a deadline
//! per request (the smaller of `limits.request_timeout` and the client's `grpc-timeout`;
//! `DEADLINE_EXCEEDED` past it), TLS with a handshake deadline, the peer's address (and
//! certificates) in each request's extensions, and a graceful shutdown.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;
use tonic::body::Body;
use tonic::service::Routes;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tower_service::Service as _;

use crate::admission::answer::{Activity, Answer, Lasting};
use crate::admission::call::{Call, header_bytes};
use crate::admission::metered::Metered;
use crate::admission::{Admission, Charge, Scopes};
use crate::incoming::{FirstBytes, H2_PREFACE_BYTES};
use crate::one_task::{OneTask, Streams};
use crate::tls::ServerTls;

/// How the port serves its connections.
#[derive(Clone)]
pub struct GrpcSettings {
    /// HTTP/2 streams one connection may have open at once.
    pub max_concurrent_streams: u32,
    /// How often an idle connection is pinged.
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// The longest one request may take (a client's `grpc-timeout` may make it shorter).
    pub request_timeout: Duration,
    /// TLS (its certificates as they are now), and the longest its handshake may take.
    pub tls: Option<(Arc<ServerTls>, Duration)>,
    /// The longest a connection may take to send the HTTP/2 preface (after the TLS handshake,
    /// with TLS), and where a connection closed for it is counted: HTTP/2 pings only start
    /// after it, so a silent connection would otherwise hold its place for good.
    pub preface: Option<(Duration, prometheus::IntCounter)>,
    /// Once shutdown begins, how long a connection's open streams may take to finish before
    /// it is closed under them.
    pub shutdown_grace: Duration,
    /// What clients may hold while their calls are open ([`crate::admission`]), and the HTTP/2
    /// windows and buffers its limits give each connection.
    pub admission: Arc<Admission>,
}

impl GrpcSettings {
    /// The settings `limits` give the gRPC port, with `tls` if given, no preface deadline and
    /// a shutdown grace of 10 s; refusals are counted in a registry of their own (a server
    /// with metrics sets [`admission`](Self::admission) to one counting in its own).
    pub fn new(limits: &crate::limits::Limits, tls: Option<Arc<ServerTls>>) -> Self {
        let refused = prometheus::IntCounterVec::new(
            prometheus::Opts::new("sluice_refused_total", "Refusals by bound"),
            &["bound"],
        )
        .expect("a valid metric");
        Self {
            admission: Admission::new(limits, &refused),
            max_concurrent_streams: limits.max_concurrent_streams,
            keepalive_interval: limits.keepalive_interval,
            keepalive_timeout: limits.keepalive_timeout,
            request_timeout: limits.request_timeout,
            tls: tls.map(|tls| (tls, limits.tls_handshake_timeout)),
            preface: None,
            shutdown_grace: Duration::from_secs(10),
        }
    }

    /// `io` with the preface deadline, if there is one.
    fn preface_within<IO>(&self, io: IO) -> FirstBytes<IO> {
        FirstBytes::new(io, H2_PREFACE_BYTES, self.preface.clone())
    }
}

/// Serves `routes` on the connections `incoming` yields until `stop` is cancelled; then stops
/// accepting (dropping `incoming` closes the port), shuts every connection down gracefully (new
/// streams refused, open ones finished) and returns once all are closed.
pub async fn serve<I, IO>(
    incoming: I,
    routes: Routes,
    settings: GrpcSettings,
    stop: CancellationToken,
) where
    I: Stream<Item = io::Result<IO>>,
    IO: AsyncRead + AsyncWrite + Connected<ConnectInfo = TcpConnectInfo> + Unpin + Send + 'static,
{
    let connections = TaskTracker::new();
    {
        let mut incoming = std::pin::pin!(incoming);
        loop {
            let io = tokio::select! {
                () = stop.cancelled() => break,
                io = incoming.next() => match io {
                    Some(Ok(io)) => io,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "gRPC: accept failed");
                        continue;
                    }
                    None => break,
                },
            };
            let (routes, settings, stop) = (routes.clone(), settings.clone(), stop.clone());
            let scopes = settings
                .admission
                .connection(io.connect_info().remote_addr().map(|a| a.ip()));
            connections.spawn(async move {
                match settings.tls.clone() {
                    None => {
                        let info = io.connect_info();
                        let io = settings.preface_within(io);
                        connection(io, info, scopes, routes, &settings, stop).await;
                    }
                    Some((tls, deadline)) => {
                        let handshake = tokio_rustls::TlsAcceptor::from(tls.config()).accept(io);
                        let handshake = tokio::select! {
                            done = tokio::time::timeout(deadline, handshake) => done,
                            // Shutting down: no new connection.
                            () = stop.cancelled() => return,
                        };
                        match handshake {
                            Ok(Ok(tls)) => {
                                let info = tls.connect_info();
                                let io = settings.preface_within(tls);
                                connection(io, info, scopes, routes, &settings, stop).await;
                            }
                            Ok(Err(e)) => tracing::debug!(error = %e, "gRPC: TLS handshake failed"),
                            Err(_) => tracing::debug!("gRPC: TLS handshake timed out"),
                        }
                    }
                }
            });
        }
    }
    connections.close();
    connections.wait().await;
}

/// Serves one connection until it closes, or, once `stop` is cancelled, until its open streams
/// are done (closing it under them after `settings.shutdown_grace`). `info` (the peer's
/// address, and certificates over TLS) goes into every request, where tonic's `remote_addr()`
/// and `peer_certs()` find it. Every call is admitted under `scopes` first ([`admit`]).
async fn connection<IO, Info>(
    io: IO,
    info: Info,
    scopes: Scopes,
    routes: Routes,
    settings: &GrpcSettings,
    stop: CancellationToken,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    Info: Clone + Send + Sync + 'static,
{
    let limit = settings.request_timeout;
    let service = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
        req.extensions_mut().insert(info.clone());
        let mut routes = routes.clone();
        let admitted = admit(&scopes, req);
        async move {
            let (req, admitted) = match admitted {
                Ok(admitted) => admitted,
                Err(status) => return Ok(status.into_http()),
            };
            let deadline = grpc_timeout(req.headers()).map_or(limit, |t| t.min(limit));
            let answer = async {
                std::future::poll_fn(|cx| {
                    tower_service::Service::<http::Request<Body>>::poll_ready(&mut routes, cx)
                })
                .await?;
                routes.call(req.map(Body::new)).await
            };
            match tokio::time::timeout(deadline, answer).await {
                Ok(Ok(response)) => Ok(response.map(|body| admitted.answer(body))),
                Ok(Err(e)) => Err(e),
                // (tonic's own server answers CANCELLED "Timeout expired"; a deadline is what
                // was exceeded.)
                Err(_) => Ok(Status::deadline_exceeded(format!(
                    "no answer within {deadline:?} (the smaller of limits.request_timeout and \
                     the request's grpc-timeout)"
                ))
                .into_http()),
            }
        }
    });
    let streams = Streams::default();
    let mut builder = hyper::server::conn::http2::Builder::new(streams.clone());
    let limits = settings.admission.limits();
    builder
        .timer(TokioTimer::new())
        .initial_stream_window_size(limits.stream_window)
        .initial_connection_window_size(limits.connection_window)
        .max_send_buf_size(limits.send_buffer)
        .max_header_list_size(limits.max_header_list)
        .max_concurrent_streams(settings.max_concurrent_streams)
        .keep_alive_interval(settings.keepalive_interval)
        .keep_alive_timeout(settings.keepalive_timeout);
    let mut task = OneTask::new(
        builder.serve_connection(TokioIo::new(io), service),
        &streams,
    );
    let served = tokio::select! {
        served = &mut task => served,
        () = stop.cancelled() => {
            task.connection().graceful_shutdown();
            match tokio::time::timeout(settings.shutdown_grace, &mut task).await {
                Ok(served) => served,
                // Streams that outlive the grace (a watch, a stalled client) end with it.
                Err(_) => Ok(()),
            }
        }
    };
    if let Err(e) = served {
        tracing::debug!(error = %e, "gRPC: connection ended with an error");
    }
}

/// What a call was admitted with, to put on its answer.
struct Admitted {
    charge: Charge,
    lasting: Option<Lasting>,
}

impl Admitted {
    /// `body`, the call's answer, holding the call's charge (and place) until it ends.
    fn answer(self, body: Body) -> Body {
        Body::new(Answer::new(body, self.charge, self.lasting))
    }
}

/// Admits a call under `scopes`: charges it what it costs held open (its kind's cost and its
/// headers), takes a long-lived call's place, and meters its body ([`Metered`]); the call's
/// [`Charge`] goes into its extensions (the handler charges a decision's descriptors to it, an
/// RLQS stream its buckets). Either the request to route, with what its answer must hold, or the
/// refusal to answer with.
fn admit(
    scopes: &Scopes,
    mut req: http::Request<Incoming>,
) -> Result<(http::Request<Body>, Admitted), Status> {
    let call = Call::of(req.uri().path());
    let slot = call.long.map(|kind| scopes.open_long(kind)).transpose()?;
    let charge = scopes.charge(call.cost + header_bytes(req.headers()))?;
    req.extensions_mut().insert(charge.clone());
    let lasting = slot.map(|slot| Lasting {
        idle: slot.kind().caps(scopes.admission().limits()).idle,
        activity: Activity::new(),
        slot,
    });
    let activity = lasting.as_ref().map(|l| Arc::clone(&l.activity));
    let req = req.map(|body| Body::new(Metered::new(body, call, charge.clone(), activity)));
    Ok((req, Admitted { charge, lasting }))
}

/// The client's deadline from `grpc-timeout` (digits, then a unit: `H`, `M`, `S`, `m`, `u`,
/// `n`); `None` if absent or malformed (the header is then ignored, as tonic ignores it).
fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    // `to_str` only passes visible ASCII: splitting at the last byte splits at a character.
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    // At most 8 digits (the gRPC spec's bound), so nothing below overflows.
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout(value: &str) -> Option<Duration> {
        let mut h = http::HeaderMap::new();
        h.insert("grpc-timeout", value.parse().expect("header value"));
        grpc_timeout(&h)
    }

    #[test]
    fn grpc_timeout_units_and_malformed_values() {
        assert_eq!(timeout("20m"), Some(Duration::from_millis(20)));
        assert_eq!(timeout("1S"), Some(Duration::from_secs(1)));
        assert_eq!(timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(timeout("99999999n"), Some(Duration::from_nanos(99_999_999)));
        assert_eq!(
            timeout("99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
        for bad in ["", "m", "123456789m", "12x", "-1m", "1.5S", "１m"] {
            assert_eq!(timeout(bad), None, "{bad:?}");
        }
        assert_eq!(grpc_timeout(&http::HeaderMap::new()), None);
    }
}
