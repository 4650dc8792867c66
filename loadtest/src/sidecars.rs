//! What the harnesses share: waiting for sidecars to reach Redis, counting Redis script calls.

use std::time::{Duration, Instant};

use anyhow::bail;
use sluice_testkit::process::{Sluice, http_get};

/// The sum over the sidecars of every `/metrics` sample whose line (name and labels) `keep`s.
pub fn sum_metric(sidecars: &[Sluice], keep: impl Fn(&str) -> bool) -> f64 {
    sidecars
        .iter()
        .flat_map(|s| {
            http_get(s.admin.port(), "/metrics", &[])
                .body
                .lines()
                .filter(|l| !l.starts_with('#') && keep(l))
                .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// Waits until every sidecar reports it reaches its store (`/readyz`: `degraded: false`).
pub async fn wait_connected(sidecars: &[Sluice]) -> anyhow::Result<()> {
    for s in sidecars {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !http_get(s.admin.port(), "/readyz", &[])
            .body
            .contains("degraded: false")
        {
            if Instant::now() > deadline {
                bail!("sidecar {} did not reach Redis", s.admin);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

/// EVALSHA + EVAL calls served, summed over the nodes (`INFO commandstats`).
pub async fn script_calls(ports: &[u16]) -> anyhow::Result<u64> {
    commands_served(ports, |name| matches!(name, "evalsha" | "eval")).await
}

/// Calls of the commands whose lowercase name `keep`s, summed over the nodes (`INFO
/// commandstats`; it also counts the commands scripts run inside Redis).
pub async fn commands_served(ports: &[u16], keep: impl Fn(&str) -> bool) -> anyhow::Result<u64> {
    let mut total = 0;
    for port in ports {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
        // A node killed by a failover fault is gone: its calls are not counted.
        let Ok(mut c) = client.get_multiplexed_async_connection().await else {
            continue;
        };
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut c)
            .await?;
        for line in info.lines() {
            let Some((name, stats)) = line
                .strip_prefix("cmdstat_")
                .and_then(|rest| rest.split_once(':'))
            else {
                continue;
            };
            if keep(name) {
                total += stats
                    .split(['=', ','])
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    Ok(total)
}
