//! `sluice check`: one ShouldRateLimit call, as Envoy would make it, and its answer.

use anyhow::bail;
use serde_json::json;
use sluice_proto::envoy::common_ratelimit::RateLimitDescriptor;
use sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::Entry as EnvoyEntry;
use sluice_proto::envoy::ratelimit::RateLimitRequest;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;

use crate::cli::{DescriptorArgs, Output, Target};
use crate::connect::{channel, status_error};
use crate::output::out;

/// `sluice check`: one ShouldRateLimit call.
pub async fn check(target: Target, descriptor: DescriptorArgs, hits: u32) -> anyhow::Result<()> {
    let mut client = RateLimitServiceClient::new(channel(&target).await?);
    let resp = client
        .should_rate_limit(RateLimitRequest {
            domain: descriptor.domain.clone(),
            descriptors: vec![RateLimitDescriptor {
                entries: descriptor
                    .entries
                    .iter()
                    .map(|(k, v)| EnvoyEntry {
                        key: k.clone(),
                        value: v.clone(),
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            }],
            hits_addend: hits,
        })
        .await
        .map_err(status_error)?
        .into_inner();
    let code = |c: i32| Code::try_from(c).map_or("UNKNOWN", |c| c.as_str_name());
    let s = resp.statuses.first();
    let limit = s.and_then(|s| s.current_limit.as_ref());
    let reset = s
        .and_then(|s| s.duration_until_reset.as_ref())
        .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9);
    if target.output == Output::Json {
        out(&json!({
            "overall_code": code(resp.overall_code),
            "limit": limit.map(|l| json!({"name": l.name, "requests_per_unit": l.requests_per_unit, "unit": sluice_core::Unit::from_envoy_code(l.unit).map(sluice_core::Unit::as_str)})),
            "remaining": s.map(|s| s.limit_remaining),
            "reset_seconds": reset,
        })
        .to_string());
    } else {
        let limit_text = limit.map_or("no limit".to_string(), |l| {
            let unit =
                sluice_core::Unit::from_envoy_code(l.unit).map_or("?", sluice_core::Unit::as_str);
            // RLS names only rules given a `name:`; an unnamed one is not shown as "()".
            if l.name.is_empty() {
                format!("{} per {unit}", l.requests_per_unit)
            } else {
                format!("{} per {unit} ({})", l.requests_per_unit, l.name)
            }
        });
        out(&format!(
            "{}  limit: {limit_text}  remaining: {}  full again in {reset:.1}s",
            code(resp.overall_code),
            s.map_or(0, |s| s.limit_remaining)
        ));
    }
    if resp.overall_code == Code::OverLimit as i32 {
        bail!("over the limit");
    }
    Ok(())
}
