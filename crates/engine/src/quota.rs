//! Looking at quotas without consuming them: what the operator API and `/quota` show.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::bucket::{BucketState, Rate};
use sluice_core::config::Mode;
use sluice_core::rules::{Limit, Match, Rule};
use sluice_core::{Entry, RuleSet};

use crate::key;
use crate::lease::Leaser;
use crate::store::{GlobalStore, StoreError};
use crate::table::BucketTable;

/// One key's quota, as this instance sees it.
#[derive(Debug, Clone)]
pub struct QuotaView {
    /// The rules the view was computed with.
    pub rules: Arc<RuleSet>,
    /// The matched rule, if any.
    pub rule: Option<u32>,
    /// The domain has no config.
    pub unknown_domain: bool,
    /// Tokens in the global bucket (for local mode: this instance's bucket); `None` if the store
    /// could not be read.
    pub global_remaining: Option<f64>,
    /// Why the store could not be read.
    pub store_error: Option<StoreError>,
    /// Tokens leased by this instance.
    pub local_lease: u64,
    /// Time until the bucket is full again.
    pub until_full: Duration,
    /// Whether this instance holds state for the key.
    pub tracked: bool,
    /// Whether the store is degraded (fallbacks apply).
    pub degraded: bool,
}

impl QuotaView {
    /// The matched rule.
    pub fn matched(&self) -> Option<&Rule> {
        self.rule.and_then(|id| self.rules.rule(id))
    }
}

/// A key this instance tracks.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackedKey {
    /// The rule's domain ("" for caller overrides or rules no longer loaded).
    pub domain: String,
    /// The rule's label ("override", or "" for rules no longer loaded).
    pub rule: String,
    /// The descriptor values, `key=value|key=value`.
    pub values: String,
    /// Sharing mode.
    pub mode: Mode,
    /// Leased tokens held.
    pub local_lease: u64,
    /// Time since the last decision on it.
    pub idle: Duration,
}

/// Peeks at the quota of `entries` in `domain`: nothing is consumed and no key is created.
pub(crate) async fn view(
    rules: Arc<RuleSet>,
    table: &BucketTable,
    leaser: &Leaser,
    now: u64,
    domain: &str,
    entries: &[Entry],
) -> QuotaView {
    let mut view = QuotaView {
        rules: Arc::clone(&rules),
        rule: None,
        unknown_domain: false,
        global_remaining: None,
        store_error: None,
        local_lease: 0,
        until_full: Duration::ZERO,
        tracked: false,
        degraded: leaser.store.degraded(),
    };
    let rule = match rules.match_descriptor(domain, entries) {
        Match::UnknownDomain => {
            view.unknown_domain = true;
            return view;
        }
        Match::NoRule => return view,
        Match::Rule(rule) => rule,
    };
    view.rule = Some(rule.id);
    let Limit::Limited { rate, mode, .. } = rule.limit else {
        return view;
    };
    if let Some(b) = table.get(rule.fingerprint, entries) {
        view.tracked = true;
        let state = b.lock();
        view.local_lease = state.lease;
        if mode == Mode::Local {
            view.global_remaining = Some(state.remaining(mode, &rate, now));
        }
    }
    if mode == Mode::Local {
        let tokens = view
            .global_remaining
            .unwrap_or_else(|| BucketState::full(&rate, now).tokens);
        view.global_remaining = Some(tokens);
        view.until_full = until_full(&rate, tokens);
        return view;
    }
    let store_key = key::store_key(rule.fingerprint, entries);
    match leaser.peek_for_operator(&store_key, rate).await {
        Ok(tokens) => {
            view.global_remaining = Some(tokens);
            view.until_full = until_full(&rate, tokens + view.local_lease as f64);
        }
        Err(e) => view.store_error = Some(e),
    }
    view
}

/// Refills the global bucket of `entries` (forgets it in the store) and drops this instance's
/// state for the key. Returns the matched rule's label, or `None` if no limited rule matches.
pub(crate) async fn reset(
    rules: &RuleSet,
    table: &BucketTable,
    store: &dyn GlobalStore,
    domain: &str,
    entries: &[Entry],
) -> Result<Option<String>, StoreError> {
    let Match::Rule(rule) = rules.match_descriptor(domain, entries) else {
        return Ok(None);
    };
    let Limit::Limited { mode, .. } = rule.limit else {
        return Ok(None);
    };
    if mode != Mode::Local {
        store
            .reset(&key::store_key(rule.fingerprint, entries))
            .await?;
    }
    table.remove(rule.fingerprint, entries);
    Ok(Some(rule.label.clone()))
}

/// The keys this instance tracks, sorted by rule and values, filtered by domain, rule label
/// and values prefix (empty filters match everything).
pub(crate) fn tracked(
    rules: &RuleSet,
    table: &BucketTable,
    now: u64,
    domain: &str,
    rule: &str,
    prefix: &str,
) -> Vec<TrackedKey> {
    let mut out = Vec::new();
    table.for_each(|key, b| {
        let owner = rules.rules().iter().find(|r| r.fingerprint == b.identity);
        let (d, r) = owner.map_or(("", ""), |r| (r.domain.as_str(), r.label.as_str()));
        let store_key = key::store_key_of(key);
        let values = key::values_of(&store_key);
        let keep = (domain.is_empty() || d == domain)
            && (rule.is_empty() || r == rule)
            && values.starts_with(prefix);
        if keep {
            out.push(TrackedKey {
                domain: d.to_string(),
                rule: r.to_string(),
                values: values.to_string(),
                mode: b.mode,
                local_lease: b.lock().lease,
                idle: Duration::from_micros(now.saturating_sub(b.last_used())),
            });
        }
    });
    out.sort_by(|a, b| (&a.domain, &a.rule, &a.values).cmp(&(&b.domain, &b.rule, &b.values)));
    out
}

fn until_full(rate: &Rate, tokens: f64) -> Duration {
    Duration::from_micros(rate.micros_until_full(tokens))
}
