//! Request and decision metrics. Labels are bounded by configuration: API names, rule labels,
//! fixed outcome words; never descriptor values or request domains.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};
use sluice_engine::{Code, Decision};

/// Server-side series.
#[derive(Debug, Clone)]
pub struct ServerMetrics {
    /// `sluice_requests_total{api, code}`: requests by API and result.
    pub requests: IntCounterVec,
    /// `sluice_request_duration_seconds{api}`: handler latency.
    pub latency: HistogramVec,
    /// `sluice_decisions_total{domain, rule, outcome}`: per-descriptor decisions of configured rules.
    pub decisions: IntCounterVec,
}

impl ServerMetrics {
    /// Creates and registers the series.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self {
            requests: IntCounterVec::new(
                Opts::new("sluice_requests_total", "Requests by API and result"),
                &["api", "code"],
            )?,
            latency: HistogramVec::new(
                HistogramOpts::new(
                    "sluice_request_duration_seconds",
                    "Time spent deciding a request",
                )
                .buckets(vec![
                    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5,
                    0.005, 0.01, 0.025,
                ]),
                &["api"],
            )?,
            decisions: IntCounterVec::new(
                Opts::new(
                    "sluice_decisions_total",
                    "Descriptor decisions by domain, rule and outcome",
                ),
                &["domain", "rule", "outcome"],
            )?,
        };
        registry.register(Box::new(m.requests.clone()))?;
        registry.register(Box::new(m.latency.clone()))?;
        registry.register(Box::new(m.decisions.clone()))?;
        Ok(m)
    }

    /// Counts a decision: the request, and each descriptor a rule applied to.
    pub fn record(&self, api: &str, decision: &Decision) {
        let code = if decision.unknown_domain {
            "unknown_domain"
        } else if decision.overall == Code::Ok {
            "ok"
        } else {
            "over_limit"
        };
        self.requests.with_label_values(&[api, code]).inc();
        for o in &decision.outcomes {
            let Some(limit) = o.limit else { continue };
            let outcome = if o.fallback {
                "fallback"
            } else if o.shadow_over_limit {
                "shadow_over_limit"
            } else if o.code == Code::OverLimit {
                "over_limit"
            } else {
                "ok"
            };
            match limit.rule.and_then(|id| decision.rules.rule(id)) {
                Some(rule) => self
                    .decisions
                    .with_label_values(&[rule.domain.as_str(), rule.label.as_str(), outcome])
                    .inc(),
                None => self
                    .decisions
                    .with_label_values(&["", "override", outcome])
                    .inc(),
            }
        }
    }
}
