//! `sluice.v1.Holds`: concurrency limits and reservations for callers without Envoy.
//!
//! Acquire and Release are the same decisions as Envoy's `sluice-hold: acquire` and
//! `sluice-release: <token>` descriptors through ShouldRateLimit: each becomes descriptors with the
//! hold set, decided by the one engine on the one path ([`handler::handle`]).

use std::sync::Arc;

use sluice_core::descriptor::{Hold, format_token, parse_token};
use sluice_core::{Descriptor, Entry};
use sluice_engine::{Code, Decision};
use sluice_proto::sluice::v1::holds_server::Holds;
use sluice_proto::sluice::v1::{
    AcquireRequest, AcquireResponse, HoldDescriptor, HoldStatus, ReleaseRequest, ReleaseResponse,
};
use tonic::{Request, Response, Status};

use crate::handler::{self, Intake, Question, Wire};
use crate::metrics::Api;
use crate::state::{AppState, Runtime};
use crate::validate;

/// The holds service.
#[derive(Debug, Clone)]
pub struct HoldsService {
    state: Arc<AppState>,
}

impl HoldsService {
    /// A service over shared state.
    pub fn new(state: Arc<AppState>) -> Self {
        Self { state }
    }
}

/// Acquire's wire.
struct Acquire;

/// Release's wire.
struct Release;

#[tonic::async_trait]
impl Holds for HoldsService {
    async fn acquire(
        &self,
        request: Request<AcquireRequest>,
    ) -> Result<Response<AcquireResponse>, Status> {
        handler::handle(&self.state, &Acquire, request).await
    }

    async fn release(
        &self,
        request: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        handler::handle(&self.state, &Release, request).await
    }
}

/// The request's descriptors, validated, each with `hold` (and its estimate or usage).
fn descriptors(
    domain: &str,
    given: &[HoldDescriptor],
    hold: Hold,
) -> Result<Vec<Descriptor>, Status> {
    validate::domain(domain)?;
    if given.is_empty() {
        return Err(Status::invalid_argument("no descriptors"));
    }
    if given.len() > validate::MAX_DESCRIPTORS {
        return Err(Status::invalid_argument(format!(
            "{} descriptors in one call; the limit is {}",
            given.len(),
            validate::MAX_DESCRIPTORS
        )));
    }
    given
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let entries: Vec<Entry> = d
                .entries
                .iter()
                .map(|e| Entry::new(e.key.as_str(), e.value.as_str()))
                .collect();
            validate::check_entries(&format_args!("descriptor {i}"), &entries)?;
            Ok(Descriptor {
                entries,
                hits_addend: (hold != Hold::Acquire).then_some(d.used),
                hold,
                estimate: d.estimate.filter(|_| hold == Hold::Acquire),
                ..Descriptor::default()
            })
        })
        .collect()
}

impl Wire for Acquire {
    type Request = AcquireRequest;
    type Response = AcquireResponse;
    const API: Api = Api::Hold;

    fn intake<'r>(
        &self,
        _: &AppState,
        _: &'r Runtime,
        req: &'r AcquireRequest,
    ) -> Result<Intake<'r, AcquireResponse>, Status> {
        Ok(Intake::Decide(Question {
            domain: &req.domain,
            descriptors: descriptors(&req.domain, &req.descriptors, Hold::Acquire)?,
            hits_addend: 0,
        }))
    }

    fn answer(&self, _: &Runtime, _: &AcquireRequest, decision: &Decision) -> AcquireResponse {
        let statuses = decision
            .outcomes
            .iter()
            .map(|o| HoldStatus {
                matched: o.limit.is_some(),
                rule: handler::rule_label(decision, o),
                ok: o.code == Code::Ok,
                remaining: o.remaining,
                denial: o.denial.map(|d| d.as_str().to_string()).unwrap_or_default(),
            })
            .collect();
        AcquireResponse {
            ok: decision.overall == Code::Ok,
            token: decision.hold.map(format_token).unwrap_or_default(),
            statuses,
        }
    }
}

impl Wire for Release {
    type Request = ReleaseRequest;
    type Response = ReleaseResponse;
    const API: Api = Api::Hold;

    /// A token that is none (malformed) is refused: unlike Envoy's stream-done call, a caller
    /// of this API sends what Acquire answered, so a malformed one is its bug to hear about.
    fn intake<'r>(
        &self,
        _: &AppState,
        _: &'r Runtime,
        req: &'r ReleaseRequest,
    ) -> Result<Intake<'r, ReleaseResponse>, Status> {
        let token = parse_token(&req.token).ok_or_else(|| {
            Status::invalid_argument(format!(
                "token {:?} is not one Acquire answers (16 hex digits)",
                validate::truncate(&req.token, 32)
            ))
        })?;
        Ok(Intake::Decide(Question {
            domain: &req.domain,
            descriptors: descriptors(&req.domain, &req.descriptors, Hold::Release(token))?,
            hits_addend: 0,
        }))
    }

    fn answer(&self, _: &Runtime, _: &ReleaseRequest, decision: &Decision) -> ReleaseResponse {
        ReleaseResponse {
            released: decision.released,
        }
    }
}
