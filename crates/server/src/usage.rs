//! `sluice.v1.Usage/Report`: post-paid usage from callers without Envoy.
//!
//! A report is the same decision as Envoy's `apply_on_stream_done` entry: each report becomes a
//! descriptor with an explicit count on a post-paid rule, charged in full (into bounded debt) and
//! never denied. Reports to prepaid rules are refused before anything is charged: a prepaid
//! charge may be denied, which a caller reporting usage that already happened cannot act on.

use std::sync::Arc;

use sluice_core::rules::{Limit, Match, Payment};
use sluice_core::{Descriptor, Entry};
use sluice_engine::Decision;
use sluice_proto::sluice::v1::usage_server::Usage;
use sluice_proto::sluice::v1::{ReportRequest, ReportResponse, ReportResult};
use tonic::{Request, Response, Status};

use crate::handler::{self, Intake, Question, Wire};
use crate::metrics::Api;
use crate::state::{AppState, Runtime};
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
}

#[tonic::async_trait]
impl Usage for UsageService {
    async fn report(
        &self,
        request: Request<ReportRequest>,
    ) -> Result<Response<ReportResponse>, Status> {
        handler::handle(&self.state, self, request).await
    }
}

impl Wire for UsageService {
    type Request = ReportRequest;
    type Response = ReportResponse;
    const API: Api = Api::Report;

    /// The reports as descriptors, each with its explicit count; refused if any is malformed or
    /// matches a prepaid rule.
    fn intake<'r>(
        &self,
        state: &AppState,
        _: &'r Runtime,
        req: &'r ReportRequest,
    ) -> Result<Intake<'r, ReportResponse>, Status> {
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
        let rules = state.engine.rules();
        let descriptors = req
            .reports
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let entries: Vec<Entry> = r
                    .entries
                    .iter()
                    .map(|e| Entry::new(e.key.as_str(), e.value.as_str()))
                    .collect();
                validate::check_entries(&format_args!("descriptor {i}"), &entries)?;
                // Refused when no limit of the descriptor is post-paid; on a descriptor whose
                // `rate_limits` mix both, the report charges the post-paid ones only.
                if let Match::Rule(rule) = rules.match_descriptor(&req.domain, &entries)
                    && !rules.limits_of(rule).iter().any(|l| {
                        matches!(
                            l.limit,
                            Limit::Limited {
                                payment: Payment::PostPaid { .. },
                                ..
                            }
                        )
                    })
                    && matches!(rule.limit, Limit::Limited { .. })
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
                    ..Descriptor::default()
                })
            })
            .collect::<Result<_, Status>>()?;
        Ok(Intake::Decide(Question {
            domain: &req.domain,
            descriptors,
            hits_addend: 0,
        }))
    }

    fn answer(&self, _: &Runtime, _: &ReportRequest, decision: &Decision) -> ReportResponse {
        let results = decision
            .outcomes
            .iter()
            .map(|o| ReportResult {
                matched: o.limit.is_some(),
                rule: handler::rule_label(decision, o),
                remaining: o.remaining,
                debt: o.debt,
                until_full: Some(crate::durations::prost(o.until_full)),
            })
            .collect();
        ReportResponse { results }
    }
}
