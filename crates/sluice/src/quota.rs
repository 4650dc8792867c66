//! Client commands: `sluice quota get|list|watch`, `sluice rules`, `sluice check` (and what
//! `sluice report`, in `report.rs`, shares with them).

use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use sluice_proto::envoy::common_ratelimit::RateLimitDescriptor;
use sluice_proto::envoy::common_ratelimit::rate_limit_descriptor::Entry as EnvoyEntry;
use sluice_proto::envoy::ratelimit::RateLimitRequest;
use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use sluice_proto::sluice::v1 as pb;
use sluice_proto::sluice::v1::quota_client::QuotaClient;
use tonic::codegen::InterceptedService;
use tonic::transport::Channel;

use crate::cli::{DescriptorArgs, Output, QuotaCommand, Target};

/// A Quota client for reads: sends `authorization: Bearer $SLUICE_READ_TOKEN` when that is set
/// (a server with `admin.read_token_*` needs it; the token never appears on the command line).
async fn reader(
    target: &Target,
) -> anyhow::Result<QuotaClient<InterceptedService<Channel, ReadToken>>> {
    Ok(QuotaClient::with_interceptor(
        channel(target).await?,
        with_read_token as ReadToken,
    ))
}

type ReadToken = fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>;

fn with_read_token(mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    if let Ok(token) = std::env::var("SLUICE_READ_TOKEN") {
        let bearer = format!("Bearer {}", token.trim()).parse().map_err(|_| {
            tonic::Status::invalid_argument("SLUICE_READ_TOKEN is not a valid header value")
        })?;
        request.metadata_mut().insert("authorization", bearer);
    }
    Ok(request)
}

pub(crate) async fn channel(target: &Target) -> anyhow::Result<Channel> {
    let tls = target.addr.starts_with("https://")
        || target.ca_file.is_some()
        || target.cert_file.is_some();
    let addr = match (target.addr.contains("://"), tls) {
        (true, _) => target.addr.clone(),
        (false, true) => format!("https://{}", target.addr),
        (false, false) => format!("http://{}", target.addr),
    };
    let mut endpoint = Channel::from_shared(addr.clone())
        .with_context(|| format!("bad address {addr}"))?
        .connect_timeout(Duration::from_secs(3));
    if tls {
        let read = |p: &std::path::Path| {
            std::fs::read(p).with_context(|| format!("reading {}", p.display()))
        };
        let mut config = tonic::transport::ClientTlsConfig::new();
        if let Some(ca) = &target.ca_file {
            config = config.ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?));
        }
        if let (Some(cert), Some(key)) = (&target.cert_file, &target.key_file) {
            config = config.identity(tonic::transport::Identity::from_pem(
                read(cert)?,
                read(key)?,
            ));
        }
        endpoint = endpoint.tls_config(config).context("TLS settings")?;
    }
    endpoint
        .connect()
        .await
        .with_context(|| format!("connecting to {addr}"))
}

pub(crate) fn entries(d: &DescriptorArgs) -> Vec<pb::Entry> {
    d.entries
        .iter()
        .map(|(k, v)| pb::Entry {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

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
        }
        QuotaCommand::List {
            target,
            domain,
            rule,
            prefix,
            limit,
        } => {
            let mut client = reader(&target).await?;
            let resp = client
                .list_quotas(pb::ListQuotasRequest {
                    domain,
                    rule,
                    prefix,
                    page_size: limit,
                    page_token: String::new(),
                })
                .await
                .map_err(status_error)?
                .into_inner();
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
            crate::report::print_assignments(&resp.assignments, target.output);
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
        } => {
            let mut client = reader(&target).await?;
            let mut stream = client
                .watch_quota(pb::WatchQuotaRequest {
                    domain: descriptor.domain.clone(),
                    entries: entries(&descriptor),
                    interval: Some(prost_types::Duration {
                        seconds: interval.as_secs() as i64,
                        nanos: interval.subsec_nanos() as i32,
                    }),
                })
                .await
                .map_err(status_error)?
                .into_inner();
            while let Some(state) = stream.message().await.map_err(status_error)? {
                print_state(&state, target.output);
            }
        }
    }
    Ok(())
}

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
            format!("{} per {unit} ({})", l.requests_per_unit, l.name)
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

fn print_state(s: &pb::QuotaState, output: Output) {
    if output == Output::Json {
        out(&sluice_server::quota::state_json(s).to_string());
        return;
    }
    if !s.matched {
        out(&format!("not limited: {}", s.reason));
        return;
    }
    let until_full = sluice_server::quota::seconds(s.until_full.as_ref());
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
        vec![
            "global remaining".into(),
            format!("{:.2}", s.global_remaining),
        ],
        vec!["this instance's lease".into(), s.local_lease.to_string()],
    ];
    if s.charge == "post_paid" {
        let debt = if s.debt > 0 {
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
        vec!["full again in".into(), format!("{until_full:.1}s")],
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
    // Further limits of the descriptor (`rate_limits`): each with its own remaining.
    for (i, more) in s.limits.iter().enumerate() {
        let until_full = sluice_server::quota::seconds(more.until_full.as_ref());
        rows.push(vec![
            format!("limit {}", i + 2),
            format!(
                "{}: {} per {} (burst {}), {:.2} remaining, this instance's lease {}, full in {until_full:.1}s",
                more.rule,
                more.requests_per_unit,
                period(&more.unit, more.unit_multiplier),
                more.burst,
                more.global_remaining,
                more.local_lease
            ),
        ]);
    }
    table(&rows);
}

/// Prints rows as aligned columns.
pub(crate) fn table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|v| v.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{v:<w$}", w = widths[i]))
            .collect();
        out(line.join("  ").trim_end());
    }
}

#[allow(clippy::print_stdout)]
pub(crate) fn out(line: &str) {
    println!("{line}");
}

pub(crate) fn status_error(s: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{:?}: {}", s.code(), s.message())
}

/// A period as people write it: `minute`, or `10 minutes` for a unit multiplier of 10.
fn period(unit: &str, multiplier: u32) -> String {
    match multiplier {
        0 | 1 => unit.to_string(),
        n => format!("{n} {unit}s"),
    }
}
