//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.

use std::sync::Arc;

use sluice_core::bucket::Algorithm;
use sluice_core::config::model::RlsHeaders;
use sluice_core::descriptor::{HOLD_HEADER, format_token};
use sluice_engine::{Code, Decision, DescriptorOutcome};
use sluice_proto::envoy::core::HeaderValue;
use sluice_proto::envoy::ratelimit::rate_limit_response::{self, DescriptorStatus};
use sluice_proto::envoy::ratelimit::rate_limit_service_server::RateLimitService;
use sluice_proto::envoy::ratelimit::{self as rl, RateLimitResponse};
use tonic::{Request, Response, Status};

use crate::handler::{self, Intake, Question, Wire};
use crate::headers;
use crate::metrics::Api;
use crate::state::{AppState, Runtime};
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
        handler::handle(&self.state, self, request).await
    }
}

impl Wire for Rls {
    type Request = rl::RateLimitRequest;
    type Response = RateLimitResponse;
    const API: Api = Api::Rls;

    fn intake<'r>(
        &self,
        _: &AppState,
        _: &'r Runtime,
        req: &'r rl::RateLimitRequest,
    ) -> Result<Intake<'r, RateLimitResponse>, Status> {
        validate::domain(&req.domain)?;
        Ok(Intake::Decide(Question {
            domain: &req.domain,
            descriptors: validate::descriptors(&req.descriptors)?,
            hits_addend: u64::from(req.hits_addend),
        }))
    }

    fn answer(
        &self,
        runtime: &Runtime,
        req: &rl::RateLimitRequest,
        decision: &Decision,
    ) -> RateLimitResponse {
        let mut response = to_response(decision);
        if runtime.response.rls_dynamic_metadata {
            response.dynamic_metadata = Some(metadata::dynamic_metadata(req, decision));
        }
        if let Some(names) = &runtime.response.rls_headers {
            response.response_headers_to_add = limit_headers(names, decision);
        }
        response
    }
}

/// `response.rls_headers` for `decision`, as envoyproxy/ratelimit's
/// `LIMIT_RESPONSE_HEADERS_ENABLED` picks them: of the limit that denied, or else of the one with
/// the least left; none when no descriptor had a limit.
fn limit_headers(names: &RlsHeaders, decision: &Decision) -> Vec<HeaderValue> {
    let policies = headers::policies(decision);
    let Some(p) = headers::tightest(&policies) else {
        return Vec::new();
    };
    let header = |key: &str, value: u64| HeaderValue {
        key: key.to_string(),
        value: value.to_string(),
        ..HeaderValue::default()
    };
    vec![
        header(&names.limit, p.quota),
        header(&names.remaining, p.remaining),
        header(&names.reset, p.reset_secs),
    ]
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
        // The hold's token goes upstream with the request, where the stream-done descriptor's
        // `request_headers` action reads it back to release the hold (docs/concurrency.md).
        request_headers_to_add: decision
            .hold
            .map(|token| HeaderValue {
                key: HOLD_HEADER.to_string(),
                value: format_token(token),
                ..HeaderValue::default()
            })
            .into_iter()
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
    let current_limit = current_limit(name, &limit.rate);
    // Never more than the limit the same status announces (Envoy turns both into
    // `x-ratelimit-limit` and `x-ratelimit-remaining`): a burst above the limit, or a limit given
    // in a longer unit's share, is room this answer does not promise.
    let limit_remaining = u32::try_from(o.remaining)
        .unwrap_or(u32::MAX)
        .min(current_limit.requests_per_unit);
    DescriptorStatus {
        code: code(o.code),
        current_limit: Some(current_limit),
        limit_remaining,
        duration_until_reset: Some(crate::durations::envoy(o.until_full)),
        ..DescriptorStatus::default()
    }
}

/// `current_limit` for a rate. Envoy's RLS `RateLimit` has no period multiplier (a field for it
/// is only proposed), so a period of several units is given as the same rate in the first unit,
/// from its own upward, where it is a whole number (100 per 10 minutes: 10 per minute; 7 per 90
/// seconds: 280 per hour) and at most `u32::MAX`, else rounded down in the first unit where it
/// is at least 1. The
/// burst is not in this message either way; `RateLimit-Policy` and GetQuota carry the period.
pub fn current_limit(
    name: String,
    rate: &sluice_core::bucket::Rate,
) -> rate_limit_response::RateLimit {
    // A concurrency limit is N at once, not per period: Envoy's message has no such unit, so
    // its limit is N with an unknown unit (`x-ratelimit-limit: N`, remaining the free slots).
    if rate.algorithm == Algorithm::Concurrency {
        return rate_limit_response::RateLimit {
            name,
            requests_per_unit: u32::try_from(rate.burst).unwrap_or(u32::MAX),
            unit: rate_limit_response::rate_limit::Unit::Unknown as i32,
        };
    }
    let (requests, unit) = rate_in_envoy_units(rate);
    rate_limit_response::RateLimit {
        name,
        requests_per_unit: u32::try_from(requests).unwrap_or(u32::MAX),
        unit: unit.envoy_code(),
    }
}

/// The rate of `rate` as requests per one Envoy unit (see [`current_limit`]).
pub fn rate_in_envoy_units(rate: &sluice_core::bucket::Rate) -> (u64, sluice_core::Unit) {
    if rate.unit_multiplier <= 1 {
        return (rate.requests_per_unit, rate.unit);
    }
    let period = u128::from(rate.period_secs().max(1));
    let per = |u: sluice_core::Unit| u128::from(rate.requests_per_unit) * u128::from(u.seconds());
    let larger = || {
        sluice_core::Unit::ALL
            .into_iter()
            .filter(|u| *u >= rate.unit)
    };
    // Whole, and within what the field holds (else a larger unit would only saturate).
    let whole = larger().find(|&u| per(u) % period == 0 && per(u) / period <= u128::from(u32::MAX));
    let chosen = whole
        .or_else(|| larger().find(|&u| per(u) >= period))
        .unwrap_or(rate.unit);
    let requests = u64::try_from(per(chosen) / period).unwrap_or(u64::MAX);
    (requests, chosen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::Unit;
    use sluice_core::bucket::Rate;

    fn per(requests_per_unit: u64, unit: Unit, unit_multiplier: u32) -> (u64, Unit) {
        rate_in_envoy_units(&Rate {
            requests_per_unit,
            unit,
            unit_multiplier,
            burst: requests_per_unit,
            algorithm: sluice_core::bucket::Algorithm::TokenBucket,
        })
    }

    #[test]
    fn periods_become_the_same_rate_in_a_unit_envoy_knows() {
        assert_eq!(per(100, Unit::Minute, 1), (100, Unit::Minute));
        assert_eq!(per(100, Unit::Minute, 10), (10, Unit::Minute));
        assert_eq!(per(5, Unit::Minute, 10), (30, Unit::Hour), "whole first");
        assert_eq!(per(7, Unit::Second, 90), (280, Unit::Hour));
        assert_eq!(per(1, Unit::Day, 7), (1, Unit::Week));
        // Not whole in any unit: rounded down where it is at least 1.
        assert_eq!(per(1, Unit::Hour, 1_000), (8, Unit::Year));
        assert_eq!(per(0, Unit::Second, 5), (0, Unit::Second));
        assert_eq!(per(u64::from(u32::MAX), Unit::Second, 2).1, Unit::Second);
    }
}
