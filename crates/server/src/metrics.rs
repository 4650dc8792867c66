//! Request and decision metrics. Labels are bounded by configuration: API names, rule labels,
//! fixed outcome words; never request domains, and descriptor values only for rules with
//! `detailed_metric: true`, within a budget ([`detailed`]).

pub mod detailed;
pub mod rlqs;

use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
};
use sluice_core::rules::RuleSet;
use sluice_engine::{Code, Decision, DescriptorOutcome};

/// The two Envoy APIs sluice answers (the `api` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `RateLimitService/ShouldRateLimit`.
    Rls,
    /// `Authorization/Check`.
    Authz,
    /// `sluice.v1.Usage/Report`.
    Report,
    /// `sluice.v1.Holds/Acquire` and `Release`.
    Hold,
    /// The HTTP check port (forward auth for nginx, Caddy, Traefik).
    Http,
}

impl Api {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Rls => "rls",
            Self::Authz => "authz",
            Self::Report => "report",
            Self::Hold => "hold",
            Self::Http => "http",
        }
    }
}

/// One API's hot-path series, resolved once: `with_label_values` hashes its labels and takes a
/// lock on every call, which showed in profiles of the request path.
#[derive(Debug, Clone)]
struct ApiSeries {
    ok: IntCounter,
    over_limit: IntCounter,
    unknown_domain: IntCounter,
    latency: Histogram,
}

/// `sluice_decisions_total` per rule of one rule set, indexed by rule id then by outcome (ok,
/// over_limit, shadow_over_limit, fallback, no_room); each made on first use, so only seen
/// outcomes show.
#[derive(Debug)]
struct RuleSeries {
    rules: Arc<RuleSet>,
    counters: Vec<[OnceLock<IntCounter>; 5]>,
}

/// `no_room`: the key found no room in a full table (`engine.max_keys`), told apart from a
/// limit reached so that a full table never hides among ordinary denials.
const OUTCOMES: [&str; 5] = [
    "ok",
    "over_limit",
    "shadow_over_limit",
    "fallback",
    "no_room",
];

/// Server-side series.
#[derive(Debug, Clone)]
pub struct ServerMetrics {
    /// `sluice_requests_total{api, code}`: requests by API and result.
    pub requests: IntCounterVec,
    /// `sluice_request_duration_seconds{api}`: handler latency.
    pub latency: HistogramVec,
    /// `sluice_decisions_total{domain, rule, outcome}`: per-descriptor decisions of configured rules.
    pub decisions: IntCounterVec,
    /// `sluice_quota_resets_total{outcome}`: `ResetQuota` calls (`ok`, `unauthenticated`,
    /// `disabled`, `not_found`, `failed`): failed attempts show someone guessing the token.
    pub resets: IntCounterVec,
    /// `sluice_refused_total{bound}`: connections closed and requests refused because a bound on
    /// what one client may hold was reached (`grpc_connections_per_peer`,
    /// `grpc_preface_timeout`, `admin_connections_per_peer`, `table_scans`, `watchers`,
    /// `watchers_per_connection`, `watchers_per_peer`).
    pub refused: IntCounterVec,
    /// RLQS streams, buckets and assignments.
    pub rlqs: rlqs::RlqsMetrics,
    /// Per-value decisions of rules with `detailed_metric: true`.
    pub detailed: Arc<detailed::DetailedMetrics>,
    rls: ApiSeries,
    authz: ApiSeries,
    report: ApiSeries,
    hold: ApiSeries,
    http: ApiSeries,
    /// Resolved decision counters for the rule set in force (replaced after a reload).
    rule_series: Arc<ArcSwapOption<RuleSeries>>,
}

impl ServerMetrics {
    /// Creates and registers the series.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let requests = IntCounterVec::new(
            Opts::new("sluice_requests_total", "Requests by API and result"),
            &["api", "code"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "sluice_request_duration_seconds",
                "Time spent deciding a request",
            )
            .buckets(vec![
                0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
                0.01, 0.025,
            ]),
            &["api"],
        )?;
        let decisions = IntCounterVec::new(
            Opts::new(
                "sluice_decisions_total",
                "Descriptor decisions by domain, rule and outcome",
            ),
            &["domain", "rule", "outcome"],
        )?;
        let resets = IntCounterVec::new(
            Opts::new(
                "sluice_quota_resets_total",
                "ResetQuota calls by outcome (ok, unauthenticated, disabled, not_found, failed)",
            ),
            &["outcome"],
        )?;
        let refused = IntCounterVec::new(
            Opts::new(
                "sluice_refused_total",
                "Requests refused because a bound on what clients may hold was reached",
            ),
            &["bound"],
        )?;
        let api = |api: Api| ApiSeries {
            ok: requests.with_label_values(&[api.label(), "ok"]),
            over_limit: requests.with_label_values(&[api.label(), "over_limit"]),
            unknown_domain: requests.with_label_values(&[api.label(), "unknown_domain"]),
            latency: latency.with_label_values(&[api.label()]),
        };
        let m = Self {
            rls: api(Api::Rls),
            authz: api(Api::Authz),
            report: api(Api::Report),
            hold: api(Api::Hold),
            http: api(Api::Http),
            requests,
            latency,
            decisions,
            resets,
            refused,
            rlqs: rlqs::RlqsMetrics::register(registry)?,
            detailed: Arc::new(detailed::DetailedMetrics::new()?),
            rule_series: Arc::default(),
        };
        registry.register(Box::new(m.detailed.decisions.clone()))?;
        registry.register(Box::new(m.requests.clone()))?;
        registry.register(Box::new(m.latency.clone()))?;
        registry.register(Box::new(m.decisions.clone()))?;
        registry.register(Box::new(m.resets.clone()))?;
        registry.register(Box::new(m.refused.clone()))?;
        Ok(m)
    }

    /// The `sluice_refused_total` counter of `bound`.
    pub fn refusals(&self, bound: &str) -> IntCounter {
        self.refused.with_label_values(&[bound])
    }

    /// Counts a request of `api` that ended without a decision, as `code` (`invalid`,
    /// `not_configured`, `no_descriptors`).
    pub fn count(&self, api: Api, code: &str) {
        self.requests.with_label_values(&[api.label(), code]).inc();
    }

    /// Counts a decision: the request, and each descriptor a rule applied to.
    pub fn record(&self, api: Api, decision: &Decision, descriptors: &[sluice_core::Descriptor]) {
        let series = self.api(api);
        if decision.unknown_domain {
            series.unknown_domain.inc();
        } else if decision.overall == Code::Ok {
            series.ok.inc();
        } else {
            series.over_limit.inc();
        }
        if decision.outcomes.iter().all(|o| o.limit.is_none()) {
            return;
        }
        let rules = self.rule_series(&decision.rules);
        for (o, descriptor) in decision.outcomes.iter().zip(descriptors) {
            let Some(limit) = o.limit else { continue };
            let outcome = outcome_index(o);
            let rule = limit.rule.map(|id| (id, rules.rules.rule(id)));
            if let Some((_, Some(rule))) = rule
                && rule.detailed_metric
            {
                self.detailed
                    .record(&rule.domain, &rule.label, descriptor, OUTCOMES[outcome]);
            }
            match rule {
                Some((id, Some(rule))) => rules.counters[id as usize][outcome]
                    .get_or_init(|| {
                        self.decisions.with_label_values(&[
                            rule.domain.as_str(),
                            rule.label.as_str(),
                            OUTCOMES[outcome],
                        ])
                    })
                    .inc(),
                _ => self
                    .decisions
                    .with_label_values(&["", "override", OUTCOMES[outcome]])
                    .inc(),
            }
        }
    }

    /// Observes how long a request took to decide.
    pub fn observe_latency(&self, api: Api, seconds: f64) {
        self.api(api).latency.observe(seconds);
    }

    fn api(&self, api: Api) -> &ApiSeries {
        match api {
            Api::Rls => &self.rls,
            Api::Authz => &self.authz,
            Api::Report => &self.report,
            Api::Hold => &self.hold,
            Api::Http => &self.http,
        }
    }

    /// The decision counters for `rules`, made afresh when the rule set changed.
    fn rule_series(&self, rules: &Arc<RuleSet>) -> Arc<RuleSeries> {
        if let Some(current) = self.rule_series.load_full()
            && Arc::ptr_eq(&current.rules, rules)
        {
            return current;
        }
        let fresh = Arc::new(RuleSeries {
            rules: Arc::clone(rules),
            counters: (0..rules.rules().len())
                .map(|_| Default::default())
                .collect(),
        });
        self.rule_series.store(Some(Arc::clone(&fresh)));
        fresh
    }
}

fn outcome_index(o: &DescriptorOutcome) -> usize {
    if o.denial == Some(sluice_engine::Denial::NoRoom) && o.code == Code::OverLimit {
        4
    } else if o.fallback {
        3
    } else if o.shadow_over_limit {
        2
    } else if o.code == Code::OverLimit {
        1
    } else {
        0
    }
}
