//! Dry runs: the global `shadow_mode` switch, and sampled logs of would-deny decisions.

use sluice_core::SampledLine;
use sluice_engine::{Code, Decision};

/// At most one would-deny log line per second, so a dry run cannot flood the logs.
#[derive(Debug, Default)]
pub struct ShadowLog {
    line: SampledLine,
}

/// Turns denials into OKs when the global switch is on (flagging them `shadow_over_limit`), and
/// logs would-deny decisions of the switch or of shadow-mode rules, sampled.
pub fn apply(decision: &mut Decision, global: bool, log: &ShadowLog, domain: &str) {
    if global && decision.overall == Code::OverLimit {
        for o in &mut decision.outcomes {
            if o.code == Code::OverLimit {
                o.code = Code::Ok;
                o.shadow_over_limit = true;
                o.retry_after = None;
            }
        }
        decision.overall = Code::Ok;
    }
    if let Some(o) = decision.outcomes.iter().find(|o| o.shadow_over_limit)
        && let Some(unlogged) = log.line.sample_now()
    {
        let rule = o
            .limit
            .and_then(|l| l.rule)
            .and_then(|id| decision.rules.rule(id))
            .map_or("override", |r| r.label.as_str());
        tracing::info!(
            domain,
            rule,
            global,
            unlogged_since_last_line = unlogged,
            "shadow mode: would have denied (sampled: at most one line per second)"
        );
    }
}
