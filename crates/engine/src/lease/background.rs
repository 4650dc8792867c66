//! The leaser's background work: refills ahead of demand, window closes and lease returns, each
//! task owned by [`Leaser::tasks`] so shutdown can wait for them.

use std::sync::Arc;
use std::time::Instant;

use sluice_core::bucket::Algorithm;

use super::{Leaser, RETURNS_AT_ONCE};
use crate::bucket::LeaseBucket;
use crate::metrics::StoreOp;
use crate::plan::Charge;
use crate::table::Return;

impl Leaser {
    /// Refills a busy key's lease in the background before it runs dry (skipped at shutdown, if
    /// a call for this key is already in flight, the store is degraded, or there is no runtime).
    pub(crate) fn refill_ahead(self: &Arc<Self>, charge: &Charge<'_>, now: u64) {
        let bucket = &charge.bucket;
        let Some(handle) = self.background_handle() else {
            return;
        };
        let Ok(flight) = Arc::clone(self.flight(bucket)).try_lock_owned() else {
            return;
        };
        // Made only once a refill will really run (the key's store call is not already in flight).
        let store_key: Arc<str> = Arc::from(charge.store_key());
        let bucket = bucket.clone();
        let leaser = Arc::clone(self);
        self.tasks.spawn_on(
            async move {
                let _flight = flight;
                let policy = leaser.policy();
                let ask = policy.refill(&bucket.lock(), &bucket.rate, now);
                if let Some(ask) = ask {
                    leaser
                        .lease(&policy, &bucket, &store_key, ask, 0, now)
                        .await;
                }
            },
            &handle,
        );
    }

    /// Where background store work may start: `None` at shutdown, while the store is degraded
    /// (the call would fail), or outside a runtime.
    fn background_handle(&self) -> Option<tokio::runtime::Handle> {
        if self.store.degraded() || self.stopping.is_cancelled() {
            return None;
        }
        tokio::runtime::Handle::try_current().ok()
    }

    /// Closes window `window` of a fixed window in the global store in the background, so every
    /// sidecar's next lease in it gets nothing (the store ignores it once that window is over:
    /// a late call never closes the next one). At most one call per sidecar and window
    /// (`LeaseState::closed_window`).
    pub(crate) fn close_window_later(
        self: &Arc<Self>,
        bucket: &LeaseBucket,
        store_key: &str,
        window: u64,
    ) {
        let Some(handle) = self.background_handle() else {
            return;
        };
        let store_key: Arc<str> = Arc::from(store_key);
        let rate = bucket.rate;
        let leaser = Arc::clone(self);
        self.tasks.spawn_on(
            async move {
                let started = Instant::now();
                let result = leaser.store.close_window(&store_key, rate, window).await;
                leaser.observe(StoreOp::Close, started, &result);
            },
            &handle,
        );
    }

    /// Hands tokens back to the global store in the background (evictions while deciding).
    pub(crate) fn return_later(self: &Arc<Self>, returns: Vec<Return>) {
        if returns.is_empty() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let leaser = Arc::clone(self);
        self.tasks
            .spawn_on(async move { leaser.return_tokens(returns).await }, &handle);
    }

    /// Hands tokens back to the global store, counting them. Up to [`RETURNS_AT_ONCE`] calls
    /// are in flight together, so a store that batches sends them in few round trips.
    pub(crate) async fn return_tokens(&self, returns: Vec<Return>) {
        use futures_util::StreamExt as _;
        futures_util::stream::iter(returns)
            .for_each_concurrent(RETURNS_AT_ONCE, |r| async move {
                let started = Instant::now();
                let concurrency = r.rate.algorithm == Algorithm::Concurrency;
                let result = if r.ends_reservation {
                    self.end_reservation(&r).await
                } else if concurrency {
                    self.store
                        .release_slots(&r.store_key, r.rate, r.tokens)
                        .await
                } else {
                    self.store
                        .release(&r.store_key, r.rate, r.tokens, r.window)
                        .await
                };
                self.observe(StoreOp::Release, started, &result);
                if let Some(bucket) = &r.renews {
                    let mut state = bucket.lock();
                    if r.tokens > 0 {
                        let returning = &mut state.rare_mut().returning;
                        *returning = returning.saturating_sub(1);
                    }
                    if result.is_ok() {
                        renewed(&mut state, bucket.rate.period_micros(), r.at);
                    }
                }
                match result {
                    Ok(()) => self.metrics.tokens_returned(r.tokens),
                    // Lost tokens only make the limit stricter for a while; never over-admit.
                    // Every return fails while the store is down: one line a second.
                    Err(e) => {
                        if let Some(unlogged) = self.return_failures.sample(r.at) {
                            tracing::warn!(
                                error = %e,
                                tokens = r.tokens,
                                unlogged_since_last_line = unlogged,
                                "could not return leased tokens (sampled: at most one line a second)"
                            );
                        }
                    }
                }
            })
            .await;
    }

    /// Stops background work: no new refill starts, and the ones in flight finish (each bounded
    /// by the store timeout).
    pub(crate) async fn stop_background(&self) {
        self.stopping.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// A concurrency key's store call, sent at `sent` (engine clock), was answered: the store moved
/// this instance's lapse a hold timeout on from when it ran, so the lease (if it has not lapsed
/// already: then the store may have freed its slots) lives until a hold timeout after `sent`.
fn renewed(state: &mut crate::ledger::LeaseState, period: u64, sent: u64) {
    let until = state.rare().lease_until;
    if until != u64::MAX && sent < until {
        let renewed = sent.saturating_add(period);
        state.rare_mut().lease_until = until.max(renewed);
    }
}
