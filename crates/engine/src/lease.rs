//! Getting tokens from the global store: one lease call per key at a time, sized to demand, with
//! a background refill before a busy key's lease runs dry.

use std::sync::Arc;
use std::time::Instant;

use sluice_core::config::Mode;
use sluice_core::{Descriptor, Entry};

use crate::bucket::LeaseBucket;
use crate::engine::{EngineSettings, Plan};
use crate::key;
use crate::metrics::{EngineMetrics, StoreOp, StoreOutcome};
use crate::store::{GlobalStore, StoreError};

/// How many single-flight locks the keys share (a power of two).
const FLIGHTS: usize = 4096;

/// The engine's side of the global store.
pub(crate) struct Leaser {
    pub(crate) store: Arc<dyn GlobalStore>,
    pub(crate) metrics: EngineMetrics,
    pub(crate) settings: EngineSettings,
    /// Single flight: a store call for a key holds its key's lock, so concurrent requests on an
    /// empty lease wait for that call instead of each calling the store. Keys share a fixed set
    /// of locks (by bucket address) instead of owning one each: a lock per key cost ~70 bytes of
    /// every tracked key. Two keys on one lock only queue their store calls (≤ the store
    /// timeout); each still checks its own lease after the wait.
    flights: Box<[Arc<tokio::sync::Mutex<()>>]>,
}

impl Leaser {
    /// A leaser over `store`.
    pub(crate) fn new(
        store: Arc<dyn GlobalStore>,
        metrics: EngineMetrics,
        settings: EngineSettings,
    ) -> Self {
        Self {
            store,
            metrics,
            settings,
            flights: (0..FLIGHTS).map(|_| Arc::default()).collect(),
        }
    }

    /// The single-flight lock of `bucket`.
    fn flight(&self, bucket: &Arc<LeaseBucket>) -> &Arc<tokio::sync::Mutex<()>> {
        // Fibonacci hashing of the allocation address: stable for the bucket's life.
        let h = (Arc::as_ptr(bucket) as usize as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        &self.flights[(h >> (64 - FLIGHTS.trailing_zeros())) as usize]
    }

    /// Asks the store for tokens where a lease cannot cover this request's hits (strict, exact),
    /// and reads the global bucket for peeks on keys never read. Marks plans whose store failed.
    pub(crate) async fn ensure(&self, plans: &mut [Plan], descriptors: &[Descriptor], now: u64) {
        for i in 0..plans.len() {
            if plans[i].info.mode == Mode::Local
                || plans[..i]
                    .iter()
                    .any(|p| Arc::ptr_eq(&p.bucket, &plans[i].bucket))
            {
                continue;
            }
            // Hits of every plan on this same bucket (a request may repeat a descriptor).
            let bucket = Arc::clone(&plans[i].bucket);
            let needed: u64 = plans
                .iter()
                .filter(|p| Arc::ptr_eq(&p.bucket, &bucket))
                .map(|p| p.hits)
                .sum();
            if self.covered(&bucket, plans[i].info.mode, needed, now) {
                continue;
            }
            // Single flight: one store call per key at a time; the others wait for its result
            // (bounded by the store's timeout) and then spend from the lease it brought.
            let _flight = self.flight(&bucket).lock().await;
            if self.covered(&bucket, plans[i].info.mode, needed, now) {
                continue;
            }
            let store_key = key::store_key(bucket.identity, &descriptors[plans[i].index].entries);
            let down = if needed == 0 {
                self.peek(&bucket, &store_key).await
            } else {
                let (missing, demand) = {
                    let state = bucket.lock();
                    (needed.saturating_sub(state.lease), state.demand_per_sec)
                };
                let want = self.lease_size(plans[i].info.mode, bucket.rate.burst, missing, demand);
                self.lease(&bucket, &store_key, want, needed, now).await
            };
            if down {
                for p in plans.iter_mut().filter(|p| Arc::ptr_eq(&p.bucket, &bucket)) {
                    p.store_down = true;
                }
            }
        }
    }

    /// Whether no store call is needed: the lease covers `needed`, a starved key waits for
    /// refill, or a peek already knows the global level.
    fn covered(&self, bucket: &LeaseBucket, mode: Mode, needed: u64, now: u64) -> bool {
        let state = bucket.lock();
        if needed == 0 {
            state.global_known
        } else {
            state.lease >= needed || (mode == Mode::Strict && now < state.retry_at)
        }
    }

    /// How many tokens to ask for: about `lease_horizon` of demand, at least `missing`, at most
    /// `max_lease_fraction` of the burst (unless `missing` itself is more). Exact mode asks for
    /// exactly what is missing.
    fn lease_size(&self, mode: Mode, burst: u64, missing: u64, demand_per_sec: f64) -> u64 {
        if mode == Mode::Exact {
            return missing;
        }
        let cap = ((burst as f64 * self.settings.max_lease_fraction).ceil() as u64).max(missing);
        let horizon = (demand_per_sec * self.settings.lease_horizon.as_secs_f64()).ceil() as u64;
        horizon.clamp(missing, cap)
    }

    /// Leases `want` tokens for `bucket`; returns whether the store was unavailable.
    async fn lease(
        &self,
        bucket: &LeaseBucket,
        store_key: &str,
        want: u64,
        needed: u64,
        now: u64,
    ) -> bool {
        let started = Instant::now();
        let result = self.store.lease(store_key, bucket.rate, want).await;
        self.observe(StoreOp::Lease, started, &result);
        match result {
            Ok(grant) => {
                self.metrics.tokens_granted(grant.granted);
                let mut state = bucket.lock();
                state.add_grant(grant.granted, grant.remaining, want, now);
                if grant.granted < want {
                    // Starved: global demand is above the limit (we got less than we asked for).
                    // Spend what came, then deny locally while tokens refill in the global bucket
                    // (up to the burst, so nothing is lost) instead of asking on every request:
                    // a remote store is asked again after one lease horizon, or later if the
                    // tokens this request needs take longer to refill (at most `lease_ttl`); the
                    // in-process store as soon as they are due.
                    let missing = needed.saturating_sub(state.lease).max(1);
                    let until = bucket
                        .rate
                        .micros_until(grant.remaining, missing as f64)
                        .unwrap_or(u64::MAX);
                    let horizon = self.settings.lease_horizon.as_micros() as u64;
                    // Never longer than `lease_ttl`, so a reset or a returned lease is seen soon.
                    let ttl = self.settings.lease_ttl.as_micros() as u64;
                    let wait = if self.store.is_in_process() {
                        until.max(1)
                    } else {
                        until.max(horizon).min(ttl.max(horizon))
                    };
                    state.retry_at = now.saturating_add(wait);
                }
                false
            }
            Err(e) => {
                tracing::debug!(store = self.store.name(), error = %e, "lease failed; the rule's fallback applies");
                true
            }
        }
    }

    /// Reads the global bucket for a peek; returns whether the store was unavailable.
    async fn peek(&self, bucket: &LeaseBucket, store_key: &str) -> bool {
        let started = Instant::now();
        let result = self.store.peek(store_key, bucket.rate).await;
        self.observe(StoreOp::Peek, started, &result);
        match result {
            Ok(tokens) => {
                let mut state = bucket.lock();
                state.global_remaining = tokens;
                state.global_known = true;
                false
            }
            Err(_) => true,
        }
    }

    /// Refills a busy key's lease in the background before it runs dry (skipped if a call for
    /// this key is already in flight, the store is degraded, or there is no runtime).
    pub(crate) fn prefetch(
        self: &Arc<Self>,
        bucket: Arc<LeaseBucket>,
        entries: &[Entry],
        now: u64,
    ) {
        if self.store.degraded() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Ok(flight) = Arc::clone(self.flight(&bucket)).try_lock_owned() else {
            return;
        };
        // Made only once a refill will really run (the key's store call is not already in flight).
        let store_key = key::store_key(bucket.identity, entries);
        let leaser = Arc::clone(self);
        handle.spawn(async move {
            let _flight = flight;
            let (want, low) = {
                let state = bucket.lock();
                let want =
                    leaser.lease_size(Mode::Strict, bucket.rate.burst, 1, state.demand_per_sec);
                (want, state.lease_is_low())
            };
            if low {
                leaser.lease(&bucket, &store_key, want, 0, now).await;
            }
        });
    }

    /// Counts a store call by operation and outcome, with its latency.
    pub(crate) fn observe<T>(&self, op: StoreOp, started: Instant, result: &Result<T, StoreError>) {
        let outcome = match result {
            Ok(_) => StoreOutcome::Ok,
            Err(StoreError::Timeout) => StoreOutcome::Timeout,
            Err(StoreError::Unavailable(_)) => StoreOutcome::Unavailable,
            Err(StoreError::Protocol(_)) => StoreOutcome::Error,
        };
        self.metrics
            .observe_store_call(op, outcome, started.elapsed().as_secs_f64());
    }
}
