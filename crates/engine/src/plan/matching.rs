//! Matching for a plan: which limits a descriptor has (its rule's, each `rate_limits` entry's,
//! or a caller override's), with the identities and entries their buckets are keyed by.

use std::borrow::Cow;

use sluice_core::bucket::Rate;
use sluice_core::config::{Fallback, Mode};
use sluice_core::descriptor::LimitOverride;
use sluice_core::rules::{Limit, Match, Payment};
use sluice_core::{Descriptor, Entry, Rule, RuleSet};
use smallvec::SmallVec;

use crate::decision::LimitInfo;

/// What matching found for one descriptor.
pub(super) enum Found<'r, 'd> {
    /// No rule applies.
    Nothing,
    /// An `unlimited` rule.
    Unlimited,
    /// Its limits (one per `rate_limits` entry), in file order.
    Limits(SmallVec<[Matched<'r, 'd>; 1]>),
}

/// A limit matched by one descriptor.
pub(super) struct Matched<'r, 'd> {
    pub(super) info: LimitInfo,
    /// The identity its bucket is tracked by in the table.
    pub(super) identity: u64,
    /// The identity of its global bucket (part of the store key): the table identity, except
    /// for a caller override, whose local lease is per rate (see [`overridden`]).
    pub(super) store_identity: u64,
    /// The rule's `name`, which other rules may replace.
    pub(super) name: Option<&'r str>,
    /// The names this rule replaces.
    pub(super) replaces: &'r [String],
    /// The entries its bucket is keyed by.
    pub(super) key: Cow<'d, [Entry]>,
}

/// The limits of descriptor `d` in `domain`, with the identity of each one's bucket and the
/// entries they are keyed by.
pub(super) fn matched<'r, 'd>(
    rules: &'r RuleSet,
    domain: &str,
    d: &'d Descriptor,
) -> Found<'r, 'd> {
    let (found, key) = rules.match_keyed(domain, &d.entries);
    let rule = match found {
        Match::Rule(rule) => Some(rule),
        _ => None,
    };
    if let Some(o) = d.limit_override
        && rules.honours_override(domain, &d.entries)
    {
        return overridden(rules, domain, d, o, rule, key);
    }
    match rule {
        Some(rule) => own_limits(rules, rule, key),
        None => Found::Nothing,
    }
}

/// The limits of `rule`'s descriptor as the config writes them, on the bucket keyed by `key`.
fn own_limits<'r, 'd>(rules: &'r RuleSet, rule: &'r Rule, key: Cow<'d, [Entry]>) -> Found<'r, 'd> {
    if rule.limit == Limit::Unlimited {
        return Found::Unlimited;
    }
    Found::Limits(
        rules
            .limits_of(rule)
            .iter()
            .filter_map(|r| rule_limit(r, key.clone()))
            .collect(),
    )
}

/// The limit of `rule` (one of a descriptor's limits) on the bucket keyed by `key`; `None` for
/// an `unlimited` rule.
fn rule_limit<'r, 'd>(rule: &'r Rule, key: Cow<'d, [Entry]>) -> Option<Matched<'r, 'd>> {
    let Limit::Limited {
        rate,
        mode,
        fallback,
        payment,
    } = rule.limit
    else {
        return None;
    };
    Some(Matched {
        info: LimitInfo {
            rate,
            rule: Some(rule.id),
            mode,
            fallback,
            shadow: rule.shadow_mode,
            quota: rule.quota_mode,
            count_denied: rule.count_denied,
            payment,
        },
        identity: rule.fingerprint,
        store_identity: rule.fingerprint,
        name: rule.explicit_name.as_deref(),
        replaces: &rule.replaces,
        key,
    })
}

/// The limits of a descriptor carrying a caller's `limit` override. The override changes the
/// rate of the descriptor's first limit that takes one ([`Limit::takes_override`]: a prepaid
/// rate), never its bucket: it charges that limit's global bucket (keyed as the rule keys it,
/// `share_threshold` patterns included), and the descriptor's other limits (`rate_limits`)
/// still apply as written. A descriptor whose limits take none (concurrency limits, post-paid
/// budgets) is decided as if no override came: a concurrency acquire still takes its slot, and
/// its release finds the hold with or without the override. Every override value is its own
/// local lease (the table identity includes the rate) on that one global bucket, and the store
/// refills a bucket at the rate of each call, capped at that rate's burst, so no sequence of
/// override values admits more than `max B + max L·t` of them: varying the override never
/// buys a fresh bucket. With no rule matched (`limit_overrides: any`), every override of the
/// descriptor in the domain shares one bucket of its own.
fn overridden<'r, 'd>(
    rules: &'r RuleSet,
    domain: &str,
    d: &'d Descriptor,
    o: LimitOverride,
    rule: Option<&'r Rule>,
    key: Cow<'d, [Entry]>,
) -> Found<'r, 'd> {
    let Some(rule) = rule else {
        let identity = override_bucket_identity(domain);
        let key = Cow::Borrowed(&d.entries[..]);
        let (mode, fallback) = (Mode::Strict, Fallback::LocalShare);
        let rate = Rate::per_unit(o.requests_per_unit, o.unit);
        let limit = override_limit(rate, (mode, fallback, false), identity, None, &[], key);
        return Found::Limits(smallvec::smallvec![limit]);
    };
    let limits = rules.limits_of(rule);
    let Some(target) = limits.iter().position(|r| r.limit.takes_override()) else {
        return own_limits(rules, rule, key);
    };
    Found::Limits(
        limits
            .iter()
            .enumerate()
            .filter_map(|(at, r)| {
                if at == target {
                    Some(override_of(o, r, key.clone()))
                } else {
                    rule_limit(r, key.clone())
                }
            })
            .collect(),
    )
}

/// Limit `r` of a descriptor (one that [takes overrides](Limit::takes_override)) at the
/// override's rate, on `r`'s own global bucket: a window rule keeps its window, and every rule
/// its mode, fallback and shadow; an `unlimited` rule becomes a limit of the override's rate.
fn override_of<'r, 'd>(o: LimitOverride, r: &'r Rule, key: Cow<'d, [Entry]>) -> Matched<'r, 'd> {
    let mut rate = Rate::per_unit(o.requests_per_unit, o.unit);
    let mut how = (Mode::Strict, Fallback::LocalShare, r.shadow_mode);
    if let Limit::Limited {
        rate: own,
        mode,
        fallback,
        ..
    } = r.limit
    {
        if own.algorithm.is_window() {
            rate = per_window(o, &own);
        }
        how = (mode, fallback, r.shadow_mode);
    }
    let name = r.explicit_name.as_deref();
    override_limit(rate, how, r.fingerprint, name, &r.replaces, key)
}

/// The limit an override makes: `rate` on the global bucket `store_identity`, decided the way
/// `how` (mode, fallback, shadow) says, prepaid.
fn override_limit<'r, 'd>(
    rate: Rate,
    (mode, fallback, shadow): (Mode, Fallback, bool),
    store_identity: u64,
    name: Option<&'r str>,
    replaces: &'r [String],
    key: Cow<'d, [Entry]>,
) -> Matched<'r, 'd> {
    Matched {
        info: LimitInfo {
            rate,
            rule: None,
            mode,
            fallback,
            shadow,
            quota: false,
            count_denied: false,
            payment: Payment::Prepaid,
        },
        // A local rule's bucket is this process's own state: an override decides that same
        // bucket at its rate (the ledger refills it at the rate of each decision).
        identity: if mode == Mode::Local {
            store_identity
        } else {
            override_identity(store_identity, &rate)
        },
        store_identity,
        name,
        replaces,
        key,
    }
}

/// An override on a window rule keeps the rule's window (its algorithm and period: windows
/// of other periods do not line up, and a bucket read with another period would look like a
/// new window): the override's requests per unit become the same rate per the rule's period,
/// rounded down, at least 1.
fn per_window(o: LimitOverride, own: &Rate) -> Rate {
    let per_period = u128::from(o.requests_per_unit) * u128::from(own.period_secs().max(1))
        / u128::from(o.unit.seconds().max(1));
    let n = u64::try_from(per_period).unwrap_or(u64::MAX).max(1);
    Rate {
        requests_per_unit: n,
        burst: n,
        ..*own
    }
}

/// The table identity of a caller override's local lease: the global bucket it charges
/// (`store_identity`) and the override's rate. Only this process sees it (store keys are made
/// from `store_identity`), so its format may change between versions.
fn override_identity(store_identity: u64, rate: &Rate) -> u64 {
    let text = format!(
        "override\u{0}{store_identity:016x}\u{0}{}\u{0}{}\u{0}{}\u{0}{}",
        rate.requests_per_unit,
        rate.unit,
        rate.unit_multiplier,
        rate.algorithm.as_str()
    );
    sluice_core::hash::fnv1a_of(text.as_bytes())
}

/// The identity of the global bucket that caller overrides of a descriptor no rule matches
/// charge in `domain` (`limit_overrides: any`): one per descriptor, whatever the override's
/// rate. Part of store keys, so its format is fixed (see `docs/architecture.md`).
fn override_bucket_identity(domain: &str) -> u64 {
    let text = format!("override\u{0}{domain}");
    sluice_core::hash::fnv1a_of(text.as_bytes())
}

#[cfg(test)]
mod tests {
    /// The identity of the bucket caller overrides of a descriptor no rule matches charge is
    /// part of its store keys: pinned, so a change that would split every such bucket while old
    /// and new sidecars share Redis fails here first.
    #[test]
    fn the_override_bucket_identity_is_stable() {
        let key = crate::key::store_key(
            super::override_bucket_identity("edge"),
            crate::key::Values::Sent(&[sluice_core::Entry::new("ip", "10.0.0.1")]),
        );
        assert_eq!(
            key,
            "sluice:{5a0e8480a3962082:d9d85445c951c692}:ip=10.0.0.1"
        );
    }
}
