//! `sluice quota get|list|top|assignments|reset|watch`: reading (and resetting) the quota state of a
//! running sluice, and how it is printed.

use anyhow::Context;
use serde_json::json;
use sluice_proto::sluice::v1 as pb;
use sluice_proto::sluice::v1::Assignment;
use sluice_proto::sluice::v1::quota_client::QuotaClient;

use crate::cli::{Output, QuotaCommand, RuleFilter};
use crate::connect::{channel, entries, reader, status_error};
use crate::output::{out, table};
use crate::state::print_state;

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
