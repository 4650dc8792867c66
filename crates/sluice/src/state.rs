//! How `quota get`, `quota reset` and `quota watch` print one key's state: the limit in words,
//! what is left (tokens, or a concurrency limit's free and held slots), and the last denial.

use sluice_proto::sluice::v1 as pb;

use crate::cli::Output;
use crate::output::{Shape, out, table};

/// Prints a key's state: a table, or JSON.
pub(crate) fn print_state(s: &pb::QuotaState, output: Output) {
    if output == Output::Json {
        out(&sluice_server::quota::state_json(s).to_string());
        return;
    }
    if !s.matched {
        out(&format!("not limited: {}", s.reason));
        return;
    }
    let shape = Shape::from(s);
    let mut rows = vec![
        vec!["rule".to_string(), s.rule.clone()],
        vec!["matched because".into(), s.reason.clone()],
        vec!["limit".into(), shape.text()],
    ];
    if shape.is_concurrency() {
        // Slots: free ones in the store and in this instance's lease, held ones by requests in
        // flight here. They never refill, so no "full again in".
        rows.extend([
            vec!["free slots".into(), free_slots(s)],
            vec!["held here".into(), held(s)],
        ]);
    } else {
        rows.extend([
            vec!["global remaining".into(), remaining(s)],
            vec!["this instance's lease".into(), s.local_lease.to_string()],
        ]);
    }
    if s.charge == "post_paid" {
        let debt = if s.remaining_unknown {
            "unknown".into()
        } else if s.debt > 0 {
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
    if !shape.is_concurrency() {
        rows.push(vec!["full again in".into(), until_full(s)]);
    }
    rows.extend([
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
    if s.holds > 0 && !shape.is_concurrency() {
        rows.push(vec![
            "held here".into(),
            format!("{} in {} holds of requests in flight", s.held, s.holds),
        ]);
    }
    rows.push(vec!["last denied here".into(), last_denial(s)]);
    // Further limits of the descriptor (`rate_limits`): each with its own remaining.
    for (i, more) in s.limits.iter().enumerate() {
        let shape = Shape::from(more);
        let state = if shape.is_concurrency() {
            format!("free slots {}, held here {}", free_slots(more), held(more))
        } else {
            format!(
                "remaining {}, this instance's lease {}, full in {}",
                remaining(more),
                more.local_lease,
                until_full(more)
            )
        };
        rows.push(vec![
            format!("limit {}", i + 2),
            format!(
                "{}: {}, {state}, last denied here {}",
                more.rule,
                shape.text(),
                last_denial(more)
            ),
        ]);
    }
    table(&rows);
}

/// When and why this instance last denied the key under this limit: `4.2s ago (2026-…Z):
/// over_limit`, or `never` (while it tracks the key).
fn last_denial(s: &pb::QuotaState) -> String {
    let Some(d) = &s.last_denial else {
        return "never (while tracked)".into();
    };
    use sluice_core::Clock as _;
    // RFC 3339 ends with year 9999; a server's answer past it is shown as sent.
    const YEAR_10000_MICROS: u64 = 253_402_300_800_000_000;
    let at = if d.at_unix_micros < YEAR_10000_MICROS {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(d.at_unix_micros);
        humantime::format_rfc3339_seconds(at).to_string()
    } else {
        format!("{} µs after 1970", d.at_unix_micros)
    };
    let now = sluice_core::SystemClock::new().now_micros();
    format!(
        "{:.1}s ago ({at}): {}{}",
        now.saturating_sub(d.at_unix_micros) as f64 / 1e6,
        d.reason,
        if d.fallback {
            " (by the fallback: the store was unavailable)"
        } else {
            ""
        }
    )
}

/// The global bucket's tokens, or why they are unknown (the store did not answer the peek).
pub(crate) fn remaining(s: &pb::QuotaState) -> String {
    if s.remaining_unknown {
        format!("unknown: {}", s.store_error)
    } else {
        format!("{:.2}", s.global_remaining)
    }
}

/// A concurrency limit's free slots in the store (whole), or `unknown` (the store did not
/// answer the peek).
pub(crate) fn free(s: &pb::QuotaState) -> String {
    if s.remaining_unknown {
        format!("unknown: {}", s.store_error)
    } else {
        format!("{:.0}", s.global_remaining.max(0.0))
    }
}

/// Where a concurrency limit's free slots are: in the store and in the lease of the instance
/// asked, or (`mode: local`) all in that instance's own bucket.
fn free_slots(s: &pb::QuotaState) -> String {
    if s.mode == "local" {
        format!("{} (this instance's own: mode local)", free(s))
    } else {
        format!(
            "{} in the store, {} in this instance's lease",
            free(s),
            s.local_lease
        )
    }
}

/// A concurrency limit's slots held by requests in flight on the instance asked.
fn held(s: &pb::QuotaState) -> String {
    match (s.held, s.holds) {
        (0, _) => "none".into(),
        (1, _) => "1 slot, by 1 request in flight".into(),
        (slots, 1) => format!("{slots} slots, by 1 request in flight"),
        (slots, holds) => format!("{slots} slots, by {holds} requests in flight"),
    }
}

/// The time until the bucket is full again, or `unknown` (the store did not answer the peek).
fn until_full(s: &pb::QuotaState) -> String {
    if s.remaining_unknown {
        "unknown".into()
    } else {
        let seconds = sluice_server::durations::seconds(s.until_full.as_ref());
        format!("{seconds:.1}s")
    }
}
