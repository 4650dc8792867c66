//! The embedded global store: global buckets in this process's memory.
//!
//! It is what sluice runs on with no Redis configured, and it keeps the lease path exercised:
//! the engine leases from it exactly as it leases from Redis.
//!
//! It holds at most `max_keys` buckets. A full bucket is the same as an absent one, so full
//! buckets are dropped (by housekeeping, and whenever room is needed). When every bucket held is
//! below full, a rule with fewer buckets than its share takes room from the rule with the most
//! (see [`Room`]: what those buckets held is left behind for their rule's new keys, so no limit
//! is reset); otherwise a new key is refused ([`StoreError::Full`]).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use sluice_core::Clock;
use sluice_core::bucket::{BucketState, Rate};
use sluice_core::reserve::Reservations;

use crate::key;
use crate::room::{Room, Verdict};
use crate::store::{
    GlobalStore, LeaseAsk, LeaseGrant, StoreError, StoreFuture, next_turn, ready_in,
};
use stored::Stored;

mod stored;

/// Global buckets in a [`DashMap`], timed by the injected clock.
#[derive(Debug)]
pub struct MemoryStore<C: Clock> {
    clock: C,
    /// Each bucket with the rate it was last used with, so idle full buckets can be dropped;
    /// by [`KeyId`], not by the key string, which would cost ~70 bytes more per key.
    buckets: DashMap<KeyId, Stored, foldhash::fast::RandomState>,
    /// Buckets per rule, so one rule's buckets cannot take every other rule's room.
    room: Room,
    /// Two independently, randomly keyed SipHash functions: together a 128-bit key id.
    ids: (RandomState, RandomState),
    /// Most buckets held at once.
    max_keys: usize,
    /// When a purge left the store full: the earliest time a bucket can be full again, so new
    /// keys before then are refused without scanning again.
    no_room_until: AtomicU64,
    /// RLQS demands by bucket key: (client, milli-requests per second, expiry µs). A key's
    /// entry goes when its last demand is withdrawn or has expired.
    demands: std::sync::Mutex<std::collections::HashMap<String, Vec<Demand>>>,
    /// The end of each key's queue of starved callers ([`next_turn`]), for the keys whose
    /// callers asked for turns: none do in process (the engine asks only a remote store for a
    /// turn), so this stays empty but for engines that use this store as a stand-in for Redis
    /// (the fleet model). Ended queues go at housekeeping.
    turns: DashMap<KeyId, u64, foldhash::fast::RandomState>,
    /// Denied hits by slot and store key (`quota top`, [`crate::top`]): the last
    /// [`WINDOW_SLOTS`](crate::top::WINDOW_SLOTS) slots, each of at most
    /// [`KEEP_PER_SLOT`](crate::top::KEEP_PER_SLOT) members.
    denied:
        std::sync::Mutex<std::collections::BTreeMap<u64, std::collections::HashMap<String, u64>>>,
}

/// A store key's 128-bit keyed hash. Keys come from request data, so they are hashed with
/// secret random keys (SipHash, as std's HashMap does against HashDoS): a client cannot make
/// two keys share a bucket on purpose, and by chance it takes ~2^64 keys.
type KeyId = u128;

/// One RLQS client's demand: (client, milli-requests per second, expiry µs).
type Demand = (u64, u64, u64);

impl<C: Clock> MemoryStore<C> {
    /// Every reservation `key`'s bucket keeps now (`R`, thousandths of a token per period; the
    /// bucket brought up to now, as any call brings it): what the outage tests hold a sidecar's
    /// last answer against.
    #[cfg(test)]
    pub(crate) fn reserved_all(&self, key: &str) -> u64 {
        let now = self.clock.now_micros();
        self.buckets.get_mut(&self.id(key)).map_or(0, |mut b| {
            b.advance(now);
            b.reserved.as_ref().map_or(0, |r| r.granted())
        })
    }

    /// An empty store with no bound on its size (tests, benchmarks).
    pub fn new(clock: C) -> Arc<Self> {
        Self::with_max_keys(clock, usize::MAX)
    }

    /// An empty store holding at most `max_keys` buckets.
    pub fn with_max_keys(clock: C, max_keys: usize) -> Arc<Self> {
        Arc::new(Self {
            clock,
            buckets: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            ids: (RandomState::new(), RandomState::new()),
            max_keys,
            room: Room::new(max_keys),
            no_room_until: AtomicU64::new(0),
            demands: std::sync::Mutex::default(),
            turns: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            denied: std::sync::Mutex::default(),
        })
    }

    /// Drops buckets that have refilled to full: they are the same as absent ones. Returns when
    /// to look again: the earliest time one of the others will be full, at most a second away.
    pub fn purge_full(&self) -> u64 {
        let now = self.clock.now_micros();
        let mut next_full = u64::MAX;
        let mut dropped: HashMap<u64, usize> = HashMap::new();
        self.buckets.retain(|_, b| {
            let available = b.available_at(now);
            // A sliding window is full only once its previous window's hits no longer count;
            // a bucket with live reservations refills more slowly, and they would be lost.
            let reserving = b
                .reserved
                .as_deref()
                .and_then(Reservations::latest_until)
                .is_some_and(|until| until > now);
            let full = available >= b.rate.burst as f64 && !reserving;
            if full {
                *dropped.entry(b.holder).or_default() += 1;
            } else {
                // At least once a second: a bucket that never refills must not make every new
                // key rescan the store, nor keep it from ever looking again.
                let until = b.rate.micros_until_at(available, b.rate.burst as f64, now);
                let wait = until.unwrap_or(u64::MAX).clamp(1, 1_000_000);
                next_full = next_full.min(now.saturating_add(wait));
            }
            !full
        });
        for (holder, n) in dropped {
            self.room.removed(holder, n);
        }
        next_full
    }

    /// How many global buckets are held.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    fn id(&self, key: &str) -> KeyId {
        (u128::from(self.ids.0.hash_one(key)) << 64) | u128::from(self.ids.1.hash_one(key))
    }

    /// Whether a new bucket of `holder` fits: dropping full ones if needed, else taking room
    /// from the rule with the most buckets if `holder` has fewer than its share.
    fn has_room(&self, holder: u64, now: u64) -> bool {
        if self.buckets.len() < self.max_keys {
            return true;
        }
        if now >= self.no_room_until.load(Ordering::Relaxed) {
            let next_full = self.purge_full();
            if self.buckets.len() < self.max_keys {
                return true;
            }
            self.no_room_until.store(next_full, Ordering::Relaxed);
        }
        match self.room.verdict(holder) {
            Verdict::TakeFrom(hog) => {
                self.take_room_from(hog, now);
                self.buckets.len() < self.max_keys
            }
            Verdict::Refuse => false,
        }
    }

    /// Evicts some buckets of `hog`, leaving what they held behind for its new keys.
    fn take_room_from(&self, hog: u64, now: u64) {
        let mut left = self.room.to_take(hog);
        let before = left;
        self.buckets.retain(|_, b| {
            // A concurrency limit's slots out would be forgotten (an absent bucket is all
            // free), and what it left behind would never refill for the rule's new keys.
            if left == 0
                || b.holder != hog
                || b.rate.algorithm == sluice_core::bucket::Algorithm::Concurrency
                || b.reserved.is_some()
            {
                return true;
            }
            left -= 1;
            self.room.leave_behind(hog, &b.rate, &b.state, now);
            false
        });
        self.room.removed(hog, before - left);
    }

    /// Runs `f` on the bucket at `key`, refilled to now; an absent bucket is created (full, or
    /// as its rule's evicted buckets left it) if `create` and there is room (else `f` is not
    /// run).
    fn with_bucket<T>(
        &self,
        key: &str,
        rate: &Rate,
        create: bool,
        f: impl FnOnce(&mut BucketState, u64) -> T,
    ) -> Option<T> {
        self.with_stored(key, rate, create, |b, now| f(&mut b.state, now))
    }

    /// [`with_bucket`](Self::with_bucket) with the bucket's reservations: refilled to now at
    /// `L − R` first, as `bucket.lua` refills it.
    fn with_stored<T>(
        &self,
        key: &str,
        rate: &Rate,
        create: bool,
        f: impl FnOnce(&mut Stored, u64) -> T,
    ) -> Option<T> {
        let now = self.clock.now_micros();
        let id = self.id(key);
        if let Some(mut entry) = self.buckets.get_mut(&id) {
            let b = entry.value_mut();
            b.rate = *rate;
            b.advance(now);
            return Some(f(b, now));
        }
        let holder = key::identity_of(key).unwrap_or(0);
        if !create || !self.has_room(holder, now) {
            return None;
        }
        let mut entry = self.buckets.entry(id).or_insert_with(|| {
            self.room.added(holder);
            Stored {
                rate: *rate,
                state: self.room.start(holder, rate, now),
                holder,
                reserved: None,
            }
        });
        let b = entry.value_mut();
        b.rate = *rate;
        Some(f(b, now))
    }
}

impl<C: Clock> GlobalStore for MemoryStore<C> {
    fn lease_asking<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        ask: LeaseAsk,
    ) -> StoreFuture<'a, LeaseGrant> {
        let grant = self.with_stored(key, &rate, true, |stored, now| {
            let b = &mut stored.state;
            if let Some(r) = ask.reserve
                && r.give_back_milli > 0
                && rate.algorithm == sluice_core::bucket::Algorithm::TokenBucket
            {
                b.give_back_milli(&rate, now, r.give_back_milli);
            }
            let granted = b.take_keeping_half(&rate, now, ask.want, ask.least);
            // What the bucket holds once this call took its grant: what the answer reports,
            // what may be reserved is judged on, and what a turn waits for.
            let left = b.available(&rate);
            let mut grant = LeaseGrant::of(granted, left, &rate, now);
            if let Some(r) = ask.reserve {
                let held = stored.reserved.get_or_insert_with(Box::default);
                grant.reserved =
                    Some(held.reserve(&rate, r.holder, r.per_mille, r.ttl_micros, now, left));
                if held.is_empty() {
                    stored.reserved = None;
                }
            }
            if let Some(held) = stored.reserved.as_ref() {
                grant.reserved_all = held.granted();
                grant.reserved_ends_in = held.ends_in(now);
            }
            if ask.turn_gap > 0 && (granted < ask.starved_below || granted < ask.queue_below) {
                let mut end = self.turns.entry(self.id(key)).or_insert(0);
                if granted < ask.starved_below || *end > now {
                    let ready_in = ready_in(&rate, left, ask.lacking(granted));
                    *end = next_turn(*end, now, ask.turn_gap, ready_in);
                    grant.turn_in = Some(*end - now);
                }
            }
            grant
        });
        Box::pin(async move { grant.ok_or(StoreError::Full) })
    }

    fn charge<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        max_debt: u64,
    ) -> StoreFuture<'a, LeaseGrant> {
        let grant = self.with_bucket(key, &rate, true, |b, now| {
            let charged = b.charge(&rate, now, tokens, max_debt);
            LeaseGrant::of(charged, b.available(&rate), &rate, now)
        });
        Box::pin(async move { grant.ok_or(StoreError::Full) })
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        window: u64,
    ) -> StoreFuture<'a, ()> {
        self.with_bucket(key, &rate, false, |b, now| {
            b.give_back(&rate, now, tokens, window)
        });
        Box::pin(async { Ok(()) })
    }

    fn close_window<'a>(&'a self, key: &'a str, rate: Rate, window: u64) -> StoreFuture<'a, ()> {
        // Only a fixed window closes, and windows are never reserved: a token bucket is left
        // exactly as it was, not even refilled, as `close.lua` leaves it.
        if rate.algorithm != sluice_core::bucket::Algorithm::FixedWindow {
            return Box::pin(async { Ok(()) });
        }
        self.with_bucket(key, &rate, false, |b, now| b.close(&rate, now, window));
        Box::pin(async { Ok(()) })
    }

    fn peek<'a>(&'a self, key: &'a str, rate: Rate) -> StoreFuture<'a, f64> {
        let now = self.clock.now_micros();
        let tokens = match self.buckets.get(&self.id(key)) {
            Some(b) if b.rate == rate => b.available_at(now),
            Some(b) => b.state.available_at(&rate, now),
            // As it would start: its rule's evicted buckets may have left a lower level.
            None => {
                let holder = key::identity_of(key).unwrap_or(0);
                self.room.start(holder, &rate, now).available(&rate)
            }
        };
        Box::pin(async move { Ok(tokens) })
    }

    fn reset<'a>(&'a self, key: &'a str, _local: &'a [u8]) -> StoreFuture<'a, ()> {
        // One process: no other instance to tell.
        let id = self.id(key);
        if let Some((_, b)) = self.buckets.remove(&id) {
            self.room.removed(b.holder, 1);
        }
        self.turns.remove(&id);
        Box::pin(async { Ok(()) })
    }

    fn add_denied<'a>(&'a self, slot: u64, counts: &'a [(String, u64)]) -> StoreFuture<'a, ()> {
        let mut denied = self
            .denied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        crate::top::merge_into(denied.entry(slot).or_default(), counts);
        // Slots before the window are never read again.
        let oldest = slot.saturating_sub(crate::top::WINDOW_SLOTS);
        denied.retain(|&s, _| s >= oldest);
        Box::pin(async { Ok(()) })
    }

    fn top_denied<'a>(&'a self, from: u64, to: u64) -> StoreFuture<'a, Vec<(String, u64)>> {
        let denied = self
            .denied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut sum = std::collections::HashMap::<String, u64>::new();
        for (_, slot) in denied.range(from..=to) {
            for (member, n) in slot {
                let total = sum.entry(member.clone()).or_default();
                *total = total.saturating_add(*n);
            }
        }
        Box::pin(async move { Ok(sum.into_iter().collect()) })
    }

    fn demand<'a>(
        &'a self,
        key: &'a str,
        client: u64,
        milli_rps: u64,
        ttl: std::time::Duration,
    ) -> StoreFuture<'a, Vec<u64>> {
        let now = self.clock.now_micros();
        let until = now.saturating_add(u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX));
        let mut all = self
            .demands
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let live = {
            let entries = all.entry(key.to_string()).or_default();
            entries.retain(|&(c, _, expiry)| c != client && expiry > now);
            if milli_rps > 0 {
                entries.push((client, milli_rps, until));
            }
            entries.iter().map(|&(_, d, _)| d).collect::<Vec<u64>>()
        };
        if live.is_empty() {
            all.remove(key);
        }
        Box::pin(async move { Ok(live) })
    }

    fn is_in_process(&self) -> bool {
        true
    }

    fn housekeeping(&self) {
        self.purge_full();
        let now = self.clock.now_micros();
        self.turns.retain(|_, end| *end > now);
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests;
