//! `sluice.v1.Usage/Report`: post-paid usage from callers without Envoy.
//!
//! A report is the same decision as Envoy's `apply_on_stream_done` entry: each report becomes a
//! descriptor with an explicit count on a post-paid rule, charged in full (into bounded debt) and
//! never denied. Reports to prepaid rules are refused before anything is charged: a prepaid
//! charge may be denied, which a caller reporting usage that already happened cannot act on.

use std::sync::Arc;
use std::time::Instant;

use sluice_core::rules::{Limit, Match, Payment};
use sluice_core::{Descriptor, Entry};
use sluice_engine::RateLimitRequest;
use sluice_proto::sluice::v1::usage_server::Usage;
use sluice_proto::sluice::v1::{ReportRequest, ReportResponse, ReportResult};
use tonic::{Request, Response, Status};

use crate::metrics::Api;
use crate::state::AppState;
use crate::validate;

/// The usage service.
#[derive(Debug, Clone)]
pub struct UsageService {
    state: Arc<AppState>,
}

impl UsageService {
    /// A service over shared state.
    pub fn new(state: Arc<AppState>) -> Self {
        Self { state }
    }

    /// The reports as descriptors, each with its explicit count; refused if any is malformed or
    /// matches a prepaid rule.
    fn descriptors(&self, req: &ReportRequest) -> Result<Vec<Descriptor>, Status> {
        validate::domain(&req.domain)?;
        if req.reports.is_empty() {
            return Err(Status::invalid_argument("no reports: nothing to charge"));
        }
        if req.reports.len() > validate::MAX_DESCRIPTORS {
            return Err(Status::invalid_argument(format!(
                "{} reports in one call; the limit is {}",
                req.reports.len(),
                validate::MAX_DESCRIPTORS
            )));
        }
        let rules = self.state.engine.rules();
        req.reports
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let entries: Vec<Entry> = r
                    .entries
                    .iter()
                    .map(|e| Entry::new(e.key.as_str(), e.value.as_str()))
                    .collect();
                validate::check_entries(&format_args!("descriptor {i}"), &entries)?;
                if let Match::Rule(rule) = rules.match_descriptor(&req.domain, &entries)
                    && let Limit::Limited {
                        payment: Payment::Prepaid,
                        ..
                    } = rule.limit
                {
                    return Err(Status::invalid_argument(format!(
                        "report {i} matches rule {} ({}:{}), which is prepaid: usage can be \
                         reported only to rules with `charge: post_paid`; check prepaid rules \
                         with ShouldRateLimit",
                        rule.label,
                        rule.file.display(),
                        rule.line
                    )));
                }
                Ok(Descriptor {
                    entries,
                    hits_addend: Some(r.tokens),
                    limit_override: None,
                })
            })
            .collect()
    }
}

#[tonic::async_trait]
impl Usage for UsageService {
    async fn report(
        &self,
        request: Request<ReportRequest>,
    ) -> Result<Response<ReportResponse>, Status> {
        let started = Instant::now();
        let req = request.into_inner();
        let descriptors = self.descriptors(&req).inspect_err(|_| {
            self.state.metrics.count(Api::Report, "invalid");
        })?;
        let decision = self
            .state
            .engine
            .decide(&RateLimitRequest {
                domain: &req.domain,
                descriptors: &descriptors,
                hits_addend: 0,
            })
            .await;
        self.state.metrics.record(Api::Report, &decision);
        let results = decision
            .outcomes
            .iter()
            .map(|o| ReportResult {
                matched: o.limit.is_some(),
                rule: o
                    .limit
                    .and_then(|l| l.rule)
                    .and_then(|id| decision.rules.rule(id))
                    .map(|r| r.label.clone())
                    .unwrap_or_default(),
                remaining: o.remaining,
                debt: o.debt,
                until_full: Some(crate::durations::prost(o.until_full)),
            })
            .collect();
        self.state
            .metrics
            .observe_latency(Api::Report, started.elapsed().as_secs_f64());
        Ok(Response::new(ReportResponse { results }))
    }
}
