//! `sluice report`: post-paid usage over `sluice.v1.Usage/Report`; and how `sluice quota
//! assignments` prints the RLQS usage Envoy reported.

use serde_json::json;
use sluice_proto::sluice::v1::usage_client::UsageClient;
use sluice_proto::sluice::v1::{Assignment, ReportRequest, UsageReport};

use crate::cli::{DescriptorArgs, Output, Target};
use crate::client::{channel, entries, out, status_error, table};

/// Reports `tokens` used under one descriptor and prints the budget after it.
pub async fn report(target: Target, descriptor: DescriptorArgs, tokens: u64) -> anyhow::Result<()> {
    let mut client = UsageClient::new(channel(&target).await?);
    let resp = client
        .report(ReportRequest {
            domain: descriptor.domain.clone(),
            reports: vec![UsageReport {
                entries: entries(&descriptor),
                tokens,
            }],
        })
        .await
        .map_err(status_error)?
        .into_inner();
    let r = resp
        .results
        .first()
        .ok_or_else(|| anyhow::anyhow!("the server answered no result"))?;
    let until_full = sluice_server::quota::seconds(r.until_full.as_ref());
    if target.output == Output::Json {
        out(&json!({
            "matched": r.matched, "rule": r.rule, "remaining": r.remaining, "debt": r.debt,
            "until_full_seconds": until_full,
        })
        .to_string());
    } else if !r.matched {
        out("not charged: no rule matches");
    } else {
        table(&[
            vec!["rule".into(), r.rule.clone()],
            vec!["charged".into(), tokens.to_string()],
            vec!["remaining".into(), r.remaining.to_string()],
            vec!["debt".into(), r.debt.to_string()],
            vec!["full again in".into(), format!("{until_full:.1}s")],
        ]);
    }
    Ok(())
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
