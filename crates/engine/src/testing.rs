//! Test doubles for the engine's own tests: the real in-memory store behind a switch, so a test
//! can take the store down or fill it at any moment. One forwarding double instead of one per
//! test module.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use sluice_core::ManualClock;
use sluice_core::bucket::Rate;

use crate::memory::MemoryStore;
use crate::store::{GlobalStore, LeaseGrant, StoreError, StoreFuture};

/// What the switched store does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Mode {
    /// Answers, from the in-memory store.
    Up = 0,
    /// Fails as an unreachable Redis would (and reports itself degraded).
    Down = 1,
    /// Has no room for any key (`StoreError::Full`).
    Full = 2,
}

/// The in-memory store (real) behind a switch. While not [`Mode::Up`] the store is not
/// touched: the in-memory store's calls act when made, not when awaited. It reports
/// `instances` live sidecars (for `local_share`).
pub(crate) struct Switched {
    pub(crate) inner: Arc<MemoryStore<ManualClock>>,
    mode: AtomicU8,
    instances: u64,
}

impl Switched {
    pub(crate) fn new(clock: &ManualClock, mode: Mode, instances: u64) -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryStore::new(clock.clone()),
            mode: AtomicU8::new(mode as u8),
            instances,
        })
    }

    pub(crate) fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn mode(&self) -> u8 {
        self.mode.load(Ordering::SeqCst)
    }

    fn call<'a, T: Send + 'a>(
        &'a self,
        call: impl FnOnce(&'a MemoryStore<ManualClock>) -> StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T> {
        match self.mode() {
            m if m == Mode::Up as u8 => call(&self.inner),
            m if m == Mode::Down as u8 => {
                Box::pin(async { Err(StoreError::Unavailable("connection refused".into())) })
            }
            _ => Box::pin(async { Err(StoreError::Full) }),
        }
    }
}

impl GlobalStore for Switched {
    fn lease<'a>(&'a self, key: &'a str, rate: Rate, want: u64) -> StoreFuture<'a, LeaseGrant> {
        self.call(|s| s.lease(key, rate, want))
    }
    fn charge<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        max_debt: u64,
    ) -> StoreFuture<'a, LeaseGrant> {
        self.call(|s| s.charge(key, rate, tokens, max_debt))
    }
    fn release<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        window: u64,
    ) -> StoreFuture<'a, ()> {
        // A failed return loses tokens: stricter, never looser.
        self.call(|s| s.release(key, rate, tokens, window))
    }
    fn peek<'a>(&'a self, key: &'a str, rate: Rate) -> StoreFuture<'a, f64> {
        self.call(|s| s.peek(key, rate))
    }
    fn reset<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        self.call(|s| s.reset(key))
    }
    fn demand<'a>(
        &'a self,
        key: &'a str,
        client: u64,
        milli_rps: u64,
        ttl: std::time::Duration,
    ) -> StoreFuture<'a, Vec<u64>> {
        self.call(|s| s.demand(key, client, milli_rps, ttl))
    }
    fn name(&self) -> &'static str {
        "switched"
    }
    fn degraded(&self) -> bool {
        self.mode() == Mode::Down as u8
    }
    fn live_instances(&self) -> u64 {
        self.instances
    }
}
