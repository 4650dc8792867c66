//! `sluice quota watch`: a key's state as it changes, one line per change with the time it was
//! seen. A full table every tick buried the one change an on-call engineer looks for under
//! repeats, with nothing to say when it happened.

use std::time::{Duration, SystemTime};

use sluice_core::Clock as _;

use sluice_proto::sluice::v1 as pb;

use crate::cli::{DescriptorArgs, Output, Target};
use crate::connect::{entries, reader, status_error};
use crate::output::{Shape, out};
use crate::quota::unknown_domain;
use crate::state::{free, remaining};

/// Streams `WatchQuota` and prints what changed: in the table output, a header (rule, limit,
/// mode, store) whenever it changes, then a timestamped line whenever the numbers do; in JSON,
/// each changed state with a `time` field.
pub async fn watch(
    target: Target,
    descriptor: DescriptorArgs,
    interval: Duration,
) -> anyhow::Result<()> {
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
    let (mut header, mut line) = (String::new(), String::new());
    // Wall time since the Unix epoch, read once and then counted monotonically.
    let clock = sluice_core::SystemClock::new();
    while let Some(state) = stream.message().await.map_err(status_error)? {
        if state.unknown_domain {
            return Err(unknown_domain(&descriptor.domain));
        }
        let since_epoch = Duration::from_micros(clock.now_micros());
        let time = humantime::format_rfc3339_millis(SystemTime::UNIX_EPOCH + since_epoch);
        if target.output == Output::Json {
            let state = sluice_server::quota::state_json(&state).to_string();
            if state != line {
                out(&format!("{{\"time\":\"{time}\",\"state\":{state}}}"));
                line = state;
            }
            continue;
        }
        let now = header_of(&state);
        if now != header {
            out(&now);
            header = now;
            line.clear();
        }
        let now = numbers_of(&state);
        if now != line {
            out(&format!("{time}  {now}"));
            line = now;
        }
    }
    Ok(())
}

/// What changes only with the config or the store's health: the rule and its limit.
fn header_of(s: &pb::QuotaState) -> String {
    if !s.matched {
        return format!("not limited: {}", s.reason);
    }
    format!(
        "rule {}: {}, mode {}, store {}{}{}",
        s.rule,
        Shape::from(s).text(),
        s.mode,
        s.store,
        if s.degraded {
            " (DEGRADED: fallback applies)"
        } else {
            ""
        },
        if s.shadow_mode { ", shadow" } else { "" },
    )
}

/// What moves with traffic: remaining, lease, debt, and each further limit's remaining. Not the
/// time until full, which moves every tick while a bucket refills (`quota get` shows it).
fn numbers_of(s: &pb::QuotaState) -> String {
    if !s.matched {
        return String::new();
    }
    let mut line = if Shape::from(s).is_concurrency() {
        format!("free {}  lease {}  held {}", free(s), s.local_lease, s.held)
    } else {
        format!("remaining {}  lease {}", remaining(s), s.local_lease)
    };
    if s.charge == "post_paid" && !s.remaining_unknown {
        line.push_str(&format!("  debt {}", s.debt));
    }
    for more in &s.limits {
        line.push_str(&format!("  {} {}", more.rule, remaining(more)));
    }
    line
}
