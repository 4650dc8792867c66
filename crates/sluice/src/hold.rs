//! `sluice hold acquire|release`: holds over `sluice.v1.Holds`.

use serde_json::json;
use sluice_proto::sluice::v1::holds_client::HoldsClient;
use sluice_proto::sluice::v1::{AcquireRequest, HoldDescriptor, ReleaseRequest};

use crate::cli::{HoldCommand, Output};
use crate::connect::{channel, entries, status_error};
use crate::output::{out, table};

/// Runs one `hold` subcommand. A denied acquire is an error (exit 1), so scripts can test it.
pub async fn hold(command: HoldCommand) -> anyhow::Result<()> {
    match command {
        HoldCommand::Acquire {
            target,
            descriptor,
            estimate,
        } => {
            let mut client = HoldsClient::new(channel(&target).await?);
            let resp = client
                .acquire(AcquireRequest {
                    domain: descriptor.domain.clone(),
                    descriptors: vec![HoldDescriptor {
                        entries: entries(&descriptor),
                        estimate,
                        used: 0,
                    }],
                })
                .await
                .map_err(status_error)?
                .into_inner();
            let status = resp.statuses.first();
            let rule = status.map(|s| s.rule.clone()).unwrap_or_default();
            let remaining = status.map_or(0, |s| s.remaining);
            let denial = status.map(|s| s.denial.clone()).unwrap_or_default();
            if target.output == Output::Json {
                out(&json!({
                    "ok": resp.ok, "token": resp.token, "rule": rule, "remaining": remaining,
                    "denial": denial,
                })
                .to_string());
            } else if resp.ok {
                table(&[
                    vec!["token".into(), resp.token.clone()],
                    vec!["rule".into(), rule],
                    vec!["remaining".into(), remaining.to_string()],
                ]);
            }
            if !resp.ok {
                anyhow::bail!("denied ({denial}): nothing held");
            }
            Ok(())
        }
        HoldCommand::Release {
            target,
            descriptor,
            token,
            used,
        } => {
            let mut client = HoldsClient::new(channel(&target).await?);
            let resp = client
                .release(ReleaseRequest {
                    domain: descriptor.domain.clone(),
                    token,
                    descriptors: vec![HoldDescriptor {
                        entries: entries(&descriptor),
                        estimate: None,
                        used,
                    }],
                })
                .await
                .map_err(status_error)?
                .into_inner();
            if target.output == Output::Json {
                out(&json!({"released": resp.released}).to_string());
            } else {
                out(&format!("released {}", resp.released));
            }
            Ok(())
        }
    }
}
