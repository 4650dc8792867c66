//! `sluice quota get|list|top|assignments|reset|watch`: reading (and resetting) the quota state of a
//! running sluice, and how it is printed.

use anyhow::Context;
use serde_json::json;
use sluice_proto::sluice::v1 as pb;
use sluice_proto::sluice::v1::Assignment;
use sluice_proto::sluice::v1::quota_client::QuotaClient;

use crate::cli::{Output, QuotaCommand, RuleFilter};
use crate::connect::{channel, entries, reader, status_error};
use crate::output::{out, period, table};

/// `sluice quota …`.
pub async fn quota(command: QuotaCommand) -> anyhow::Result<()> {
    match command {
        QuotaCommand::Get { target, descriptor } => {
            let mut client = reader(&target).await?;
            let state = client
                .get_quota(pb::GetQuotaRequest {
                    domain: descriptor.domain.clone(),
                    entries: entries(&descriptor),
                })
                .await
                .map_err(status_error)?
                .into_inner();
            print_state(&state, target.output);
            // A typo in the domain is not "not limited": say so, and fail.
            if state.unknown_domain {
                return Err(unknown_domain(&descriptor.domain));
            }
        }
        QuotaCommand::Top {
            target,
            rules: RuleFilter { domain, rule },
            limit,
        } => {
            let top = reader(&target)
                .await?
                .top_denied(pb::TopDeniedRequest {
                    domain,
                    rule,
                    limit,
                })
                .await
                .map_err(status_error)?
                .into_inner();
            print_top(&top, target.output);
        }
        QuotaCommand::List {
            target,
            rules: RuleFilter { domain, rule },
            prefix,
            limit,
        } => {
            let mut client = reader(&target).await?;
            let request = pb::ListQuotasRequest {
                domain,
                rule,
                prefix,
                page_size: limit,
                page_token: String::new(),
            };
            // One page is listed at a time per server: a refusal means another is being
            // listed, so wait a moment and ask again (a few times).
            let mut attempt = 0;
            let resp = loop {
                match client.list_quotas(request.clone()).await {
                    Err(s) if s.code() == tonic::Code::ResourceExhausted && attempt < 5 => {
                        attempt += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(200 * attempt)).await;
                    }
                    other => break other.map_err(status_error)?.into_inner(),
                }
            };
            if target.output == Output::Json {
                let keys: Vec<_> = resp
                    .keys
                    .iter()
                    .map(|k| json!({"domain": k.domain, "rule": k.rule, "values": k.values, "mode": k.mode, "local_lease": k.local_lease, "idle_seconds": k.idle_seconds}))
                    .collect();
                out(&json!({"total": resp.total, "keys": keys}).to_string());
            } else {
                let mut rows = vec![vec![
                    "DOMAIN".into(),
                    "RULE".into(),
                    "VALUES".into(),
                    "MODE".into(),
                    "LEASE".into(),
                    "IDLE".into(),
                ]];
                for k in &resp.keys {
                    rows.push(vec![
                        k.domain.clone(),
                        k.rule.clone(),
                        k.values.clone(),
                        k.mode.clone(),
                        k.local_lease.to_string(),
                        format!("{:.1}s", k.idle_seconds),
                    ]);
                }
                table(&rows);
                out(&format!(
                    "{} of {} tracked keys",
                    resp.keys.len(),
                    resp.total
                ));
            }
        }
        QuotaCommand::Assignments { target, domain } => {
            let mut client = reader(&target).await?;
            let resp = client
                .list_assignments(pb::ListAssignmentsRequest { domain })
                .await
                .map_err(status_error)?
                .into_inner();
            print_assignments(&resp.assignments, target.output);
        }
        QuotaCommand::Reset {
            target,
            descriptor,
            token_env,
        } => {
            let token = std::env::var(&token_env)
                .with_context(|| format!("the reset token: set {token_env}"))?;
            let mut request = tonic::Request::new(pb::ResetQuotaRequest {
                domain: descriptor.domain.clone(),
                entries: entries(&descriptor),
            });
            let bearer = format!("Bearer {token}")
                .parse()
                .context("the token is not a valid header value")?;
            request.metadata_mut().insert("authorization", bearer);
            let mut client = QuotaClient::new(channel(&target).await?);
            let state = client
                .reset_quota(request)
                .await
                .map_err(status_error)?
                .into_inner();
            print_state(&state, target.output);
        }
        QuotaCommand::Watch {
            target,
            descriptor,
            interval,
        } => crate::watch::watch(target, descriptor, interval).await?,
    }
    Ok(())
}

fn print_state(s: &pb::QuotaState, output: Output) {
    if output == Output::Json {
        out(&sluice_server::quota::state_json(s).to_string());
        return;
    }
    if !s.matched {
        out(&format!("not limited: {}", s.reason));
        return;
    }
    let mut rows = vec![
        vec!["rule".to_string(), s.rule.clone()],
        vec!["matched because".into(), s.reason.clone()],
        vec![
            "limit".into(),
            format!(
                "{} per {} (burst {})",
                s.requests_per_unit,
                period(&s.unit, s.unit_multiplier),
                s.burst
            ),
        ],
        vec!["global remaining".into(), remaining(s)],
        vec!["this instance's lease".into(), s.local_lease.to_string()],
    ];
    if s.charge == "post_paid" {
        let debt = if s.remaining_unknown {
            "unknown".into()
        } else if s.debt > 0 {
            format!("{} (checks denied until repaid)", s.debt)
        } else {
            "0".into()
        };
        rows.push(vec![
            "charge".into(),
            format!("post_paid (max debt {})", s.max_debt),
        ]);
        rows.push(vec!["debt".into(), debt]);
    }
    rows.extend([
        vec!["full again in".into(), until_full(s)],
        vec![
            "mode".into(),
            format!(
                "{} (fallback {}){}",
                s.mode,
                s.fallback,
                if s.shadow_mode { ", shadow" } else { "" }
            ),
        ],
        vec![
            "store".into(),
            format!(
                "{}{}",
                s.store,
                if s.degraded {
                    " (DEGRADED: fallback applies)"
                } else {
                    ""
                }
            ),
        ],
    ]);
    if s.holds > 0 {
        rows.push(vec![
            "held here".into(),
            format!("{} in {} holds of requests in flight", s.held, s.holds),
        ]);
    }
    rows.push(vec!["last denied here".into(), last_denial(s)]);
    // Further limits of the descriptor (`rate_limits`): each with its own remaining.
    for (i, more) in s.limits.iter().enumerate() {
        rows.push(vec![
            format!("limit {}", i + 2),
            format!(
                "{}: {} per {} (burst {}), remaining {}, this instance's lease {}, full in {}, last denied here {}",
                more.rule,
                more.requests_per_unit,
                period(&more.unit, more.unit_multiplier),
                more.burst,
                remaining(more),
                more.local_lease,
                until_full(more),
                last_denial(more)
            ),
        ]);
    }
    table(&rows);
}

/// `quota top`: one row per key, most denied first, then how much time the counts cover.
fn print_top(t: &pb::TopDeniedResponse, output: Output) {
    if output == Output::Json {
        out(&sluice_server::top::top_json(t).to_string());
        return;
    }
    let mut rows = vec![
        ["DENIED", "DOMAIN", "RULE", "VALUES"]
            .map(String::from)
            .to_vec(),
    ];
    for r in &t.rows {
        rows.push(vec![
            r.denied.to_string(),
            r.domain.clone(),
            r.rule.clone(),
            r.values.clone(),
        ]);
    }
    table(&rows);
    out(&format!(
        "{} keys; hits denied in the last {} s by every sidecar sharing the {} store",
        t.rows.len(),
        t.window_seconds,
        t.store
    ));
}

/// When and why this instance last denied the key under this limit: `4.2s ago (2026-…Z):
/// over_limit`, or `never` (while it tracks the key).
fn last_denial(s: &pb::QuotaState) -> String {
    let Some(d) = &s.last_denial else {
        return "never (while tracked)".into();
    };
    use sluice_core::Clock as _;
    // RFC 3339 ends with year 9999; a server's answer past it is shown as sent.
    const YEAR_10000_MICROS: u64 = 253_402_300_800_000_000;
    let at = if d.at_unix_micros < YEAR_10000_MICROS {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(d.at_unix_micros);
        humantime::format_rfc3339_seconds(at).to_string()
    } else {
        format!("{} µs after 1970", d.at_unix_micros)
    };
    let now = sluice_core::SystemClock::new().now_micros();
    format!(
        "{:.1}s ago ({at}): {}{}",
        now.saturating_sub(d.at_unix_micros) as f64 / 1e6,
        d.reason,
        if d.fallback {
            " (by the fallback: the store was unavailable)"
        } else {
            ""
        }
    )
}

/// The global bucket's tokens, or why they are unknown (the store did not answer the peek).
pub(crate) fn remaining(s: &pb::QuotaState) -> String {
    if s.remaining_unknown {
        format!("unknown: {}", s.store_error)
    } else {
        format!("{:.2}", s.global_remaining)
    }
}

/// The time until the bucket is full again, or `unknown` (the store did not answer the peek).
fn until_full(s: &pb::QuotaState) -> String {
    if s.remaining_unknown {
        "unknown".into()
    } else {
        let seconds = sluice_server::durations::seconds(s.until_full.as_ref());
        format!("{seconds:.1}s")
    }
}

/// A `--domain` the loaded config does not have: an error, not "not limited".
pub(crate) fn unknown_domain(domain: &str) -> anyhow::Error {
    anyhow::anyhow!("no domain {domain:?} in the loaded config (`sluice rules` lists them)")
}

/// Prints RLQS assignments: one row per bucket and Envoy.
pub fn print_assignments(assignments: &[Assignment], output: Output) {
    let bucket = |a: &Assignment| {
        a.bucket
            .iter()
            .map(|e| format!("{}={}", e.key, e.value))
            .collect::<Vec<_>>()
            .join("|")
    };
    if output == Output::Json {
        let rows: Vec<_> = assignments
            .iter()
            .map(|a| {
                json!({
                    "envoy": a.envoy, "stream": a.stream, "domain": a.domain, "rule": a.rule,
                    "bucket": bucket(a), "strategy": a.strategy,
                    "tokens_per_second": a.tokens_per_second, "demand": a.demand,
                    "allowed": a.allowed, "denied": a.denied, "unpaid": a.unpaid,
                })
            })
            .collect();
        out(&json!({ "assignments": rows }).to_string());
        return;
    }
    let mut rows = vec![
        [
            "ENVOY", "DOMAIN", "RULE", "BUCKET", "STRATEGY", "TOKENS/S", "DEMAND/S", "ALLOWED",
            "DENIED",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for a in assignments {
        rows.push(vec![
            a.envoy.clone(),
            a.domain.clone(),
            a.rule.clone(),
            bucket(a),
            format!("{}{}", a.strategy, if a.unpaid { " (unpaid)" } else { "" }),
            format!("{:.2}", a.tokens_per_second),
            a.demand.map_or_else(|| "-".into(), |d| format!("{d:.2}")),
            a.allowed.to_string(),
            a.denied.to_string(),
        ]);
    }
    table(&rows);
    out(&format!("{} buckets", assignments.len()));
}
