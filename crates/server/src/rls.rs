//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_engine::{Code, Decision, DescriptorOutcome, RateLimitRequest};
use sluice_proto::envoy::protobuf::Duration as PbDuration;
use sluice_proto::envoy::ratelimit::rate_limit_response::{self, DescriptorStatus};
use sluice_proto::envoy::ratelimit::rate_limit_service_server::RateLimitService;
use sluice_proto::envoy::ratelimit::{self as rl, RateLimitResponse};
use tonic::{Request, Response, Status};

use crate::metrics::Api;
use crate::state::AppState;
use crate::validate;

pub mod metadata;

/// The rate limit service.
#[derive(Debug, Clone)]
pub struct Rls {
    state: Arc<AppState>,
}

impl Rls {
    /// A service over shared state.
    pub fn new(state: Arc<AppState>) -> Self {
        Self { state }
    }
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<rl::RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let req = request.into_inner();
        let checked =
            validate::domain(&req.domain).and_then(|()| validate::descriptors(&req.descriptors));
        let descriptors = match checked {
            Ok(d) => d,
            Err(status) => {
                self.state.metrics.count(Api::Rls, "invalid");
                return Err(status);
            }
        };
        let mut decision = self
            .state
            .engine
            .decide(&RateLimitRequest {
                domain: &req.domain,
                descriptors: &descriptors,
                hits_addend: u64::from(req.hits_addend),
            })
            .await;
        let runtime = self.state.runtime.load();
        crate::shadow::apply(
            &mut decision,
            runtime.shadow_mode,
            &self.state.shadow_log,
            &req.domain,
        );
        self.state.metrics.record(Api::Rls, &decision);
        let mut response = to_response(&decision);
        if runtime.response.rls_dynamic_metadata {
            response.dynamic_metadata = Some(metadata::dynamic_metadata(&req, &decision));
        }
        self.state
            .metrics
            .observe_latency(Api::Rls, started.elapsed().as_secs_f64());
        Ok(Response::new(response))
    }
}

/// Envoy's response for a decision: every `DescriptorStatus` filled.
pub fn to_response(decision: &Decision) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: code(decision.overall),
        statuses: decision
            .outcomes
            .iter()
            .map(|o| status(decision, o))
            .collect(),
        ..RateLimitResponse::default()
    }
}

fn code(c: Code) -> i32 {
    match c {
        Code::Ok => rate_limit_response::Code::Ok as i32,
        Code::OverLimit => rate_limit_response::Code::OverLimit as i32,
    }
}

fn status(decision: &Decision, o: &DescriptorOutcome) -> DescriptorStatus {
    let Some(limit) = o.limit else {
        return DescriptorStatus {
            code: code(o.code),
            // An `unlimited` rule says so with the most a status can carry, as
            // envoyproxy/ratelimit does; a descriptor no rule matches says 0.
            limit_remaining: if o.unlimited { u32::MAX } else { 0 },
            ..DescriptorStatus::default()
        };
    };
    let name = limit
        .rule
        .and_then(|id| decision.rules.rule(id))
        .and_then(|r| r.explicit_name.clone())
        .unwrap_or_default();
    DescriptorStatus {
        code: code(o.code),
        current_limit: Some(rate_limit_response::RateLimit {
            name,
            requests_per_unit: u32::try_from(limit.rate.requests_per_unit).unwrap_or(u32::MAX),
            unit: limit.rate.unit.envoy_code(),
        }),
        limit_remaining: u32::try_from(o.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(pb_duration(o.until_full)),
        ..DescriptorStatus::default()
    }
}

/// The longest duration a protobuf `Duration` may hold: 10 000 years, in seconds.
pub const MAX_PB_DURATION_SECS: u64 = 315_576_000_000;

/// A protobuf `Duration` (Envoy's own copy of the well-known type), capped at its valid range (a
/// bucket of 4 billion tokens that refills once a year is full again in 4 billion years).
pub fn pb_duration(d: Duration) -> PbDuration {
    let (seconds, nanos) = pb_parts(d);
    PbDuration { seconds, nanos }
}

/// Seconds and nanoseconds of `d` for a protobuf `Duration`, capped at its valid range.
pub fn pb_parts(d: Duration) -> (i64, i32) {
    if d.as_secs() >= MAX_PB_DURATION_SECS {
        return (MAX_PB_DURATION_SECS as i64, 0);
    }
    (d.as_secs() as i64, d.subsec_nanos() as i32)
}
