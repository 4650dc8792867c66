//! `TopDenied` and `/quota/top`: who is being limited, fleet-wide ([`sluice_engine::top`]).

use sluice_engine::quota::KeyFilter;
use sluice_engine::top::{SLOT_SECS, WINDOW_SLOTS};
use sluice_proto::sluice::v1 as pb;
use tonic::Status;

use crate::state::AppState;

/// Rows when the caller names no limit.
const DEFAULT_ROWS: usize = 10;

/// Most rows one answer carries.
const MAX_ROWS: usize = 1_000;

/// The heaviest denied keys of the rules `req` selects, or why not.
pub async fn top(
    state: &AppState,
    req: pb::TopDeniedRequest,
) -> Result<pb::TopDeniedResponse, Status> {
    let filter = KeyFilter {
        domain: req.domain,
        rule: req.rule,
        prefix: String::new(),
    };
    crate::quota::known_filter(&state.engine.rules(), &filter)?;
    let n = match req.limit {
        0 => DEFAULT_ROWS,
        n => (n as usize).min(MAX_ROWS),
    };
    let rows = state
        .engine
        .top_denied(&filter, n)
        .await
        .map_err(|e| Status::unavailable(format!("the store did not answer: {e}")))?;
    Ok(pb::TopDeniedResponse {
        rows: rows
            .into_iter()
            .map(|r| pb::TopDenied {
                domain: r.domain,
                rule: r.rule,
                values: r.values,
                denied: r.denied,
            })
            .collect(),
        window_seconds: u32::try_from(WINDOW_SLOTS * SLOT_SECS).unwrap_or(u32::MAX),
        store: state.engine.store().name().into(),
    })
}

/// The JSON form, as `/quota/top` and `sluice quota top -o json` print it: every row carries
/// the values and a number `denied`.
pub fn top_json(t: &pb::TopDeniedResponse) -> serde_json::Value {
    serde_json::json!({
        "window_seconds": t.window_seconds,
        "store": t.store,
        "rows": t.rows.iter().map(|r| serde_json::json!({
            "domain": r.domain, "rule": r.rule, "values": r.values, "denied": r.denied,
        })).collect::<Vec<_>>(),
    })
}
