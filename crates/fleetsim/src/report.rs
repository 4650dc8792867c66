//! The simulator's table (markdown, as loadtest/RESULTS.md keeps it).
//!
//! "False denials" compare request by request: the exact limiter admitted it, sluice denied it.
//! Under the limit that is the measure; over it (demand ≥ 100 %) the two admit different
//! requests of the same number, so read "short of exact" (how many fewer sluice admitted) and
//! "admitted of B+L·T" there, and beside it what the second half admitted of `L·T/2`: the
//! rate the fleet settled at, without the stock its leases took at the start; likewise the
//! store calls a second of the second half, without every sidecar's first calls.

use crate::run::Outcome;
use crate::scenario::{Arrivals, Leases};

/// The table's head.
pub const HEAD: &str = "| scenario | sidecars | demand | arrivals | burst | requests | exact admits | sluice admits | false denials | short of exact | over B+L·t (from the start; in any window) | admitted of B+L·T (second half: of L·T/2) | store calls/s (second half) | of them leases, returns | waited on the store | timed out |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";

/// One run's row.
pub fn row(o: &Outcome) -> String {
    let c = &o.case;
    let arrivals = match c.arrivals {
        Arrivals::Poisson => "poisson",
        Arrivals::Step => "in step",
        Arrivals::StepAnyOrder => "in step, any order",
        Arrivals::Hot => "one hot pod",
        Arrivals::Churn => "pods come and go",
    };
    let pct = |part: u64, of: u64| {
        if of == 0 {
            "0".to_string()
        } else {
            format!("{:.2}%", 100.0 * part as f64 / of as f64)
        }
    };
    format!(
        "| {} | {} | {:.0}% | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {:.1}% ({:.1}%) | {:.1} ({:.1}) | {}, {} | {} | {} |",
        match c.leases {
            Leases::Tokens => c.name.clone(),
            Leases::Rates => format!("{} (rates)", c.name),
        },
        c.sidecars,
        c.demand * 100.0,
        arrivals,
        c.burst,
        o.requests,
        o.exact_admitted,
        o.admitted,
        o.false_denials,
        pct(o.false_denials, o.requests),
        o.exact_admitted.saturating_sub(o.admitted),
        match (o.over > 0.0, o.over_window > 1e-6) {
            (false, false) => "no".to_string(),
            _ => format!("**{:.1}** (any window: **{:.1}**)", o.over, o.over_window),
        },
        100.0 * o.admitted as f64 / o.bound,
        100.0 * o.late_of_limit(),
        o.calls_per_sec(),
        o.late_calls_per_sec(),
        o.leases,
        o.releases,
        o.waited,
        o.timed_out,
    )
}
