//! The one path of every deciding API: validate → decide → shadow → record → answer → observe.
//!
//! `ShouldRateLimit`, ext_authz `Check` and `sluice.v1.Usage/Report` differ only in how a request
//! becomes a [`Question`] and how a decision goes back on their wire: each says that in a
//! [`Wire`]. The order of the steps, what is counted and what the engine is asked are written
//! once, in [`handle`], so an API cannot skip the shadow switch, miss a metric or reach the engine
//! unvalidated. A new API (an HTTP check) is one more `Wire`.

use std::time::Instant;

use sluice_core::Descriptor;
use sluice_engine::{Decision, RateLimitRequest};
use tonic::{Response, Status};

use crate::admission::Charge;
use crate::metrics::Api;
use crate::state::{AppState, Runtime};

/// What a validated request asks the engine.
#[derive(Debug)]
pub struct Question<'r> {
    /// The domain.
    pub domain: &'r str,
    /// The descriptors, all charged or none.
    pub descriptors: Vec<Descriptor>,
    /// Request-wide hits; 0 means 1 on prepaid rules (see `RateLimitRequest`).
    pub hits_addend: u64,
}

/// What a request became once validated.
#[derive(Debug)]
pub enum Intake<'r, R> {
    /// A question for the engine.
    Decide(Question<'r>),
    /// Answered without a decision (nothing to limit), counted under `code` in
    /// `sluice_requests_total` (`not_configured`, `no_descriptors`).
    Answered {
        /// The `code` label.
        code: &'static str,
        /// The answer.
        response: R,
    },
}

/// One deciding API: its messages, how a request is validated into a [`Question`], and how a
/// decision is answered.
pub trait Wire {
    /// The request message.
    type Request: Send + Sync;
    /// The response message.
    type Response;
    /// The API's `api` label.
    const API: Api;

    /// Validates `req` under the configuration in force. An error is the answer, counted as
    /// `invalid`; nothing reaches the engine.
    fn intake<'r>(
        &self,
        state: &AppState,
        runtime: &'r Runtime,
        req: &'r Self::Request,
    ) -> Result<Intake<'r, Self::Response>, Status>;

    /// The answer to `req` for `decision` (after the shadow switch).
    fn answer(&self, runtime: &Runtime, req: &Self::Request, decision: &Decision)
    -> Self::Response;
}

/// The label of the rule a descriptor's outcome came from (empty for none, or an override), as
/// sluice's own APIs answer it.
pub fn rule_label(decision: &Decision, outcome: &sluice_engine::DescriptorOutcome) -> String {
    outcome
        .limit
        .and_then(|l| l.rule)
        .and_then(|id| decision.rules.rule(id))
        .map(|r| r.label.clone())
        .unwrap_or_default()
}

/// What a call's arrival charge ([`crate::admission::call::Call::cost`]) covers of a request being
/// decided: a few descriptors of a few entries.
const DECIDING_COVERED: usize = 8 * 1024;

/// What a request being decided holds, roughly: the decoded message and the engine's copy of
/// its descriptors, each about 64 bytes an entry plus its key and value, and 256 a descriptor.
/// A message decodes to many times its size (an empty entry is 2 bytes on the wire), and lives
/// as long as its decision, which may wait for the store.
fn deciding_bytes(question: &Question<'_>) -> usize {
    let per_descriptor = |d: &Descriptor| {
        256 + d
            .entries
            .iter()
            .map(|e| 64 + e.key.len() + e.value.len())
            .sum::<usize>()
    };
    2 * question
        .descriptors
        .iter()
        .map(per_descriptor)
        .sum::<usize>()
}

/// Answers `request` through `wire`, the same way for every API. A request whose decision would
/// hold more than its call was charged on arrival is charged the rest first
/// ([`crate::admission`]), or refused with `RESOURCE_EXHAUSTED` (counted as `refused`).
pub async fn handle<W: Wire + Sync>(
    state: &AppState,
    wire: &W,
    request: tonic::Request<W::Request>,
) -> Result<Response<W::Response>, Status> {
    let started = Instant::now();
    let charge = request.extensions().get::<Charge>().cloned();
    let req = request.into_inner();
    let runtime = state.runtime.load();
    let response = match wire.intake(state, &runtime, &req) {
        Err(status) => {
            state.metrics.count(W::API, "invalid");
            return Err(status);
        }
        Ok(Intake::Answered { code, response }) => {
            state.metrics.count(W::API, code);
            response
        }
        Ok(Intake::Decide(question)) => {
            let held = deciding_bytes(&question);
            if let Some(charge) = &charge
                && held > DECIDING_COVERED
                && let Err(status) = charge.grow(held - DECIDING_COVERED)
            {
                state.metrics.count(W::API, "refused");
                return Err(status);
            }
            let mut decision = state
                .engine
                .decide(&RateLimitRequest {
                    domain: question.domain,
                    descriptors: &question.descriptors,
                    hits_addend: question.hits_addend,
                })
                .await;
            crate::shadow::apply(
                &mut decision,
                runtime.shadow_mode,
                &state.shadow_log,
                question.domain,
            );
            state
                .denial_log
                .record(question.domain, &question.descriptors, &decision);
            state
                .metrics
                .record(W::API, &decision, &question.descriptors);
            wire.answer(&runtime, &req, &decision)
        }
    };
    state
        .metrics
        .observe_latency(W::API, started.elapsed().as_secs_f64());
    Ok(Response::new(response))
}
