//! `envoy.service.auth.v3.Authorization/Check`: ext_authz requests decided by the same engine.
//!
//! Allowed requests get OK with the RateLimit headers in `response_headers_to_add`; denied ones
//! get HTTP 429 with `Retry-After`, `RateLimit-Policy`, `RateLimit` and a problem+json body.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::Descriptor;
use sluice_core::authz::RequestView;
use sluice_engine::{Code, Decision};
use sluice_proto::envoy::auth::attribute_context::HttpRequest;
use sluice_proto::envoy::auth::authorization_server::Authorization;
use sluice_proto::envoy::auth::check_response::HttpResponse;
use sluice_proto::envoy::auth::{CheckRequest, CheckResponse, DeniedHttpResponse, OkHttpResponse};
use sluice_proto::envoy::core::{HeaderValue, HeaderValueOption, SocketAddress, address};
use sluice_proto::envoy::rpc;
use sluice_proto::envoy::types::{HttpStatus, StatusCode};
use tonic::{Request, Response, Status};

use crate::handler::{self, Intake, Question, Wire};
use crate::headers::{self, PolicyView};
use crate::metrics::Api;
use crate::state::{AppState, Runtime};

/// gRPC status code OK, in `CheckResponse.status`.
const GRPC_OK: i32 = 0;
/// gRPC status code RESOURCE_EXHAUSTED: any non-OK status makes Envoy deny.
const GRPC_RESOURCE_EXHAUSTED: i32 = 8;

/// The ext_authz service.
#[derive(Debug, Clone)]
pub struct Authz {
    state: Arc<AppState>,
}

impl Authz {
    /// A service over shared state.
    pub fn new(state: Arc<AppState>) -> Self {
        Self { state }
    }
}

#[tonic::async_trait]
impl Authorization for Authz {
    async fn check(
        &self,
        request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        handler::handle(&self.state, self, request).await
    }
}

impl Wire for Authz {
    type Request = CheckRequest;
    type Response = CheckResponse;
    const API: Api = Api::Authz;

    fn intake<'r>(
        &self,
        _: &AppState,
        runtime: &'r Runtime,
        req: &'r CheckRequest,
    ) -> Result<Intake<'r, CheckResponse>, Status> {
        let Some(view) = CheckView::of(req) else {
            return Err(Status::invalid_argument(
                "CheckRequest has no attributes.request.http: sluice decides HTTP requests",
            ));
        };
        Ok(match question(runtime, &view) {
            Ok(question) => Intake::Decide(question),
            Err(code) => Intake::Answered {
                code,
                response: allow(Vec::new()),
            },
        })
    }

    fn answer(&self, runtime: &Runtime, _: &CheckRequest, decision: &Decision) -> CheckResponse {
        answer(runtime, decision)
    }
}

/// What the `authz:` section makes of an HTTP request (ext_authz's, or one the HTTP check was
/// forwarded): the question for the engine, or, when there is nothing to decide, the `code`
/// an allowed answer is counted under (`not_configured`: no `authz:` section;
/// `no_descriptors`: none could be built).
pub(crate) fn question<'r>(
    runtime: &'r Runtime,
    view: &impl RequestView,
) -> Result<Question<'r>, &'static str> {
    // No `authz:` section: nothing to limit, so allow (and say why in the metric).
    let plan = runtime.authz.as_ref().ok_or("not_configured")?;
    // Values of any length: the engine keeps long ones in its keys as prefix and digest.
    let descriptors: Vec<Descriptor> = plan.descriptors(view);
    if descriptors.is_empty() {
        return Err("no_descriptors");
    }
    Ok(Question {
        domain: &plan.domain,
        descriptors,
        // One hit on prepaid rules (0 means 1); a check on post-paid ones, whose usage is
        // reported after the response (`sluice.v1.Usage/Report`).
        hits_addend: 0,
    })
}

/// ext_authz's answer to `decision`: OK with the RateLimit headers, or a denial (429 with
/// `Retry-After`, the RateLimit headers and problem+json).
pub(crate) fn answer(runtime: &Runtime, decision: &Decision) -> CheckResponse {
    let policies = headers::policies(decision);
    let header_values = rate_limit_headers(&policies, &runtime.response);
    match decision.overall {
        Code::Ok => allow(header_values),
        Code::OverLimit => deny(&policies, header_values),
    }
}

fn allow(headers: Vec<HeaderValueOption>) -> CheckResponse {
    CheckResponse {
        status: Some(rpc::Status {
            code: GRPC_OK,
            ..rpc::Status::default()
        }),
        http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
            response_headers_to_add: headers,
            ..OkHttpResponse::default()
        })),
        ..CheckResponse::default()
    }
}

fn deny(policies: &[PolicyView], mut headers: Vec<HeaderValueOption>) -> CheckResponse {
    // No Retry-After when no wait would help (a cost above a burst, a limit that never refills).
    if let Some(retry) = headers::retry_after(policies) {
        headers.push(header("retry-after", retry.to_string()));
    }
    headers.push(header(
        "content-type",
        "application/problem+json".to_string(),
    ));
    CheckResponse {
        status: Some(rpc::Status {
            code: GRPC_RESOURCE_EXHAUSTED,
            message: "rate limited".to_string(),
            ..rpc::Status::default()
        }),
        http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
            status: Some(HttpStatus {
                code: StatusCode::TooManyRequests as i32,
            }),
            headers,
            body: headers::problem_body(policies),
        })),
        ..CheckResponse::default()
    }
}

fn rate_limit_headers(
    policies: &[PolicyView],
    settings: &sluice_core::config::ResponseSettings,
) -> Vec<HeaderValueOption> {
    let mut out = Vec::new();
    if policies.is_empty() {
        return out;
    }
    if settings.ratelimit_headers {
        out.push(header(
            "ratelimit-policy",
            headers::ratelimit_policy(policies),
        ));
        out.push(header("ratelimit", headers::ratelimit(policies)));
    }
    if settings.legacy_x_ratelimit_headers
        && let Some(p) = headers::tightest(policies)
    {
        out.push(header("x-ratelimit-limit", p.quota.to_string()));
        out.push(header("x-ratelimit-remaining", p.remaining.to_string()));
        out.push(header("x-ratelimit-reset", p.reset_secs.to_string()));
    }
    out
}

fn header(key: &str, value: String) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_string(),
            value,
            ..HeaderValue::default()
        }),
        // OVERWRITE_IF_EXISTS_OR_ADD: our headers replace any the upstream set.
        append_action: 2,
        ..HeaderValueOption::default()
    }
}

/// A [`RequestView`] over an ext_authz `CheckRequest`.
struct CheckView<'a> {
    http: &'a HttpRequest,
    /// Headers from `header_map` when Envoy sends raw headers (`encode_raw_headers: true`).
    raw_headers: Option<HashMap<String, String>>,
    peer: Option<&'a str>,
    extensions: &'a HashMap<String, String>,
}

impl<'a> CheckView<'a> {
    fn of(req: &'a CheckRequest) -> Option<Self> {
        let attributes = req.attributes.as_ref()?;
        let http = attributes.request.as_ref()?.http.as_ref()?;
        let raw_headers = (http.headers.is_empty())
            .then_some(http.header_map.as_ref())
            .flatten()
            .map(|m| {
                let mut merged: HashMap<String, String> = HashMap::new();
                for h in &m.headers {
                    let value: Cow<'_, str> = if h.raw_value.is_empty() {
                        Cow::Borrowed(&h.value)
                    } else {
                        String::from_utf8_lossy(&h.raw_value)
                    };
                    merged
                        .entry(h.key.to_ascii_lowercase())
                        .and_modify(|v| {
                            v.push(',');
                            v.push_str(&value);
                        })
                        .or_insert_with(|| value.into_owned());
                }
                merged
            });
        let peer = attributes
            .source
            .as_ref()
            .and_then(|p| p.address.as_ref())
            .and_then(|a| a.address.as_ref())
            .and_then(|a| match a {
                address::Address::SocketAddress(SocketAddress { address, .. }) => {
                    Some(address.as_str())
                }
                _ => None,
            });
        Some(Self {
            http,
            raw_headers,
            peer,
            extensions: &attributes.context_extensions,
        })
    }
}

impl RequestView for CheckView<'_> {
    fn header(&self, lower_name: &str) -> Option<&str> {
        match &self.raw_headers {
            Some(raw) => raw.get(lower_name).map(String::as_str),
            None => self.http.headers.get(lower_name).map(String::as_str),
        }
    }
    fn path(&self) -> &str {
        &self.http.path
    }
    fn method(&self) -> &str {
        &self.http.method
    }
    fn host(&self) -> &str {
        &self.http.host
    }
    fn peer_ip(&self) -> Option<&str> {
        self.peer
    }
    fn context_extension(&self, name: &str) -> Option<&str> {
        self.extensions.get(name).map(String::as_str)
    }
}
