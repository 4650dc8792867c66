//! `sluice rules`: the rules a running sluice enforces, with its config version.

use serde_json::json;
use sluice_proto::sluice::v1 as pb;

use crate::cli::{Output, Target};
use crate::connect::{reader, status_error};
use crate::output::{out, period, table};

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
            .map(|r| json!({"domain": r.domain, "name": r.name, "path": r.path, "requests_per_unit": r.requests_per_unit, "unit": r.unit, "unit_multiplier": r.unit_multiplier.max(1), "burst": r.burst, "mode": r.mode, "fallback": r.fallback, "shadow_mode": r.shadow_mode, "unlimited": r.unlimited, "source": r.source, "charge": r.charge, "max_debt": r.max_debt}))
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
            format!(
                "{}/{}",
                r.requests_per_unit,
                period(&r.unit, r.unit_multiplier)
            )
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
