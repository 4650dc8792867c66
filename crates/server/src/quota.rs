//! `sluice.v1.Quota`: the operator API (peek, list, watch, rules). Nothing here consumes tokens.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::rules::Limit;
use sluice_core::{Entry, SampledLine};
use sluice_engine::quota::{KeyFilter, QuotaView};
use sluice_proto::sluice::v1 as pb;
use sluice_proto::sluice::v1::quota_server::Quota;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::state::AppState;
use crate::validate;

/// The Quota service.
#[derive(Debug, Clone)]
pub struct QuotaService {
    state: Arc<AppState>,
}

impl QuotaService {
    /// A service over shared state.
    pub fn new(state: Arc<AppState>) -> Self {
        Self { state }
    }

    /// Refuses a read of the Quota API without the read token (when one is configured), or,
    /// without one, from beyond loopback (`Runtime::may_read`).
    fn authorize_read<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        let from = crate::state::Caller::at(
            request.remote_addr(),
            request.peer_certs().is_some_and(|c| !c.is_empty()),
        );
        self.state
            .runtime
            .load()
            .may_read(presented, from)
            .map_err(Status::unauthenticated)
    }

    /// `ResetQuota`, behind the bearer token.
    async fn reset(
        &self,
        request: Request<pb::ResetQuotaRequest>,
    ) -> Result<Response<pb::QuotaState>, Status> {
        let Some(token) = self.state.runtime.load().reset_token.clone() else {
            return Err(Status::permission_denied(
                "ResetQuota is disabled: set admin.allow_reset and a reset token",
            ));
        };
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !token.matches(presented) {
            // Counted in `sluice_quota_resets_total{outcome="unauthenticated"}`; a client
            // guessing in a loop writes a line a second.
            static WRONG_TOKEN: SampledLine = SampledLine::new();
            if let Some(unlogged) = WRONG_TOKEN.sample_now() {
                tracing::warn!(
                    peer = ?request.remote_addr(),
                    unlogged_since_last_line = unlogged,
                    "ResetQuota with a wrong token (sampled: at most one line a second)"
                );
            }
            return Err(Status::unauthenticated(
                "ResetQuota needs `authorization: Bearer <admin reset token>`",
            ));
        }
        let req = request.into_inner();
        let entries = entries_of(&req.domain, &req.entries)?;
        match self.state.engine.reset(&req.domain, &entries).await {
            Ok(Some(rule)) => {
                // Counted in `sluice_quota_resets_total{outcome="ok"}`.
                static RESET: SampledLine = SampledLine::new();
                if let Some(unlogged) = RESET.sample_now() {
                    tracing::info!(
                        domain = %req.domain,
                        rule = %rule,
                        unlogged_since_last_line = unlogged,
                        "quota reset by operator (sampled: at most one line a second)"
                    );
                }
            }
            Ok(None) => return Err(Status::not_found("no limited rule matches this descriptor")),
            // Fail closed: the reset did not happen, and the caller must know.
            Err(e) => return Err(Status::unavailable(format!("reset failed: {e}"))),
        }
        Ok(Response::new(
            peek(&self.state, &req.domain, &entries).await,
        ))
    }
}

/// Checks and converts a domain and entries from the API.
pub fn entries_of(domain: &str, entries: &[pb::Entry]) -> Result<Vec<Entry>, Status> {
    validate::domain(domain)?;
    let entries: Vec<Entry> = entries
        .iter()
        .map(|e| Entry::new(e.key.as_str(), e.value.as_str()))
        .collect();
    validate::check_entries(&"descriptor 0", &entries)?;
    Ok(entries)
}

/// Peeks at `entries` in `domain` and returns the API form: what every quota read answers.
pub async fn peek(state: &AppState, domain: &str, entries: &[Entry]) -> pb::QuotaState {
    let view = state.engine.quota(domain, entries).await;
    to_state(&view, state.engine.store().name())
}

/// The API form of a quota view.
pub fn to_state(view: &QuotaView, store: &str) -> pb::QuotaState {
    let mut out = pb::QuotaState {
        unknown_domain: view.unknown_domain,
        degraded: view.degraded || view.store_error.is_some(),
        tracked: view.tracked,
        local_lease: view.local_lease,
        global_remaining: view.global_remaining.unwrap_or(0.0),
        until_full: Some(crate::durations::prost(view.until_full)),
        store_error: view
            .store_error
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        store: store.to_string(),
        ..pb::QuotaState::default()
    };
    let Some(rule) = view.matched() else {
        out.reason = if view.unknown_domain {
            "no config for this domain".into()
        } else {
            "no rule matches (or the matching descriptor has no rate_limit)".into()
        };
        return out;
    };
    out.matched = true;
    // A limited rule whose store did not answer: the numbers are unknown, not 0.
    out.remaining_unknown = view.global_remaining.is_none() && view.store_error.is_some();
    out.rule = rule.label.clone();
    out.reason = format!("{} ({}:{})", rule.path, rule.file.display(), rule.line);
    out.shadow_mode = rule.shadow_mode;
    let r = rule_of(rule);
    out.requests_per_unit = r.requests_per_unit;
    out.unit = r.unit;
    out.unit_multiplier = r.unit_multiplier;
    out.burst = r.burst;
    out.mode = if r.unlimited {
        "unlimited".into()
    } else {
        r.mode
    };
    out.fallback = r.fallback;
    out.charge = r.charge;
    out.max_debt = r.max_debt;
    out.algorithm = r.algorithm;
    // Whole tokens owed, rounded up (a bucket at -0.2 still denies checks).
    out.debt = (-out.global_remaining).max(0.0).ceil() as u64;
    out.limits = view.more.iter().map(|v| to_state(v, store)).collect();
    (out.holds, out.held) = view.holds;
    out.last_denial = view.last_denial.map(|d| pb::LastDenial {
        at_unix_micros: d.at,
        reason: d.reason.as_str().into(),
        fallback: d.fallback,
    });
    out
}

/// The JSON form of a quota state, as `/quota` and `sluice quota get -o json` print it.
pub fn state_json(s: &pb::QuotaState) -> serde_json::Value {
    let until_full = crate::durations::seconds(s.until_full.as_ref());
    serde_json::json!({
        "matched": s.matched, "rule": s.rule, "reason": s.reason,
        "requests_per_unit": s.requests_per_unit, "unit": s.unit,
        "unit_multiplier": s.unit_multiplier.max(1), "burst": s.burst,
        "algorithm": s.algorithm,
        "global_remaining": (!s.remaining_unknown).then_some(s.global_remaining),
        "local_lease": s.local_lease,
        "until_full_seconds": (!s.remaining_unknown).then_some(until_full), "mode": s.mode,
        "fallback": s.fallback, "shadow_mode": s.shadow_mode, "degraded": s.degraded,
        "tracked": s.tracked, "unknown_domain": s.unknown_domain, "store": s.store,
        "charge": s.charge, "debt": (!s.remaining_unknown).then_some(s.debt),
        "max_debt": s.max_debt, "holds": s.holds, "held": s.held,
        "store_error": (!s.store_error.is_empty()).then_some(&s.store_error),
        "last_denial": s.last_denial.as_ref().map(|d| serde_json::json!({
            "at_unix_micros": d.at_unix_micros, "reason": d.reason, "fallback": d.fallback,
        })),
        "limits": s.limits.iter().map(state_json).collect::<Vec<_>>(),
    })
}

/// A page token: the last key of the page, hex-encoded (opaque to callers).
fn token_of(cursor: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(cursor.len() * 2);
    for b in cursor {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The cursor in a page token; `None` if it is not one [`token_of`] made.
fn cursor_of(token: &str) -> Option<Vec<u8>> {
    if !token.len().is_multiple_of(2) || token.len() > 64 * 1024 {
        return None;
    }
    (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect()
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::QuotaState, Status>> + Send>>;

#[tonic::async_trait]
impl Quota for QuotaService {
    async fn get_quota(
        &self,
        request: Request<pb::GetQuotaRequest>,
    ) -> Result<Response<pb::QuotaState>, Status> {
        self.authorize_read(&request)?;
        let req = request.into_inner();
        let entries = entries_of(&req.domain, &req.entries)?;
        Ok(Response::new(
            peek(&self.state, &req.domain, &entries).await,
        ))
    }

    async fn list_quotas(
        &self,
        request: Request<pb::ListQuotasRequest>,
    ) -> Result<Response<pb::ListQuotasResponse>, Status> {
        self.authorize_read(&request)?;
        let req = request.into_inner();
        let size = match req.page_size {
            0 => 100,
            n => n.min(1_000) as usize,
        };
        let after = if req.page_token.is_empty() {
            None
        } else {
            Some(cursor_of(&req.page_token).ok_or_else(|| {
                Status::invalid_argument("page_token is not one this server issued")
            })?)
        };
        let filter = KeyFilter {
            domain: req.domain,
            rule: req.rule,
            prefix: req.prefix,
        };
        known_filter(&self.state.engine.rules(), &filter)?;
        // One pass over every tracked key: off the async workers, and one at a time, so
        // decisions keep flowing and their cores.
        let Some(scan) = self.state.scans.start(&self.state.limits) else {
            self.state.metrics.refusals("table_scans").inc();
            return Err(Status::resource_exhausted(
                "another ListQuotas page is being listed; try again in a moment",
            ));
        };
        let engine = Arc::clone(&self.state.engine);
        let page = tokio::task::spawn_blocking(move || {
            let _scan = scan;
            engine.tracked_page(&filter, after.as_deref(), size)
        })
        .await
        .map_err(|e| Status::internal(format!("listing failed: {e}")))?;
        Ok(Response::new(pb::ListQuotasResponse {
            keys: page
                .keys
                .into_iter()
                .map(|k| pb::TrackedKey {
                    domain: k.domain,
                    rule: k.rule,
                    values: k.values,
                    mode: k.mode.as_str().into(),
                    local_lease: k.local_lease,
                    idle_seconds: k.idle.as_secs_f64(),
                })
                .collect(),
            next_page_token: page.next.map(|c| token_of(&c)).unwrap_or_default(),
            total: page.total,
        }))
    }

    async fn top_denied(
        &self,
        request: Request<pb::TopDeniedRequest>,
    ) -> Result<Response<pb::TopDeniedResponse>, Status> {
        self.authorize_read(&request)?;
        crate::top::top(&self.state, request.into_inner())
            .await
            .map(Response::new)
    }

    type WatchQuotaStream = WatchStream;

    async fn watch_quota(
        &self,
        request: Request<pb::WatchQuotaRequest>,
    ) -> Result<Response<Self::WatchQuotaStream>, Status> {
        // Bounded per connection, per address and in all, and closed when idle, by the gRPC
        // server (`crate::admission`).
        self.authorize_read(&request)?;
        let req = request.into_inner();
        let entries = entries_of(&req.domain, &req.entries)?;
        let every = req
            .interval
            .map(|d| crate::durations::from_prost(&d))
            .filter(|d| !d.is_zero())
            .unwrap_or(Duration::from_secs(1))
            .clamp(Duration::from_millis(100), Duration::from_secs(3_600));
        let state = Arc::clone(&self.state);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let stop = state.background.stop.clone();
        self.state.background.tasks.spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                // Ends when the client goes away, not only at its next send.
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tx.closed() => return,
                    _ = tick.tick() => {}
                }
                if state.is_draining() {
                    return;
                }
                if tx
                    .send(Ok(peek(&state, &req.domain, &entries).await))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn reset_quota(
        &self,
        request: Request<pb::ResetQuotaRequest>,
    ) -> Result<Response<pb::QuotaState>, Status> {
        let result = self.reset(request).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(s) => match s.code() {
                tonic::Code::Unauthenticated => "unauthenticated",
                tonic::Code::PermissionDenied => "disabled",
                tonic::Code::NotFound => "not_found",
                _ => "failed",
            },
        };
        self.state
            .metrics
            .resets
            .with_label_values(&[outcome])
            .inc();
        result
    }

    async fn list_assignments(
        &self,
        request: Request<pb::ListAssignmentsRequest>,
    ) -> Result<Response<pb::ListAssignmentsResponse>, Status> {
        self.authorize_read(&request)?;
        let domain = &request.get_ref().domain;
        Ok(Response::new(pb::ListAssignmentsResponse {
            assignments: crate::assignments::assignments(&self.state.rlqs, domain),
        }))
    }

    async fn list_rules(
        &self,
        request: Request<pb::ListRulesRequest>,
    ) -> Result<Response<pb::ListRulesResponse>, Status> {
        self.authorize_read(&request)?;
        let rules = self.state.engine.rules();
        let version = self.state.runtime.load().version.clone();
        Ok(Response::new(pb::ListRulesResponse {
            config_version: version,
            rules: rules.rules().iter().map(rule_of).collect(),
        }))
    }
}

/// Refuses (NOT_FOUND) a listing filtered by a domain or rule the loaded config does not have:
/// a typo would otherwise list nothing and look like a quiet instance.
pub(crate) fn known_filter(rules: &sluice_core::RuleSet, filter: &KeyFilter) -> Result<(), Status> {
    // No name in a config is longer; the refusal below echoes what was asked for.
    for (what, value) in [("domain", &filter.domain), ("rule", &filter.rule)] {
        if value.len() > validate::MAX_ENTRY_BYTES {
            return Err(Status::invalid_argument(format!(
                "the {what} filter is {} bytes; the limit is {}",
                value.len(),
                validate::MAX_ENTRY_BYTES
            )));
        }
    }
    if !filter.domain.is_empty() && !rules.has_domain(&filter.domain) {
        return Err(Status::not_found(format!(
            "no domain {:?} in the loaded config (`sluice rules` lists them)",
            filter.domain
        )));
    }
    if !filter.rule.is_empty()
        && !rules
            .rules()
            .iter()
            .any(|r| filter.matches_rule(&r.domain, &r.label))
    {
        return Err(Status::not_found(format!(
            "no rule {:?}{} in the loaded config (`sluice rules` lists their names)",
            filter.rule,
            if filter.domain.is_empty() {
                String::new()
            } else {
                format!(" in domain {:?}", filter.domain)
            }
        )));
    }
    Ok(())
}

/// The API form of a rule.
pub fn rule_of(r: &sluice_core::Rule) -> pb::Rule {
    let mut out = pb::Rule {
        domain: r.domain.clone(),
        name: r.label.clone(),
        path: r.path.clone(),
        shadow_mode: r.shadow_mode,
        source: format!("{}:{}", r.file.display(), r.line),
        ..pb::Rule::default()
    };
    match r.limit {
        Limit::Unlimited => out.unlimited = true,
        Limit::Limited {
            rate,
            mode,
            fallback,
            payment,
            ..
        } => {
            out.requests_per_unit = rate.requests_per_unit;
            out.unit = rate.unit.to_string();
            out.unit_multiplier = rate.unit_multiplier;
            out.burst = rate.burst;
            out.mode = mode.as_str().into();
            out.fallback = fallback.as_str().into();
            out.charge = payment.as_str().into();
            out.max_debt = payment.max_debt().unwrap_or(0);
            out.algorithm = rate.algorithm.as_str().into();
        }
    }
    out
}

/// The JSON form of a rule, as `/config` and `sluice rules -o json` print it.
pub fn rule_json(r: &pb::Rule) -> serde_json::Value {
    serde_json::json!({
        "domain": r.domain, "name": r.name, "path": r.path,
        "requests_per_unit": r.requests_per_unit, "unit": r.unit,
        "unit_multiplier": r.unit_multiplier.max(1), "burst": r.burst,
        "algorithm": r.algorithm, "mode": r.mode, "fallback": r.fallback,
        "shadow_mode": r.shadow_mode, "unlimited": r.unlimited, "source": r.source,
        "charge": r.charge, "max_debt": r.max_debt,
    })
}
