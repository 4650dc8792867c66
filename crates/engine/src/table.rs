//! The tracked keys: bucket key → [`LeaseBucket`], bounded by `max_keys`, evicting only keys at
//! rest.
//!
//! A key is *at rest* when forgetting it loses nothing a limit depends on (a leased key, whose
//! truth is in the global store and whose lease goes back; a local bucket that has refilled to
//! full). Idle keys are evicted once at rest; when the table is full, the least recently used
//! keys at rest make room. If none is at rest, a new key is not tracked and its request is
//! denied ([`Denial::NoRoom`](crate::decision::Denial::NoRoom)): the table never resets a limit
//! to make room, and it frees up as soon as a tracked key refills.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use sluice_core::bucket::Algorithm;

use crate::bucket::LeaseBucket;
use crate::decision::LimitInfo;
use crate::key::{self, Values};
use crate::metrics::EngineMetrics;
use crate::plan::Slot;
use crate::room::{Room, Verdict};

mod returns;
pub(crate) use returns::{Return, Swept};

/// The longest a full table waits before it looks for keys at rest again (µs).
const RESCAN_MICROS: u64 = 1_000_000;

/// A tracked bucket, as the table holds it: found, hashed and compared by its key bytes (the
/// key lives in the bucket, so a table slot is one pointer: at a million keys the table's own
/// slots cost ~19 bytes per key instead of ~52 with a separate key and value).
#[derive(Debug, Clone)]
struct Held(LeaseBucket);

impl Hash for Held {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Exactly as `[u8]` hashes, so lookups by borrowed bytes find it.
        self.0.key().hash(state);
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl Eq for Held {}

impl Borrow<[u8]> for Held {
    fn borrow(&self) -> &[u8] {
        self.0.key()
    }
}

/// The tracked keys.
pub(crate) struct BucketTable {
    /// The tracked buckets, by key. `Arc`s let a decision drop the map's shard lock before
    /// taking the bucket's own lock, so no map lock is ever held while another is taken.
    map: DashMap<Held, (), foldhash::fast::RandomState>,
    max_keys: usize,
    /// Keys per rule, so one rule's local buckets cannot take every other rule's room.
    room: Room,
    /// After a full table had no key at rest: the earliest time one can be (a local bucket
    /// refilled), so new keys before then are refused without scanning the table again.
    no_room_until: AtomicU64,
    metrics: EngineMetrics,
}

impl BucketTable {
    /// An empty table of at most `max_keys` keys.
    pub(crate) fn new(max_keys: usize, metrics: EngineMetrics) -> Self {
        Self {
            map: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            max_keys,
            room: Room::new(max_keys),
            no_room_until: AtomicU64::new(0),
            metrics,
        }
    }

    /// How many keys are tracked.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The bucket of `(identity, entries)`, if tracked.
    pub(crate) fn get(&self, identity: u64, entries: Values<'_>) -> Option<LeaseBucket> {
        key::with_encoded(identity, entries, |k| {
            self.map.get(k).map(|b| b.key().0.clone())
        })
    }

    /// The bucket of `(identity, entries)`, created on first use (evicting keys at rest to make
    /// room; their leases are added to `returns`) with its global bucket's `store_identity`.
    /// Touches it.
    pub(crate) fn slot(
        &self,
        identity: u64,
        store_identity: u64,
        entries: Values<'_>,
        info: &LimitInfo,
        now: u64,
        returns: &mut Vec<Return>,
    ) -> Slot {
        if let Some(b) = self.get(identity, entries) {
            b.touch(now);
            return Slot::Tracked(b);
        }
        let fresh = || {
            key::with_encoded(identity, entries, |k| {
                LeaseBucket::new(k, info.rate, info.mode, store_identity, now)
            })
        };
        if !self.make_room(store_identity, now, returns) {
            return Slot::NoRoom(fresh());
        }
        // Another request may have added the key meanwhile: its bucket wins.
        let bucket = match self.map.entry(Held(fresh())) {
            dashmap::Entry::Occupied(o) => o.key().0.clone(),
            dashmap::Entry::Vacant(v) => {
                let bucket = v.insert_entry(()).key().0.clone();
                self.room.added(store_identity);
                if info.mode == sluice_core::config::Mode::Local {
                    // No fuller than what this rule's keys evicted for others left behind.
                    bucket.lock().local = self.room.start(store_identity, &info.rate, now);
                }
                bucket
            }
        };
        bucket.touch(now);
        self.metrics.tracked_keys.set(self.map.len() as i64);
        Slot::Tracked(bucket)
    }

    /// The local bucket a new key of rule `identity` would start with at `now`: full, or as
    /// its rule's keys evicted for room left it.
    pub(crate) fn start_state(
        &self,
        identity: u64,
        rate: &sluice_core::bucket::Rate,
        now: u64,
    ) -> sluice_core::bucket::BucketState {
        self.room.start(identity, rate, now)
    }

    /// Forgets a key (an operator reset).
    pub(crate) fn remove(&self, identity: u64, entries: Values<'_>) {
        if let Some((Held(b), ())) = key::with_encoded(identity, entries, |k| self.map.remove(k)) {
            self.room.removed(b.identity, 1);
        }
        self.metrics.tracked_keys.set(self.map.len() as i64);
    }

    /// Drops the state of the key encoded as `key`, whose global bucket another instance reset
    /// (it is full again, so this instance's lease of the old one must not decide any longer),
    /// unless it is a local bucket: a `mode: local` limit is this instance's own. Tokens leased
    /// before the reset are not returned (the reset refilled the bucket). Returns whether a key
    /// was dropped.
    pub(crate) fn drop_pushed(&self, key: &[u8]) -> bool {
        // Shard lock, then the bucket's (the order of docs/architecture.md "Locks").
        let removed = self.map.remove_if(key, |Held(b), ()| {
            b.mode() != sluice_core::config::Mode::Local
        });
        if let Some((Held(b), ())) = &removed {
            self.room.removed(b.identity, 1);
            self.metrics.tracked_keys.set(self.map.len() as i64);
        }
        removed.is_some()
    }

    /// Makes room for one more key of rule `holder`; false if the table is full, no key is at
    /// rest, and `holder` may not take room from another rule ([`Room`]). When full, evicts the
    /// least recently used keys at rest until 90% of the bound remains (one pass to find the
    /// cut-off time, one to evict).
    fn make_room(&self, holder: u64, now: u64, returns: &mut Vec<Return>) -> bool {
        let max = self.max_keys;
        if self.map.len() < max {
            return true;
        }
        if now >= self.no_room_until.load(Ordering::Relaxed) && self.evict_at_rest(now, returns) {
            return true;
        }
        let room = match self.room.verdict(holder) {
            Verdict::TakeFrom(hog) => self.take_room_from(hog, now, returns),
            Verdict::Refuse => false,
        };
        if !room {
            self.metrics.key_refused("table", now);
        }
        room
    }

    /// Evicts the least recently used keys at rest of a full table; false if none is.
    fn evict_at_rest(&self, now: u64, returns: &mut Vec<Return>) -> bool {
        let max = self.max_keys;
        let before = self.map.len();
        let keep = (max - max / 10).saturating_sub(1);
        let mut resting = Vec::new();
        let mut next_at_rest = u64::MAX;
        for entry in self.map.iter() {
            let b = &entry.key().0;
            // A key used at this very instant may be part of a request being decided (even this
            // one): evicting it would strand the lease that request is spending from.
            if b.last_used() < now && b.at_rest(now) {
                resting.push(b.last_used());
            } else {
                let state = b.lock();
                let left = state.remaining(state.mode, &b.rate, now);
                let until = b.rate.micros_until_at(left, b.rate.burst as f64, now);
                next_at_rest = next_at_rest.min(until.unwrap_or(u64::MAX));
            }
        }
        let evict = before.saturating_sub(keep).min(resting.len());
        if evict == 0 {
            // Scan again when the first key comes to rest, and at least once a second (a key
            // may be reset, or a bucket that never refills hold the table).
            let wait = next_at_rest.clamp(1, RESCAN_MICROS);
            self.no_room_until
                .store(now.saturating_add(wait), Ordering::Relaxed);
            tracing::debug!("max_keys reached and no tracked key is at rest");
            return false;
        }
        // Keys at rest used at or before `cutoff` are the `evict` least recently used (ties may
        // evict a few more).
        let (_, cutoff, _) = resting.select_nth_unstable(evict - 1);
        let cutoff = *cutoff;
        let mut removed = Removed::default();
        self.map.retain(|Held(bucket), ()| {
            let keep =
                bucket.last_used() > cutoff || bucket.last_used() >= now || !bucket.at_rest(now);
            if !keep {
                returns.extend(Return::take(bucket, &mut bucket.lock(), now));
                removed.add(bucket.identity);
            }
            keep
        });
        removed.apply(&self.room);
        let evicted = before.saturating_sub(self.map.len());
        self.metrics
            .evictions
            .with_label_values(&["capacity"])
            .inc_by(evicted as u64);
        tracing::debug!(
            evicted,
            "max_keys reached; evicted the least recently used keys at rest"
        );
        self.map.len() < max
    }

    /// Evicts some keys of rule `hog`: keys at rest (their leases go back), and local buckets
    /// that are not, whose state is left behind for its new keys; whether that made room.
    fn take_room_from(&self, hog: u64, now: u64, returns: &mut Vec<Return>) -> bool {
        let mut left = self.room.to_take(hog);
        let before = left;
        self.map.retain(|Held(bucket), ()| {
            // A key used at this very instant may be part of a request being decided.
            if left == 0 || bucket.identity != hog || bucket.last_used() >= now {
                return true;
            }
            let mut state = bucket.lock();
            // Holds are given back to their key: never dropped to make room.
            if !state.rare().holds.is_empty() {
                return true;
            }
            if state.mode == sluice_core::config::Mode::Local
                && !state.at_rest(state.mode, &bucket.rate, now)
            {
                // Usage not yet sent to the store would be lost with the key.
                if state.rare().debt_pending > 0 {
                    return true;
                }
                self.room.leave_behind(hog, &bucket.rate, &state.local, now);
            } else if state.at_rest(state.mode, &bucket.rate, now) {
                returns.extend(Return::take(bucket, &mut state, now));
            } else {
                return true;
            }
            left -= 1;
            false
        });
        self.room.removed(hog, before - left);
        self.metrics
            .evictions
            .with_label_values(&["capacity"])
            .inc_by((before - left) as u64);
        self.metrics.tracked_keys.set(self.map.len() as i64);
        self.map.len() < self.max_keys
    }

    /// Takes back leases unspent for `ttl` (cold leases: `cold_ttl`; a starved key's:
    /// `starved_ttl`) and evicts keys idle for `idle` that are at rest; returns the tokens to
    /// hand back.
    pub(crate) fn sweep(
        &self,
        now: u64,
        idle: u64,
        (ttl, cold_ttl, starved_ttl): (u64, u64, u64),
    ) -> Swept {
        let mut swept = Swept::default();
        let returns = &mut swept.returns;
        let mut removed = Removed::default();
        let before = self.map.len();
        self.map.retain(|Held(bucket), ()| {
            let is_idle = now.saturating_sub(bucket.last_used()) > idle;
            let mut state = bucket.lock();
            let concurrency = bucket.rate.algorithm == Algorithm::Concurrency;
            if concurrency || !state.rare().holds.is_empty() {
                let expired = crate::holds::expire(&mut state, &bucket.rate, now);
                if expired > 0 {
                    *swept.expired.entry(bucket.identity).or_default() += expired;
                }
                let holds = &state.rare().holds;
                if !holds.is_empty() {
                    swept.holds += holds.len() as u64;
                    let slots = holds.iter().map(|h| h.slots).fold(0, u64::saturating_add);
                    let n = swept.in_flight.entry(bucket.identity).or_default();
                    *n = n.saturating_add(slots);
                }
                if concurrency {
                    returns.extend(Return::renewal(bucket, &state, now));
                }
            }
            // A cold lease (the key far from its limit when it was granted) is kept longer: its
            // tokens are wanted by nobody else, and spending them later saves lease calls.
            let held = now.saturating_sub(state.leased_at);
            // A starved key's lease is sized for its wait until its next turn, and is its share
            // of what refilled since the turn before it: kept as long as that wait may be.
            // A lease of rate's stock is kept while the reservation fills it: this instance's
            // share of the rate, capped, with what calls took beyond a request's lack (its
            // share of the burst's top half, or a refill ahead: `lease/policy.rs`), spent
            // before the stock fills past its cap; until the key goes unused for longer than
            // its demand explains (`LeaseState::rate_lease_unused`).
            let lapsed = if state.rate_leased(now) {
                state.rate_lease_unused(now.saturating_sub(bucket.last_used()), ttl)
            } else if state.queued {
                held > starved_ttl
            } else if state.cold_lease {
                held > cold_ttl
            } else {
                held > ttl
            };
            if (is_idle || lapsed) && (state.lease > 0 || state.rate_lease_recorded()) {
                returns.extend(Return::take(bucket, &mut state, now));
                // The global reading is stale once tokens went back; read it again on use.
                state.reading = crate::ledger::Reading::Unknown;
            }
            let evict = is_idle && state.at_rest(state.mode, &bucket.rate, now);
            if evict {
                removed.add(bucket.identity);
            }
            !evict
        });
        removed.apply(&self.room);
        let evicted = before.saturating_sub(self.map.len());
        self.metrics
            .evictions
            .with_label_values(&["idle"])
            .inc_by(evicted as u64);
        self.metrics.tracked_keys.set(self.map.len() as i64);
        swept
    }

    /// Takes every lease this instance holds at `now` (at shutdown).
    pub(crate) fn take_all_leases(&self, now: u64) -> Vec<Return> {
        self.map
            .iter()
            .filter_map(|entry| {
                let bucket = &entry.key().0;
                let mut state = bucket.lock();
                Return::take(bucket, &mut state, now)
            })
            .collect()
    }

    /// Calls `f` on every tracked key.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&[u8], &LeaseBucket)) {
        for entry in self.map.iter() {
            let bucket = &entry.key().0;
            f(bucket.key(), bucket);
        }
    }
}

/// Keys removed in one pass over the table, by rule: counted out of [`Room`] after the pass
/// (one lock of the room per rule, not per key).
#[derive(Default)]
struct Removed(std::collections::HashMap<u64, usize>);

impl Removed {
    fn add(&mut self, holder: u64) {
        *self.0.entry(holder).or_default() += 1;
    }

    fn apply(self, room: &Room) {
        for (holder, n) in self.0 {
            room.removed(holder, n);
        }
    }
}
