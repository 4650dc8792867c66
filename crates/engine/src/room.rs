//! Room in a bounded key table, shared fairly between rules.
//!
//! The engine's table and the embedded store each hold at most `max_keys` keys, and neither may
//! drop a key whose state a limit depends on (that would reset the limit). Without more, one
//! rule whose keys never come to rest (a cheap monthly limit over values a client chooses)
//! fills the room and every other rule's new keys are refused until those buckets refill: days.
//!
//! [`Room`] counts the keys each *holder* (a rule's identity) has, so that when the table is
//! full and no key is at rest, a holder with fewer than its share — `max_keys ÷ holders` — takes
//! room from the holder with the most keys. The keys taken are not forgotten: the emptiest of
//! them is *left behind* for its holder, and every new key of that holder starts no fuller than
//! that state (refilled since). So a key evicted this way and seen again starts no fuller than
//! it was (conservation holds for every key), and the holder that took the room pays for it
//! alone: a flood of one rule's values can deny that rule's new keys, never another rule's.

use std::collections::HashMap;
use std::sync::Mutex;

use sluice_core::bucket::{BucketState, Rate};

/// Keys held per holder, and what evicted keys left behind.
#[derive(Debug)]
pub(crate) struct Room {
    /// Most keys held in all.
    max: usize,
    /// By holder identity. A std `Mutex`: held for a map lookup, only when a key is added or
    /// removed (never on a decision about a tracked key), never across an `.await`.
    holders: Mutex<HashMap<u64, Holder>>,
}

#[derive(Debug, Default)]
struct Holder {
    keys: usize,
    /// The emptiest state of a key evicted to make room for another holder's, as of when it
    /// was evicted; `None` once nothing is owed (it refilled, or none was evicted).
    left_behind: Option<BucketState>,
}

/// Why a holder may not have room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It holds less than its share: it may take room from `from`, the holder with the most
    /// keys (over its own share).
    TakeFrom(u64),
    /// It holds its share or more, or no other holder is over its share.
    Refuse,
}

impl Room {
    /// Room for `max` keys.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            holders: Mutex::default(),
        }
    }

    fn holders(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Holder>> {
        self.holders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A key of `holder` was added.
    pub(crate) fn added(&self, holder: u64) {
        self.holders().entry(holder).or_default().keys += 1;
    }

    /// `n` keys of `holder` were removed.
    pub(crate) fn removed(&self, holder: u64, n: usize) {
        let mut holders = self.holders();
        if let Some(h) = holders.get_mut(&holder) {
            h.keys = h.keys.saturating_sub(n);
            if h.keys == 0 && h.left_behind.is_none() {
                holders.remove(&holder);
            }
        }
    }

    /// Keys `holder` holds.
    #[cfg(test)]
    pub(crate) fn keys_of(&self, holder: u64) -> usize {
        self.holders().get(&holder).map_or(0, |h| h.keys)
    }

    /// Whether `holder` may take room from another holder while the table is full and no key is
    /// at rest: only below its share, `max ÷ holders` (holders with keys, `holder` counted).
    pub(crate) fn verdict(&self, holder: u64) -> Verdict {
        let holders = self.holders();
        let with_keys = holders.values().filter(|h| h.keys > 0).count();
        let mine = holders.get(&holder).map_or(0, |h| h.keys);
        let count = with_keys + usize::from(mine == 0);
        let share = self.max / count.max(1);
        if mine >= share {
            return Verdict::Refuse;
        }
        match holders.iter().max_by_key(|(_, h)| h.keys) {
            Some((&hog, h)) if hog != holder && h.keys > share => Verdict::TakeFrom(hog),
            _ => Verdict::Refuse,
        }
    }

    /// How many keys to take from `hog` at once: a tenth of the room (so a table full of one
    /// rule is not scanned for every newcomer), never below its share.
    pub(crate) fn to_take(&self, hog: u64) -> usize {
        let holders = self.holders();
        let with_keys = holders.values().filter(|h| h.keys > 0).count() + 1;
        let share = self.max / with_keys.max(1);
        let keys = holders.get(&hog).map_or(0, |h| h.keys);
        keys.saturating_sub(share).min((self.max / 10).max(1))
    }

    /// A key of `holder` in `state` was evicted at `now` to make room for another holder's:
    /// kept if it is the emptiest so far.
    pub(crate) fn leave_behind(&self, holder: u64, rate: &Rate, state: &BucketState, now: u64) {
        let mut state = *state;
        state.refill(rate, now);
        if state.available(rate) >= rate.burst as f64 {
            return;
        }
        let mut holders = self.holders();
        let h = holders.entry(holder).or_default();
        let emptier = h
            .left_behind
            .is_none_or(|old| state.available(rate) < old.available_at(rate, now));
        if emptier {
            h.left_behind = Some(state);
        }
    }

    /// The state a new key of `holder` starts in at `now`: full, or what the emptiest evicted
    /// key left behind, refilled since (forgotten once it is full).
    pub(crate) fn start(&self, holder: u64, rate: &Rate, now: u64) -> BucketState {
        let full = BucketState::full(rate, now);
        let mut holders = self.holders();
        let Some(h) = holders.get_mut(&holder) else {
            return full;
        };
        let Some(mut state) = h.left_behind else {
            return full;
        };
        state.refill(rate, now);
        if state.available(rate) >= rate.burst as f64 {
            h.left_behind = None;
            if h.keys == 0 {
                holders.remove(&holder);
            }
            return full;
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::Unit;

    #[test]
    fn a_holder_below_its_share_takes_from_the_largest() {
        let room = Room::new(10);
        for _ in 0..10 {
            room.added(1);
        }
        assert_eq!(
            room.verdict(1),
            Verdict::Refuse,
            "the only holder has its share"
        );
        assert_eq!(
            room.verdict(2),
            Verdict::TakeFrom(1),
            "a newcomer's share is 5"
        );
        assert_eq!(room.to_take(1), 1, "a tenth of the room at a time");
        for _ in 0..5 {
            room.added(2);
        }
        room.removed(1, 5);
        assert_eq!(room.verdict(2), Verdict::Refuse, "2 holds its share");
        assert!(
            matches!(room.verdict(3), Verdict::TakeFrom(1 | 2)),
            "a third holder's share is 3: both others are over it"
        );
        for _ in 0..3 {
            room.added(3);
        }
        assert_eq!(room.verdict(3), Verdict::Refuse, "3 holds its share");
        assert_eq!(room.keys_of(1), 5);
    }

    #[test]
    fn new_keys_of_a_holder_start_from_what_it_left_behind() {
        let rate = Rate::per_unit(10, Unit::Second);
        let room = Room::new(10);
        let mut empty = BucketState::full(&rate, 0);
        empty.take_up_to(&rate, 0, 10);
        room.leave_behind(7, &rate, &empty, 0);
        assert_eq!(room.start(7, &rate, 0).available(&rate), 0.0);
        assert_eq!(
            room.start(7, &rate, 500_000).available(&rate),
            5.0,
            "refilled since"
        );
        assert_eq!(
            room.start(8, &rate, 0).available(&rate),
            10.0,
            "others start full"
        );
        assert_eq!(room.start(7, &rate, 2_000_000).available(&rate), 10.0);
        assert_eq!(
            room.start(7, &rate, 0).available(&rate),
            10.0,
            "forgotten once full"
        );
    }
}
