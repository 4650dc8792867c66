//! What a stream tracks for each bucket id: a limited bucket's share (paid through the engine)
//! or a free bucket kept at `ALLOW_ALL`, and the small rules about them (which limit a rule
//! puts on RLQS, whether a bucket still maps to the limit it was paid under, retiring one).

use std::sync::Arc;

use sluice_core::bucket::Rate;
use sluice_core::config::{Fallback, Mode};
use sluice_core::rules::{BucketMatch, Limit};
use sluice_core::{Entry, Rule};
use sluice_engine::assignment::{Reported, Share, Step, Strategy, TTL};
use sluice_engine::key::{Values, key_value, store_key};

use crate::metrics::rlqs::RlqsMetrics;

/// A bucket the stream tracks.
pub(super) enum BucketKind {
    /// Matched a limited rule.
    Limited(Box<Share>),
    /// No limit applies: kept at `ALLOW_ALL`.
    Free(Free),
}

pub(super) struct Free {
    pub(super) entries: Arc<[Entry]>,
    pub(super) sent_at: Option<u64>,
    pub(super) reported: Reported,
}

pub(super) struct StreamBucket {
    pub(super) kind: BucketKind,
    pub(super) rule: String,
    /// Tokens per second last added to the assigned-rate gauge.
    pub(super) gauged: f64,
}

impl Free {
    pub(super) fn next(&mut self, now: u64) -> Step {
        let due = self
            .sent_at
            .is_none_or(|at| now.saturating_sub(at) + 2_000_000 >= u64::from(TTL) * 1_000_000);
        if !due {
            return Step::Keep;
        }
        self.sent_at = Some(now);
        Step::Send(Strategy::AllowAll, TTL)
    }
}

pub(super) fn free(entries: Arc<[Entry]>, now: u64) -> BucketKind {
    BucketKind::Free(Free {
        entries,
        sent_at: None,
        reported: Reported::new(now),
    })
}

pub(super) fn reported(t: &BucketKind) -> &Reported {
    match t {
        BucketKind::Limited(b) => &b.reported,
        BucketKind::Free(f) => &f.reported,
    }
}

pub(super) fn entries_of(t: &BucketKind) -> &[Entry] {
    match t {
        BucketKind::Limited(b) => &b.entries,
        BucketKind::Free(f) => &f.entries,
    }
}

/// The bytes a bucket id holds: its keys and values as Envoy sent them.
pub(super) fn id_bytes(entries: &[Entry]) -> usize {
    entries.iter().map(|e| e.key.len() + e.value.len()).sum()
}

pub(super) fn pairs(entries: &[Entry]) -> Vec<(String, String)> {
    entries
        .iter()
        .map(|e| (e.key.clone(), key_value(&e.value).into_owned()))
        .collect()
}

/// The limit a rule puts on RLQS buckets: none when it is unlimited or in shadow mode (its own,
/// or global `shadow`), since RLQS cannot decide and still answer OK.
pub(super) fn enforced(rule: &Rule, shadow: bool) -> Option<(Rate, Mode, Fallback)> {
    match rule.limit {
        Limit::Limited {
            rate,
            mode,
            fallback,
            ..
        } if !rule.shadow_mode && !shadow => Some((rate, mode, fallback)),
        _ => None,
    }
}

/// Whether a bucket still maps to the limit (store key) it was paid under, or still to none.
pub(super) fn same_limit(tracked: &BucketKind, now: BucketMatch<'_>, shadow: bool) -> bool {
    match (tracked, now) {
        (BucketKind::Limited(b), BucketMatch::Rule(rule, ordered)) => {
            enforced(rule, shadow).is_some()
                && b.key() == store_key(rule.fingerprint, Values::Sent(&ordered))
        }
        (BucketKind::Free(_), BucketMatch::Rule(rule, _)) => enforced(rule, shadow).is_none(),
        (BucketKind::Free(_), _) => true,
        (BucketKind::Limited(_), _) => false,
    }
}

/// Stops tracking a slot: the tokens `back` says the store may take again are returned, the
/// stream's demand is withdrawn, and the slot leaves the metrics.
pub(super) async fn retire(
    m: &RlqsMetrics,
    mut slot: StreamBucket,
    back: impl FnOnce(&mut Share) -> u64,
) {
    if let BucketKind::Limited(b) = &mut slot.kind {
        let tokens = back(b);
        b.funds().release(tokens).await;
        b.withdraw().await;
    }
    if slot.gauged != 0.0 {
        m.assigned.with_label_values(&[&slot.rule]).sub(slot.gauged);
    }
    m.bucket(&slot.rule, -1);
}
