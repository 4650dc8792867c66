//! The embedded global store: global buckets in this process's memory.
//!
//! It is what sluice runs on with no Redis configured, and it keeps the lease path exercised:
//! the engine leases from it exactly as it leases from Redis.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use dashmap::DashMap;
use sluice_core::Clock;
use sluice_core::bucket::{BucketState, Rate};

use crate::store::{GlobalStore, LeaseGrant, StoreFuture};

/// Global buckets in a [`DashMap`], timed by the injected clock.
#[derive(Debug)]
pub struct MemoryStore<C: Clock> {
    clock: C,
    /// Each bucket with the rate it was last used with, so idle full buckets can be dropped;
    /// by [`KeyId`], not by the key string, which would cost ~70 bytes more per key.
    buckets: DashMap<KeyId, (Rate, BucketState), foldhash::fast::RandomState>,
    /// Two independently, randomly keyed SipHash functions: together a 128-bit key id.
    ids: (RandomState, RandomState),
}

/// A store key's 128-bit keyed hash. Keys come from request data, so they are hashed with
/// secret random keys (SipHash, as std's HashMap does against HashDoS): a client cannot make
/// two keys share a bucket on purpose, and by chance it takes ~2^64 keys.
type KeyId = u128;

impl<C: Clock> MemoryStore<C> {
    /// An empty store.
    pub fn new(clock: C) -> Arc<Self> {
        Arc::new(Self {
            clock,
            buckets: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            ids: (RandomState::new(), RandomState::new()),
        })
    }

    /// Drops buckets that have refilled to full: they are the same as absent ones.
    pub fn purge_full(&self) {
        let now = self.clock.now_micros();
        self.buckets.retain(|_, (rate, state)| {
            let mut s = *state;
            s.refill(rate, now);
            s.tokens < rate.burst as f64
        });
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

    fn with_bucket<T>(
        &self,
        key: &str,
        rate: &Rate,
        f: impl FnOnce(&mut BucketState, u64) -> T,
    ) -> T {
        let now = self.clock.now_micros();
        let mut entry = self
            .buckets
            .entry(self.id(key))
            .or_insert_with(|| (*rate, BucketState::full(rate, now)));
        let (stored_rate, state) = entry.value_mut();
        *stored_rate = *rate;
        f(state, now)
    }
}

impl<C: Clock> GlobalStore for MemoryStore<C> {
    fn lease<'a>(&'a self, key: &'a str, rate: Rate, want: u64) -> StoreFuture<'a, LeaseGrant> {
        let grant = self.with_bucket(key, &rate, |b, now| {
            let granted = b.take_up_to(&rate, now, want);
            LeaseGrant {
                granted,
                remaining: b.tokens,
            }
        });
        Box::pin(async move { Ok(grant) })
    }

    fn release<'a>(&'a self, key: &'a str, rate: Rate, tokens: u64) -> StoreFuture<'a, ()> {
        self.with_bucket(key, &rate, |b, now| b.give_back(&rate, now, tokens));
        Box::pin(async { Ok(()) })
    }

    fn peek<'a>(&'a self, key: &'a str, rate: Rate) -> StoreFuture<'a, f64> {
        let now = self.clock.now_micros();
        let tokens = match self.buckets.get(&self.id(key)) {
            Some(b) => {
                let mut s = b.1;
                s.refill(&rate, now);
                s.tokens
            }
            None => rate.burst as f64,
        };
        Box::pin(async move { Ok(tokens) })
    }

    fn reset<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        self.buckets.remove(&self.id(key));
        Box::pin(async { Ok(()) })
    }

    fn is_in_process(&self) -> bool {
        true
    }

    fn housekeeping(&self) {
        self.purge_full();
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}
