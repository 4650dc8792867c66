//! One key's local state behind its lock: a lease of global tokens (strict, exact) or a whole
//! bucket (local). The arithmetic on the state lives in [`ledger`](crate::ledger).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_core::bucket::Rate;
use sluice_core::config::Mode;

use crate::key::BucketKey;
use crate::ledger::LeaseState;

/// The local state of one bucket key.
///
/// A std `Mutex` guards the state: it is held for a few arithmetic steps and never across an
/// `.await`, so contention is short and no async mutex is needed.
#[derive(Debug)]
pub struct LeaseBucket {
    /// The bucket key (the table holds buckets, and finds them by this key).
    pub key: BucketKey,
    /// The limit this key enforces.
    pub rate: Rate,
    /// How it is shared across instances.
    pub mode: Mode,
    /// The identity of the rule (its fingerprint) or override the key belongs to.
    pub identity: u64,
    /// Last decision time, read by eviction without taking the lock.
    last_used: AtomicU64,
    state: Mutex<LeaseState>,
}

impl LeaseBucket {
    /// A new key's bucket: empty lease, full local bucket.
    pub fn new(key: BucketKey, rate: Rate, mode: Mode, identity: u64, now: u64) -> Self {
        Self {
            key,
            rate,
            mode,
            identity,
            last_used: AtomicU64::new(now),
            state: Mutex::new(LeaseState::new(&rate, now)),
        }
    }

    /// Locks the state. A poisoned lock (a panic while held) still holds consistent numbers,
    /// since every update is a few plain assignments, so it is used as is.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, LeaseState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a use at `now`.
    pub fn touch(&self, now: u64) {
        self.last_used.store(now, Ordering::Relaxed);
    }

    /// The last use.
    pub fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }

    /// Whether evicting the key now loses nothing a limit depends on (see
    /// [`LeaseState::at_rest`]: holds and post-paid usage pending are kept, whatever the mode).
    pub fn at_rest(&self, now: u64) -> bool {
        self.lock().at_rest(self.mode, &self.rate, now)
    }
}
#[cfg(test)]
mod tests {
    /// Every tracked key carries one `LeaseBucket` (in an `Arc`: 16 bytes more, and the
    /// allocator's 8-byte header, rounded to 16): 168 bytes make a 192-byte allocation, the
    /// budget of docs/architecture.md "Memory per tracked key". A field added here crosses it.
    #[test]
    fn a_bucket_fits_its_memory_budget() {
        assert!(
            std::mem::size_of::<super::LeaseBucket>() <= 168,
            "LeaseBucket is {} bytes",
            std::mem::size_of::<super::LeaseBucket>()
        );
    }
}
