//! The HTTP check port: forward auth for proxies that are not Envoy (nginx `auth_request`, Caddy
//! `forward_auth`, Traefik `ForwardAuth`, Envoy's HTTP ext_authz).
//!
//! Each asks "may this request pass?" with an HTTP request carrying the original request in its
//! headers ([`request`]: each part read from the one header the `check:` section names). That
//! request is a second source of the [`RequestView`](sluice_core::authz::RequestView) ext_authz
//! decides from, and takes ext_authz's steps on the one handler path: the same `authz:`
//! descriptors, decisions, answers (200 with `RateLimit-Policy`/`RateLimit`; 429 with
//! `Retry-After` and problem+json), metrics (`api="http"`) and limits. Off unless `--check-addr`
//! is given.
//!
//! # Layout
//! - [`request`]: [`Forwarded`], the check request as it came, and the request it stands for.

pub mod request;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use sluice_engine::Decision;
use sluice_proto::envoy::auth::CheckResponse;
use sluice_proto::envoy::auth::check_response::HttpResponse;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::handler::{self, Intake, Wire};
use crate::incoming::CappedIncoming;
use crate::metrics::Api;
use crate::state::{AppState, Runtime};
pub use request::Forwarded;

/// The most bytes of a request's head (URI and headers) the port takes: beyond it the request is
/// answered 431 without a decision (hyper also stops reading a head larger than its buffer).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The header a denial answered with another status than 429 (`check.deny_status`) carries
/// its problem+json body in: a proxy that makes its own answer of such a denial cannot pass the
/// check's body on, but can pass a header (nginx's `auth_request_set`, then `return 429`).
pub const PROBLEM_HEADER: &str = "x-sluice-problem";

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

/// ext_authz's steps for a forwarded request, counted as `api="http"`, answered as HTTP.
struct HttpCheck;

impl Wire for HttpCheck {
    type Request = Forwarded;
    type Response = Response<Full<Bytes>>;
    const API: Api = Api::Http;

    fn intake<'r>(
        &self,
        _: &AppState,
        runtime: &'r Runtime,
        req: &'r Forwarded,
    ) -> Result<Intake<'r, Self::Response>, Status> {
        // The binary refuses `--check-addr` without `check:`, at start and on reload.
        let plan = runtime.check.as_ref().ok_or_else(|| {
            Status::failed_precondition(
                "the config has no `check:` section naming the proxy in front (docs/forward-auth.md)",
            )
        })?;
        let view = req.view(plan).map_err(Status::invalid_argument)?;
        Ok(match crate::authz::question(runtime, &view) {
            Ok(question) => Intake::Decide(question),
            Err(code) => Intake::Answered {
                code,
                response: Response::new(Full::default()),
            },
        })
    }

    fn answer(&self, runtime: &Runtime, _: &Forwarded, decision: &Decision) -> Self::Response {
        let deny_status = runtime.check.as_ref().map_or(429, |c| c.deny_status);
        to_http(crate::authz::answer(runtime, decision), deny_status)
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
        return plain(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("request head of {head} bytes; the limit is {MAX_HEAD_BYTES}\n"),
        );
    }
    match handler::handle(
        state,
        &HttpCheck,
        tonic::Request::new(Forwarded::of(&req, peer)),
    )
    .await
    {
        Ok(answer) => answer.into_inner(),
        Err(status) => plain(StatusCode::BAD_REQUEST, format!("{}\n", status.message())),
    }
}

fn plain(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text)));
    *r.status_mut() = status;
    r
}

/// ext_authz's answer as HTTP: allowed, 200 with the headers Envoy would add to the response;
/// denied, `deny_status` with its headers and body, and the body in [`PROBLEM_HEADER`] too when
/// the status is not 429 (the proxy will answer the client itself).
fn to_http(answer: CheckResponse, deny_status: u16) -> Response<Full<Bytes>> {
    let (status, headers, body) = match answer.http_response {
        Some(HttpResponse::DeniedResponse(d)) => (deny_status, d.headers, d.body),
        Some(HttpResponse::OkResponse(ok)) => (200, ok.response_headers_to_add, String::new()),
        // sluice never answers these; allow, as Envoy's `failure_mode_allow` would.
        Some(HttpResponse::ErrorResponse(_)) | None => (200, Vec::new(), String::new()),
    };
    // The body is JSON on one line of printable ASCII (policy names are kept so), so a valid
    // header value; were it not, the header is left out and the proxy answers without it.
    let problem = (status != 429 && !body.is_empty())
        .then(|| HeaderValue::from_str(&body).ok())
        .flatten();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    for h in headers.iter().filter_map(|h| h.header.as_ref()) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.key.as_bytes()),
            HeaderValue::from_str(&h.value),
        ) {
            r.headers_mut().append(name, value);
        }
    }
    if let Some(value) = problem {
        r.headers_mut()
            .insert(HeaderName::from_static(PROBLEM_HEADER), value);
    }
    r
}
