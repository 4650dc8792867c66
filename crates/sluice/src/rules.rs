//! `sluice rules`: the rules a running sluice enforces, with its config version.

use serde_json::json;
use sluice_proto::sluice::v1 as pb;

use crate::cli::{Output, Target};
use crate::connect::{reader, status_error};
use crate::output::{Shape, out, table};

/// `sluice rules`.
pub async fn rules(target: Target) -> anyhow::Result<()> {
    let mut client = reader(&target).await?;
    let resp = client
        .list_rules(pb::ListRulesRequest {})
        .await
        .map_err(status_error)?
        .into_inner();
    if target.output == Output::Json {
        let rules: Vec<_> = resp
            .rules
            .iter()
            .map(sluice_server::quota::rule_json)
            .collect();
        out(&json!({"config_version": resp.config_version, "rules": rules}).to_string());
        return Ok(());
    }
    let mut rows = vec![vec![
        "DOMAIN".into(),
        "NAME".into(),
        "PATH".into(),
        "LIMIT".into(),
        "BURST".into(),
        "MODE".into(),
        "SOURCE".into(),
    ]];
    for r in &resp.rules {
        let limit = if r.unlimited {
            "unlimited".into()
        } else {
            Shape::from(r).short()
        };
        let mut mode = r.mode.clone();
        if r.charge == "post_paid" {
            mode.push_str(&format!(", post_paid (max debt {})", r.max_debt));
        }
        if r.shadow_mode {
            mode.push_str(" (shadow)");
        }
        rows.push(vec![
            r.domain.clone(),
            r.name.clone(),
            r.path.clone(),
            limit,
            r.burst.to_string(),
            mode,
            r.source.clone(),
        ]);
    }
    table(&rows);
    out(&format!("config version {}", resp.config_version));
    Ok(())
}
