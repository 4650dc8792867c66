//! One `rate_limit` into a [`Rule`]: its checks (with `file:line`), and the rule's stable
//! identity, [`fingerprint`], which every store key of its buckets carries.

use std::path::Path;

use super::rule::{Limit, MAX_DEBT, Payment, Reserve, Rule, RuleId};
use crate::error::ConfigError;
use crate::hash::{fnv1a, fnv1a_of};
use crate::rate::{MAX_PERIOD_SECS, Rate};
use crate::schema::{ChargeMode, Fallback, Mode, RateLimitConfig, ReserveConfig};
use crate::unit::Unit;

pub(super) fn compile_rule(
    file: &Path,
    line: u64,
    domain: &str,
    path: &str,
    shadow_mode: bool,
    rl: &RateLimitConfig,
    id: RuleId,
) -> Result<Rule, ConfigError> {
    let err = |l: u64, m: String| ConfigError::at(file, l, m);
    let unit = match &rl.unit {
        Some(u) => Some(
            u.value
                .parse::<Unit>()
                .map_err(|m| err(u.referenced.line(), m))?,
        ),
        None => None,
    };
    let limit = if let Some(slots) = rl.concurrency {
        concurrency_limit(rl, slots).map_err(|m| err(line, m))?
    } else if rl.hold_timeout.is_some() && rl.reserve.is_none() {
        return Err(err(
            line,
            "hold_timeout applies only with concurrency or reserve".into(),
        ));
    } else if rl.unlimited {
        if unit.is_some() {
            return Err(err(
                line,
                "should not specify rate limit unit when unlimited".into(),
            ));
        }
        if rl.burst.is_some()
            || rl.count_denied.is_some()
            || rl.algorithm.is_some()
            || rl.unit_multiplier.is_some()
            || rl.mode.is_some()
            || rl.fallback.is_some()
            || rl.charge.is_some()
            || rl.max_debt.is_some()
            || rl.reserve.is_some()
            || rl.requests_per_unit != 0
        {
            return Err(err(
                line,
                "an unlimited rate_limit takes no requests_per_unit, unit_multiplier, \
                 algorithm, burst, mode, fallback, charge, max_debt or reserve"
                    .into(),
            ));
        }
        Limit::Unlimited
    } else {
        let Some(unit) = unit else {
            return Err(err(
                line,
                "invalid rate limit unit '' (rate_limit needs a unit)".into(),
            ));
        };
        let rpu = u64::from(rl.requests_per_unit);
        let algorithm = rl.algorithm.unwrap_or_default();
        if algorithm.is_window() && rl.burst.is_some() {
            return Err(err(
                line,
                format!(
                    "burst applies to algorithm: token_bucket; a {} holds requests_per_unit",
                    algorithm.as_str().replace('_', " ")
                ),
            ));
        }
        if rl.count_denied.is_some() && algorithm != crate::rate::Algorithm::FixedWindow {
            return Err(err(
                line,
                "count_denied applies to algorithm: fixed_window".into(),
            ));
        }
        let burst = rl.burst.map_or(rpu, u64::from);
        let unit_multiplier = rl.unit_multiplier.unwrap_or(1);
        if unit_multiplier == 0 {
            return Err(err(line, "unit_multiplier must be at least 1".into()));
        }
        if unit.seconds().saturating_mul(u64::from(unit_multiplier)) > MAX_PERIOD_SECS {
            return Err(err(
                line,
                format!(
                    "a period of {unit_multiplier} {unit}s is longer than the longest, 100 years"
                ),
            ));
        }
        if rl.reserve.is_some() && rl.charge.unwrap_or_default() != ChargeMode::PostPaid {
            return Err(err(
                line,
                "reserve applies only with charge: post_paid".into(),
            ));
        }
        let payment = match (rl.charge.unwrap_or_default(), rl.max_debt) {
            (ChargeMode::Prepaid, Some(_)) => {
                return Err(err(
                    line,
                    "max_debt applies only with charge: post_paid".into(),
                ));
            }
            (ChargeMode::Prepaid, None) => Payment::Prepaid,
            (ChargeMode::PostPaid, Some(d)) if d > MAX_DEBT => {
                return Err(err(
                    line,
                    format!("max_debt {d} is above the largest, {MAX_DEBT} (2^53)"),
                ));
            }
            (ChargeMode::PostPaid, debt) => Payment::PostPaid {
                max_debt: debt.unwrap_or(burst),
                reserve: match &rl.reserve {
                    Some(r) => Some(reserve(r, rl, burst).map_err(|m| err(line, m))?),
                    None => None,
                },
            },
        };
        Limit::Limited {
            rate: Rate {
                requests_per_unit: rpu,
                unit,
                unit_multiplier,
                burst,
                algorithm,
            },
            mode: rl.mode.unwrap_or_default(),
            fallback: rl.fallback.unwrap_or_default(),
            payment,
        }
    };
    let count_denied = match limit {
        Limit::Limited { rate, .. } => {
            rate.algorithm == crate::rate::Algorithm::FixedWindow
                && rl.count_denied.unwrap_or(false)
        }
        Limit::Unlimited => false,
    };
    let mut replaces = Vec::with_capacity(rl.replaces.len());
    for r in &rl.replaces {
        if r.name.is_empty() {
            return Err(err(line, "should not have an empty replaces entry".into()));
        }
        if rl.name.as_deref() == Some(r.name.as_str()) {
            return Err(err(
                line,
                "replaces should not contain name of same descriptor".into(),
            ));
        }
        replaces.push(r.name.clone());
    }
    let explicit_name = rl.name.clone().filter(|n| !n.is_empty());
    let fingerprint = fingerprint(domain, path, &limit, shadow_mode);
    let label = explicit_name
        .clone()
        .unwrap_or_else(|| format!("{domain}:{path}"));
    Ok(Rule {
        id,
        label,
        domain: domain.to_string(),
        path: path.to_string(),
        explicit_name,
        limit,
        shadow_mode,
        quota_mode: false,
        metadata: None,
        count_denied,
        detailed_metric: false,
        limits: id..id + 1,
        replaces,
        fingerprint,
        file: file.to_path_buf(),
        line,
    })
}

/// `reserve: {default, max}` with the rule's `hold_timeout`: an estimate between 1 and the
/// burst (a larger one could never be paid), the default at most the max.
fn reserve(r: &ReserveConfig, rl: &RateLimitConfig, burst: u64) -> Result<Reserve, String> {
    let max = r.max.unwrap_or(burst);
    if max == 0 || max > burst {
        return Err(format!(
            "reserve.max must be between 1 and the burst ({burst}), not {max}: a larger estimate could never be paid"
        ));
    }
    if r.default == 0 || r.default > max {
        return Err(format!(
            "reserve.default must be between 1 and reserve.max ({max}), not {}",
            r.default
        ));
    }
    Ok(Reserve {
        default: r.default,
        max,
        hold_micros: hold_timeout(rl)?.saturating_mul(1_000_000),
    })
}

/// The rule's `hold_timeout` in whole seconds (default 5 minutes; 3 s to a day: a sidecar renews
/// its slots at least 2.5 s before they lapse, from sweeps a second apart).
fn hold_timeout(rl: &RateLimitConfig) -> Result<u64, String> {
    let timeout = rl.hold_timeout.map_or(
        std::time::Duration::from_secs(u64::from(DEFAULT_HOLD_TIMEOUT_SECS)),
        |d| d.0,
    );
    let secs = timeout.as_secs();
    if timeout.subsec_nanos() != 0 || secs < 3 || secs > u64::from(MAX_HOLD_TIMEOUT_SECS) {
        return Err(format!(
            "hold_timeout must be whole seconds from 3s (a sidecar renews its slots in time) to 24h, not {timeout:?}"
        ));
    }
    Ok(secs)
}

/// The hold timeout of a concurrency rule that sets none.
pub const DEFAULT_HOLD_TIMEOUT_SECS: u32 = 300;

/// The longest hold timeout: a day (a slot never given back is lost at most that long).
pub const MAX_HOLD_TIMEOUT_SECS: u32 = 86_400;

/// The most slots a concurrency rule may have: each held slot is a record in memory until it
/// is given back, so the bound keeps one key's holds bounded.
pub const MAX_CONCURRENCY: u32 = 1_000_000;

/// `rate_limit: {concurrency: N, hold_timeout: …}`: at most `N` requests in flight per key. A
/// limit of `N` slots never refilled ([`Algorithm::Concurrency`](crate::rate::Algorithm)), the
/// hold timeout as its period (whole seconds, 1 s to a day).
fn concurrency_limit(rl: &RateLimitConfig, slots: u32) -> Result<Limit, String> {
    if rl.unit.is_some()
        || rl.requests_per_unit != 0
        || rl.unit_multiplier.is_some()
        || rl.unlimited
        || rl.algorithm.is_some()
        || rl.burst.is_some()
        || rl.count_denied.is_some()
        || rl.charge.is_some()
        || rl.max_debt.is_some()
        || rl.reserve.is_some()
    {
        return Err(
            "a concurrency limit takes no unit, requests_per_unit, unit_multiplier, \
                    unlimited, algorithm, burst, count_denied, charge, max_debt or reserve"
                .into(),
        );
    }
    if slots == 0 || slots > MAX_CONCURRENCY {
        return Err(format!(
            "concurrency must be between 1 and {MAX_CONCURRENCY} (requests in flight at once), not {slots}"
        ));
    }
    let mode = rl.mode.unwrap_or_default();
    if mode == Mode::Exact {
        return Err("a concurrency limit is strict (slots leased) or local; not exact".into());
    }
    let secs = hold_timeout(rl)?;
    Ok(Limit::Limited {
        rate: Rate {
            requests_per_unit: 0,
            unit: Unit::Second,
            unit_multiplier: u32::try_from(secs).expect("at most a day"),
            burst: u64::from(slots),
            algorithm: crate::rate::Algorithm::Concurrency,
        },
        mode,
        fallback: rl.fallback.unwrap_or_default(),
        payment: Payment::Prepaid,
    })
}

/// A rule's stable identity: part of every store key of its buckets, so it must not change while
/// the rule does not, across sluice versions (sidecars of two versions share Redis during a
/// rollout, and a changed identity would split every global bucket).
///
/// It is FNV-1a 64 over `domain NUL path NUL limit`, then the shadow flag as one byte, where
/// `limit` is written field by field below. That text is exactly what versions up to 0.1.0 got
/// from `format!("{limit:?}")`, so existing keys are kept; it is written out by hand so that
/// renaming a type or variant, or adding a field, can no longer change it silently (a golden
/// test pins the values).
pub fn fingerprint(domain: &str, path: &str, limit: &Limit, shadow_mode: bool) -> u64 {
    let mut h = fnv1a_of(domain.as_bytes());
    h = fnv1a(h, b"\0");
    h = fnv1a(h, path.as_bytes());
    h = fnv1a(h, b"\0");
    h = match limit {
        Limit::Unlimited => fnv1a(h, b"Unlimited"),
        Limit::Limited {
            rate,
            mode,
            fallback,
            payment: _,
        } => {
            // A period of one unit writes nothing more: the identity of every rule written
            // before `unit_multiplier` existed stays the same.
            let mut multiplier = match rate.unit_multiplier {
                0 | 1 => String::new(),
                n => format!(", unit_multiplier: {n}"),
            };
            // Likewise the algorithm: a token bucket writes nothing; a window is another limit.
            if rate.algorithm != crate::rate::Algorithm::TokenBucket {
                multiplier.push_str(", algorithm: ");
                multiplier.push_str(rate.algorithm.as_str());
            }
            let text = format!(
                "Limited {{ rate: Rate {{ requests_per_unit: {}, unit: {}{multiplier}, burst: {} }}, mode: {}, fallback: {} }}",
                rate.requests_per_unit,
                unit_identity(rate.unit),
                rate.burst,
                mode_identity(*mode),
                fallback_identity(*fallback),
            );
            fnv1a(h, text.as_bytes())
        }
    };
    fnv1a(h, &[u8::from(shadow_mode)])
}

/// The unit as rule identities spell it (fixed forever; see [`fingerprint`]).
fn unit_identity(unit: Unit) -> &'static str {
    match unit {
        Unit::Second => "Second",
        Unit::Minute => "Minute",
        Unit::Hour => "Hour",
        Unit::Day => "Day",
        Unit::Week => "Week",
        Unit::Month => "Month",
        Unit::Year => "Year",
    }
}

/// The mode as rule identities spell it (fixed forever; see [`fingerprint`]).
fn mode_identity(mode: Mode) -> &'static str {
    match mode {
        Mode::Strict => "Strict",
        Mode::Exact => "Exact",
        Mode::Local => "Local",
    }
}

/// The fallback as rule identities spell it (fixed forever; see [`fingerprint`]).
fn fallback_identity(fallback: Fallback) -> &'static str {
    match fallback {
        Fallback::LocalShare => "LocalShare",
        Fallback::Allow => "Allow",
        Fallback::Deny => "Deny",
    }
}
