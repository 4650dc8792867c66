//! One key's local state behind its lock: a lease of global tokens (strict, exact) or a whole
//! bucket (local). The arithmetic on the state lives in [`ledger`](crate::ledger).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_core::bucket::Rate;
use sluice_core::config::Mode;
use triomphe::ThinArc;

use crate::ledger::LeaseState;

/// The local state of one bucket key, shared by the table and the decisions using it.
///
/// The key's bytes and its state are one allocation behind one pointer (a `triomphe::ThinArc`:
/// a reference count, the [`BucketHead`], the key's length and its bytes). With the key in a
/// box of its own and a `std::sync::Arc` (two counts) a key cost two allocations, 232 bytes in
/// mimalloc's size classes; this is one of 192 for keys up to 40 bytes (docs/architecture.md
/// "Memory per tracked key"). Cloning it clones the pointer.
#[derive(Clone)]
pub struct LeaseBucket(ThinArc<BucketHead, u8>);

/// What a [`LeaseBucket`] holds beside its key.
///
/// A std `Mutex` guards the state: it is held for a few arithmetic steps and never across an
/// `.await`, so contention is short and no async mutex is needed.
#[derive(Debug)]
pub struct BucketHead {
    /// The limit this key enforces.
    pub rate: Rate,
    /// The identity of the rule (its fingerprint) or override the key belongs to.
    pub identity: u64,
    /// Last decision time, read by eviction without taking the lock.
    last_used: AtomicU64,
    state: Mutex<LeaseState>,
}

impl std::ops::Deref for LeaseBucket {
    type Target = BucketHead;

    fn deref(&self) -> &BucketHead {
        &self.0.header.header
    }
}

impl std::fmt::Debug for LeaseBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseBucket")
            .field("key", &self.key())
            .field("head", &**self)
            .finish()
    }
}

impl LeaseBucket {
    /// A new key's bucket: empty lease, full local bucket.
    pub fn new(key: &[u8], rate: Rate, mode: Mode, identity: u64, now: u64) -> Self {
        let head = BucketHead {
            rate,
            identity,
            last_used: AtomicU64::new(now),
            state: Mutex::new(LeaseState::new(mode, &rate, now)),
        };
        Self(ThinArc::from_header_and_slice(head, key))
    }

    /// The bucket key's bytes (the table holds buckets, and finds them by this key).
    pub fn key(&self) -> &[u8] {
        &self.0.slice
    }

    /// Where the bucket lives: the same for every clone, different for every two buckets alive
    /// (lock ordering, single-flight stripes).
    pub fn addr(&self) -> usize {
        self.0.ptr() as usize
    }

    /// How the key is shared across instances.
    pub fn mode(&self) -> Mode {
        self.lock().mode
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
        let state = self.lock();
        state.at_rest(state.mode, &self.rate, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tracked key carries one allocation: a count (8), the head, the key's length (8)
    /// and its bytes. mimalloc rounds 160 < n ≤ 192 to 192, the budget of
    /// docs/architecture.md "Memory per tracked key" for keys up to 40 bytes (one descriptor
    /// entry of short key and value). A field added to the head crosses it.
    #[test]
    fn a_bucket_fits_its_memory_budget() {
        let head = std::mem::size_of::<BucketHead>();
        assert!(head <= 136, "BucketHead is {head} bytes");
        assert_eq!(std::mem::size_of::<LeaseBucket>(), 8, "one thin pointer");
    }

    #[test]
    fn clones_share_one_bucket_and_its_key() {
        let rate = Rate::per_unit(5, sluice_core::Unit::Second);
        let a = LeaseBucket::new(b"key bytes", rate, Mode::Local, 7, 3);
        let b = a.clone();
        let other = LeaseBucket::new(b"key bytes", rate, Mode::Local, 7, 3);
        assert_eq!(b.key(), b"key bytes");
        assert_eq!(a.addr(), b.addr());
        assert_ne!(a.addr(), other.addr());
        a.lock().lease = 4;
        assert_eq!(b.lock().lease, 4, "one state behind both");
        assert_eq!((b.mode(), b.identity, b.last_used()), (Mode::Local, 7, 3));
    }
}
