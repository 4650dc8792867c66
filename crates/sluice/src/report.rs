//! `sluice report`: post-paid usage over `sluice.v1.Usage/Report`.

use serde_json::json;
use sluice_proto::sluice::v1::usage_client::UsageClient;
use sluice_proto::sluice::v1::{ReportRequest, UsageReport};

use crate::cli::{DescriptorArgs, Output, Target};
use crate::connect::{channel, entries, status_error};
use crate::output::{out, table};

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
    let until_full = sluice_server::durations::seconds(r.until_full.as_ref());
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
