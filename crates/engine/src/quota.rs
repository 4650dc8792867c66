//! Looking at quotas without consuming them: what the operator API and `/quota` show.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::bucket::Rate;
use sluice_core::config::Mode;
use sluice_core::rules::{Limit, Match, Rule};
use sluice_core::{Entry, RuleSet};

use crate::key::{self, Values};
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
    /// The descriptor's further limits (`rate_limits`), each seen the same way, in file order.
    pub more: Vec<QuotaView>,
    /// This instance's last denial of the key under this limit, while it tracks the key.
    pub last_denial: Option<crate::decision::LastDenial>,
    /// Holds of requests in flight on this instance (concurrency slots, reservations): how
    /// many, and the slots (tokens) they hold.
    pub holds: (u64, u64),
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

/// Peeks at the quota of `entries` in `domain`: nothing is consumed and no key is created. A
/// descriptor with several limits gets a view of each (the first; the others in `more`).
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
        more: Vec::new(),
        last_denial: None,
        holds: (0, 0),
    };
    let (found, entries) = rules.match_keyed(domain, entries);
    let rule = match found {
        Match::UnknownDomain => {
            view.unknown_domain = true;
            return view;
        }
        Match::NoRule => return view,
        Match::Rule(rule) => rule,
    };
    for further in &rules.limits_of(rule)[1..] {
        let mut more = view.clone();
        limit_view(&mut more, further, table, leaser, now, &entries).await;
        view.more.push(more);
    }
    limit_view(&mut view, rule, table, leaser, now, &entries).await;
    view
}

/// Fills `view` with what this instance and the store know of `rule`'s bucket for `entries`
/// (already keyed: shared values replaced by their pattern).
async fn limit_view(
    view: &mut QuotaView,
    rule: &Rule,
    table: &BucketTable,
    leaser: &Leaser,
    now: u64,
    entries: &[Entry],
) {
    view.rule = Some(rule.id);
    let Limit::Limited { rate, mode, .. } = rule.limit else {
        return;
    };
    if let Some(b) = table.get(rule.fingerprint, Values::Sent(entries)) {
        view.tracked = true;
        let state = b.lock();
        view.local_lease = state.lease;
        view.last_denial = state.rare().last_denial;
        let holds = &state.rare().holds;
        let slots = holds.iter().map(|h| h.slots).fold(0, u64::saturating_add);
        view.holds = (holds.len() as u64, slots);
        if mode == Mode::Local {
            view.global_remaining = Some(state.remaining(mode, &rate, now));
        }
    }
    if mode == Mode::Local {
        // An untracked key starts full, or as its rule's keys evicted for room left it.
        let tokens = view
            .global_remaining
            .unwrap_or_else(|| table.start_state(rule.fingerprint, &rate, now).tokens);
        view.global_remaining = Some(tokens);
        view.until_full = until_full(&rate, tokens, now);
        return;
    }
    let store_key = key::store_key(rule.fingerprint, Values::Sent(entries));
    match leaser.peek_for_operator(&store_key, rate).await {
        Ok(tokens) => {
            view.global_remaining = Some(tokens);
            view.until_full = until_full(&rate, tokens + view.local_lease as f64, now);
        }
        Err(e) => view.store_error = Some(e),
    }
}

/// Refills the global bucket of `entries` (forgets it in the store) and drops this instance's
/// state for the key; the store tells the other instances to drop theirs. Returns the matched rule's label, or `None` if no limited rule matches.
pub(crate) async fn reset(
    rules: &RuleSet,
    table: &BucketTable,
    store: &dyn GlobalStore,
    domain: &str,
    entries: &[Entry],
) -> Result<Option<String>, StoreError> {
    let (Match::Rule(rule), entries) = rules.match_keyed(domain, entries) else {
        return Ok(None);
    };
    let Limit::Limited { mode, .. } = rule.limit else {
        return Ok(None);
    };
    if mode != Mode::Local {
        let local = key::with_encoded(rule.fingerprint, Values::Sent(&entries), <[u8]>::to_vec);
        let store_key = key::store_key(rule.fingerprint, Values::Sent(&entries));
        store.reset(&store_key, &local).await?;
    }
    table.remove(rule.fingerprint, Values::Sent(&entries));
    Ok(Some(rule.label.clone()))
}

/// Which tracked keys to list (empty fields match everything).
#[derive(Debug, Clone, Default)]
pub struct KeyFilter {
    /// Only keys of rules of this domain.
    pub domain: String,
    /// Only keys of the rule with this label.
    pub rule: String,
    /// Only keys whose values (`key=value|…`) start with this.
    pub prefix: String,
}

impl KeyFilter {
    /// Whether keys of the rule labelled `label` in `domain` pass the domain and rule filters.
    pub fn matches_rule(&self, domain: &str, label: &str) -> bool {
        (self.domain.is_empty() || domain == self.domain)
            && (self.rule.is_empty() || label == self.rule)
    }
}

/// One page of tracked keys.
#[derive(Debug, Clone, Default)]
pub struct TrackedPage {
    /// The keys, in bucket-key order.
    pub keys: Vec<TrackedKey>,
    /// Keys matching the filter, on all pages.
    pub total: u64,
    /// Where the next page starts (`None` on the last page).
    pub next: Option<Vec<u8>>,
}

/// A tracked key ordered by its bytes alone.
struct ByKey(Vec<u8>, crate::bucket::LeaseBucket);

impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for ByKey {}
impl PartialOrd for ByKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

/// The tracked keys matching `filter` that come after `after` (a cursor from the previous page),
/// at most `size` of them. One pass over the table, holding only the `size + 1` smallest keys
/// seen (no sort of every key, no formatting of keys that are not listed unless a prefix filter
/// needs their values); the order is the bucket keys' bytes, stable while keys come and go, so
/// pages never repeat a key.
pub(crate) fn tracked_page(
    rules: &RuleSet,
    table: &BucketTable,
    now: u64,
    filter: &KeyFilter,
    after: Option<&[u8]>,
    size: usize,
) -> TrackedPage {
    use std::collections::{BinaryHeap, HashMap};
    let owners: HashMap<u64, (&str, &str)> = rules
        .rules()
        .iter()
        .map(|r| (r.fingerprint, (r.domain.as_str(), r.label.as_str())))
        .collect();
    let owner = |identity: u64| owners.get(&identity).copied().unwrap_or(("", ""));
    let mut total = 0u64;
    // A max-heap of the smallest keys after the cursor.
    let mut smallest: BinaryHeap<ByKey> = BinaryHeap::new();
    table.for_each(|bytes, b| {
        let (d, r) = owner(b.identity);
        if !filter.matches_rule(d, r) {
            return;
        }
        if !filter.prefix.is_empty()
            && !key::values_of(&key::store_key_of(b.identity, bytes)).starts_with(&filter.prefix)
        {
            return;
        }
        total += 1;
        if after.is_some_and(|a| bytes <= a) {
            return;
        }
        if smallest.len() <= size {
            smallest.push(ByKey(bytes.to_vec(), b.clone()));
        } else if smallest.peek().is_some_and(|top| bytes < top.0.as_slice()) {
            smallest.pop();
            smallest.push(ByKey(bytes.to_vec(), b.clone()));
        }
    });
    let mut page = smallest.into_sorted_vec();
    let more = page.len() > size;
    page.truncate(size);
    let next = more.then(|| page.last().map(|k| k.0.clone())).flatten();
    let keys = page
        .into_iter()
        .map(|ByKey(bytes, b)| {
            let (d, r) = owner(b.identity);
            let store_key = key::store_key_of(b.identity, &bytes);
            let state = b.lock();
            TrackedKey {
                domain: d.to_string(),
                rule: r.to_string(),
                values: key::values_of(&store_key).to_string(),
                mode: state.mode,
                local_lease: state.lease,
                idle: Duration::from_micros(now.saturating_sub(b.last_used())),
            }
        })
        .collect();
    TrackedPage { keys, total, next }
}

fn until_full(rate: &Rate, tokens: f64, now: u64) -> Duration {
    Duration::from_micros(rate.micros_until_full_at(tokens, now))
}
