//! Who is being limited, fleet-wide (`sluice quota top`): the descriptor values with the most
//! denied hits over about the last minute, across every instance sharing the store.
//!
//! Each instance counts the hits it denies per key in a bounded [`DeniedCounts`] and, every
//! [`FLUSH_EVERY`], adds them to the store's count of the current [`SLOT_SECS`] slot
//! ([`GlobalStore::add_denied`]); the store keeps each slot's [`KEEP_PER_SLOT`] heaviest keys for
//! [`WINDOW_SLOTS`] slots. A read sums the window's slots ([`GlobalStore::top_denied`]). So the
//! store holds a bounded number of keys (one per slot) and members, whatever the traffic, and
//! costs one call per instance per flush.
//!
//! Counting is exact while an instance denies at most [`CAPACITY`] distinct keys in a flush
//! interval. Past that, the lower half of the counts is dropped whenever the map fills (each a
//! key that took fewer denials than the median since the last flush): a key's count is then
//! short by at most `2·N/CAPACITY` of the `N` hits denied in that interval, so keys that matter
//! (a tenth of the denials, say) stay within a few percent.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::key;

/// Distinct keys counted per flush interval before the lower half is dropped.
pub const CAPACITY: usize = 4096;

/// How often an instance adds its counts to the store.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);

/// Seconds per slot of the store's counts.
pub const SLOT_SECS: u64 = 10;

/// Slots a read sums: the current one and the five before it (50 to 60 s, "about a minute").
pub const WINDOW_SLOTS: u64 = 6;

/// Members each slot keeps in the store (the heaviest), for every rule together.
pub const KEEP_PER_SLOT: usize = 1024;

/// One row of `quota top`: a key and the hits denied on it in the window, fleet-wide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopRow {
    /// The rule's domain ("" for a rule this instance has not loaded).
    pub domain: String,
    /// The rule's label (its `name`, else `domain:path`).
    pub rule: String,
    /// The descriptor values, `key=value|key=value` (as `quota list` shows them).
    pub values: String,
    /// Hits denied.
    pub denied: u64,
}

/// The slot of `now` (µs).
pub fn slot_of(now: u64) -> u64 {
    now / 1_000_000 / SLOT_SECS
}

/// Denied hits per bucket key since the last flush, bounded (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct DeniedCounts {
    counts: Mutex<HashMap<Box<[u8]>, u64, foldhash::fast::RandomState>>,
}

impl DeniedCounts {
    /// Counts `hits` denied on the bucket with table key `key`.
    pub(crate) fn note(&self, key: &[u8], hits: u64) {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = counts.get_mut(key) {
            *n = n.saturating_add(hits);
            return;
        }
        if counts.len() >= CAPACITY {
            // The lower half goes: each a key denied less than the median since the last flush.
            let keep = counts.len() - counts.len() / 2;
            keep_heaviest(&mut counts, keep);
        }
        counts.insert(key.into(), hits);
    }

    /// Every count since the last call, as `(store key, hits)`, and starts again from none.
    pub(crate) fn take(&self) -> Vec<(String, u64)> {
        let counts = std::mem::take(
            &mut *self
                .counts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        counts
            .into_iter()
            .filter_map(|(k, n)| {
                let identity = u64::from_le_bytes(k.get(..8)?.try_into().ok()?);
                Some((key::store_key_of(identity, &k), n))
            })
            .collect()
    }
}

/// Keeps the `keep` heaviest counts of `map` (of those tied at the cut, any), dropping the rest.
fn keep_heaviest<K, S>(map: &mut HashMap<K, u64, S>, keep: usize) {
    if map.len() <= keep {
        return;
    }
    if keep == 0 {
        map.clear();
        return;
    }
    let mut all: Vec<u64> = map.values().copied().collect();
    let (_, &mut floor, _) = all.select_nth_unstable_by(keep - 1, |a, b| b.cmp(a));
    let above = all.iter().filter(|&&n| n > floor).count();
    let mut at_floor = keep - above;
    map.retain(|_, n| {
        if *n > floor {
            return true;
        }
        if *n == floor && at_floor > 0 {
            at_floor -= 1;
            return true;
        }
        false
    });
}

/// Adds `counts` into `slot`'s `(member, hits)` and keeps its [`KEEP_PER_SLOT`] heaviest: what
/// every store does with [`GlobalStore::add_denied`](crate::GlobalStore::add_denied) (the
/// embedded store in memory, Redis in `top_add.lua`).
pub fn merge_into(slot: &mut HashMap<String, u64>, counts: &[(String, u64)]) {
    for (member, n) in counts {
        let total = slot.entry(member.clone()).or_default();
        *total = total.saturating_add(*n);
    }
    keep_heaviest(slot, KEEP_PER_SLOT);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Values;
    use sluice_core::Entry;

    fn table_key(value: &str) -> Vec<u8> {
        let entries = [Entry::new("user", value)];
        key::with_encoded(42, Values::Sent(&entries), <[u8]>::to_vec)
    }

    #[test]
    fn counts_are_exact_below_capacity_and_come_back_as_store_keys() {
        let c = DeniedCounts::default();
        c.note(&table_key("a"), 3);
        c.note(&table_key("b"), 1);
        c.note(&table_key("a"), u64::MAX);
        let mut got = c.take();
        got.sort_by(|a, b| key::values_of(&a.0).cmp(key::values_of(&b.0)));
        assert_eq!(got.len(), 2);
        assert_eq!(key::values_of(&got[0].0), "user=a");
        assert_eq!(key::identity_of(&got[0].0), Some(42));
        assert_eq!(got[0].1, u64::MAX, "saturates, never wraps");
        assert_eq!(got[1].1, 1);
        assert!(c.take().is_empty(), "take starts again from none");
    }

    #[test]
    fn past_capacity_the_heavy_keys_survive_and_memory_stays_bounded() {
        let c = DeniedCounts::default();
        for _ in 0..100 {
            c.note(&table_key("heavy"), 1);
        }
        // A flood of distinct values, each denied once.
        for i in 0..5 * CAPACITY {
            c.note(&table_key(&i.to_string()), 1);
        }
        let got = c.take();
        assert!(got.len() <= CAPACITY, "{}", got.len());
        let heavy = got.iter().find(|(k, _)| key::values_of(k) == "user=heavy");
        assert_eq!(heavy.map(|(_, n)| *n), Some(100));
    }

    #[test]
    fn a_slot_keeps_its_heaviest_members() {
        let mut slot = HashMap::new();
        let counts: Vec<(String, u64)> = (0..KEEP_PER_SLOT as u64 + 500)
            .map(|i| (format!("m{i}"), i + 1))
            .collect();
        merge_into(&mut slot, &counts);
        assert_eq!(slot.len(), KEEP_PER_SLOT);
        assert_eq!(slot.get("m0"), None, "the lightest went");
        let last = format!("m{}", KEEP_PER_SLOT + 499);
        assert_eq!(slot.get(&last), Some(&(KEEP_PER_SLOT as u64 + 500)));
        merge_into(&mut slot, &[("m0".into(), 10_000), (last.clone(), 1)]);
        assert_eq!(slot.len(), KEEP_PER_SLOT);
        assert_eq!(slot.get("m0"), Some(&10_000));
        assert_eq!(
            slot.get(&last),
            Some(&(KEEP_PER_SLOT as u64 + 501)),
            "added to what it had"
        );
    }
}
