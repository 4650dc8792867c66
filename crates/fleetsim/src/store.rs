//! The simulated remote store: the real in-memory store (which the conformance suite proves
//! equal to the Lua scripts), reached over a simulated network — half the round trip out, the
//! call, half back, each with its jitter — failing at once while an outage lasts (as the Redis
//! store's open circuit breaker does; the few calls it lets time out first are not modelled),
//! and counting every call. The engines see a remote store: a decision timeout, no in-process shortcuts, and the
//! fleet's live sidecar count as heartbeats would report it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use sluice_core::bucket::Rate;
use sluice_engine::store::StoreFuture;
use sluice_engine::{GlobalStore, LeaseAsk, LeaseGrant, MemoryStore, StoreError};

use crate::clock::SimClock;
use crate::scenario::Case;

/// Store calls, by what they are.
#[derive(Debug, Default)]
pub struct Calls {
    /// Leases (and asks for a request's tokens).
    pub leases: AtomicU64,
    /// Returns of unspent tokens.
    pub releases: AtomicU64,
    /// Every other call on a key (charges, reads, closes, resets, demand).
    pub other: AtomicU64,
    /// Calls that failed because the store was out.
    pub failed: AtomicU64,
}

impl Calls {
    /// Every call on a key.
    pub fn on_keys(&self) -> u64 {
        self.leases.load(Ordering::Relaxed)
            + self.releases.load(Ordering::Relaxed)
            + self.other.load(Ordering::Relaxed)
    }
}

/// The in-memory store behind a simulated network.
pub struct SimStore {
    inner: Arc<MemoryStore<SimClock>>,
    clock: SimClock,
    case: Case,
    jitter: Mutex<StdRng>,
    /// What the engines made of it.
    pub calls: Calls,
}

impl SimStore {
    /// The store of `case`, on `clock`.
    pub fn new(case: &Case, clock: SimClock) -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryStore::new(clock),
            clock,
            case: case.clone(),
            jitter: Mutex::new(StdRng::seed_from_u64(case.seed ^ 0x005e_ed0f_7e11)),
            calls: Calls::default(),
        })
    }

    fn out(&self) -> bool {
        self.case.out_at(self.clock.elapsed_micros())
    }

    /// One way of a round trip: half of it, and up to half the jitter.
    fn one_way(&self) -> Duration {
        let jitter = match self.case.jitter_us {
            0 => 0,
            j => self.jitter.lock().expect("jitter").random_range(0..=j / 2),
        };
        Duration::from_micros(self.case.rtt_us / 2 + jitter)
    }

    /// `call` made at the far end of the network: after the way out, and answered after the
    /// way back; an error (and no call) while the store is out.
    fn remote<'a, T: Send + 'a>(
        &'a self,
        counter: &'a AtomicU64,
        call: impl FnOnce() -> StoreFuture<'a, T> + Send + 'a,
    ) -> StoreFuture<'a, T> {
        Box::pin(async move {
            if self.out() {
                // As the Redis store's open breaker does: fail at once, no call made.
                self.calls.failed.fetch_add(1, Ordering::Relaxed);
                return Err(StoreError::Unavailable("simulated outage".into()));
            }
            counter.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(self.one_way()).await;
            if self.out() {
                // It went out while the call was on its way.
                self.calls.failed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(self.one_way()).await;
                return Err(StoreError::Unavailable("simulated outage".into()));
            }
            let answer = call().await;
            tokio::time::sleep(self.one_way()).await;
            answer
        })
    }
}

impl GlobalStore for SimStore {
    fn lease_asking<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        ask: LeaseAsk,
    ) -> StoreFuture<'a, LeaseGrant> {
        self.remote(&self.calls.leases, move || {
            self.inner.lease_asking(key, rate, ask)
        })
    }

    fn charge<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        max_debt: u64,
    ) -> StoreFuture<'a, LeaseGrant> {
        self.remote(&self.calls.other, move || {
            self.inner.charge(key, rate, tokens, max_debt)
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        window: u64,
    ) -> StoreFuture<'a, ()> {
        self.remote(&self.calls.releases, move || {
            self.inner.release(key, rate, tokens, window)
        })
    }

    fn close_window<'a>(&'a self, key: &'a str, rate: Rate, window: u64) -> StoreFuture<'a, ()> {
        self.remote(&self.calls.other, move || {
            self.inner.close_window(key, rate, window)
        })
    }

    fn peek<'a>(&'a self, key: &'a str, rate: Rate) -> StoreFuture<'a, f64> {
        self.remote(&self.calls.other, move || self.inner.peek(key, rate))
    }

    fn reset<'a>(&'a self, key: &'a str, local: &'a [u8]) -> StoreFuture<'a, ()> {
        self.remote(&self.calls.other, move || self.inner.reset(key, local))
    }

    fn add_denied<'a>(&'a self, slot: u64, counts: &'a [(String, u64)]) -> StoreFuture<'a, ()> {
        // The fleet's denial counts (`sluice top`): not a call on the key.
        self.inner.add_denied(slot, counts)
    }

    fn top_denied<'a>(&'a self, from: u64, to: u64) -> StoreFuture<'a, Vec<(String, u64)>> {
        self.inner.top_denied(from, to)
    }

    fn demand<'a>(
        &'a self,
        key: &'a str,
        client: u64,
        milli_rps: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, Vec<u64>> {
        self.remote(&self.calls.other, move || {
            self.inner.demand(key, client, milli_rps, ttl)
        })
    }

    fn degraded(&self) -> bool {
        self.out()
    }

    fn live_instances(&self) -> u64 {
        self.case.sidecars as u64
    }

    fn decision_timeout(&self) -> Option<Duration> {
        Some(Duration::from_micros(self.case.timeout_us))
    }

    fn housekeeping(&self) {
        self.inner.housekeeping();
    }

    fn name(&self) -> &'static str {
        "simulated"
    }
}
