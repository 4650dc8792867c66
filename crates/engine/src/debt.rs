//! Post-paid usage on its way to the global store.
//!
//! A report is charged to this instance's bucket at once (its own checks see it in the same
//! decision) and left pending for the store. Sending every report would cost one store call per
//! request, so pending usage is sent in batches: at once when it reaches a batch (the rule's
//! `max_lease_fraction` of the burst, as a lease would be), else with the next report once a lease
//! horizon old, or by the periodic flush ([`Debts::flush_queued`], every half horizon).
//! Other instances therefore see a report within about 2.5 lease horizons at worst (up to 1.5 to
//! be sent, one to be read again), and Redis sees at most one charge call per batch of usage or
//! per horizon for each key and instance, whatever the request rate.
//!
//! Nothing is lost on the way: usage pending on a key keeps it from being evicted, a refused call
//! puts it back (and queues it), and shutdown sends everything pending. A call that times out may
//! or may not have charged; it is not sent again (`sluice_usage_tokens_total{outcome="unconfirmed"}`).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use sluice_core::Clock;
use sluice_core::config::Mode;

use crate::bucket::LeaseBucket;
use crate::decision::EngineSettings;
use crate::ledger::LeaseState;
use crate::metrics::{EngineMetrics, StoreOp, UsageOutcome};
use crate::plan::Plan;
use crate::store::{GlobalStore, StoreError, until};

/// A bucket whose pending usage waits for the periodic flush.
#[derive(Debug, Clone)]
struct Queued {
    bucket: LeaseBucket,
    store_key: Arc<str>,
    max_debt: u64,
}

/// The queue of buckets with post-paid usage waiting to be sent with more, and when usage is due.
/// Lock order: a bucket's mutex, then the queue's (never the reverse: the flush takes the whole
/// queue before it locks any bucket).
pub(crate) struct Debts {
    queue: Mutex<Vec<Queued>>,
    /// A batch: usage of at least this fraction of the burst goes at once.
    batch_fraction: f64,
    /// Usage this old (µs) goes at once.
    horizon: u64,
    /// When each charge is sent: its answer is the store as of then. A flush after a decision
    /// that waited on the store is later than the request's time, and a reading stamped with
    /// the request's time had the wait's refill counted again on top of the answer (the
    /// `remaining` of the next check overstated what the key held).
    clock: Arc<dyn Clock>,
}

impl Debts {
    /// An empty queue, batching as leases are sized.
    pub(crate) fn new(settings: &EngineSettings, clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            queue: Mutex::default(),
            batch_fraction: settings.max_lease_fraction,
            horizon: u64::try_from(settings.lease_horizon.as_micros()).unwrap_or(u64::MAX),
        }
    }

    /// After a decision: sends the pending usage of each reported, leased charge of `plan` that
    /// is due (a batch, or a lease horizon old), waiting at most until `deadline`; queues the rest
    /// for the periodic flush.
    pub(crate) async fn flush_after(
        &self,
        store: &dyn GlobalStore,
        metrics: &EngineMetrics,
        plan: &Plan<'_>,
        now: u64,
        deadline: Option<tokio::time::Instant>,
    ) {
        for charge in &plan.charges {
            let Some(max_debt) = charge.info.payment.max_debt() else {
                continue;
            };
            if charge.reported == 0 || charge.info.mode == Mode::Local {
                continue;
            }
            let queued = || Queued {
                bucket: charge.bucket.clone(),
                store_key: Arc::from(charge.store_key()),
                max_debt,
            };
            let due = self.take_due(
                &charge.bucket,
                &mut charge.bucket.lock(),
                &queued,
                now,
                false,
            );
            if let Some(pending) = due {
                self.send(store, metrics, &queued(), pending, now, deadline)
                    .await;
            }
        }
    }

    /// The periodic flush: sends the queued usage that is due (all of it when `all`, at
    /// shutdown) and queues the rest again.
    pub(crate) async fn flush_queued(
        &self,
        store: &dyn GlobalStore,
        metrics: &EngineMetrics,
        now: u64,
        all: bool,
    ) {
        let queued = std::mem::take(&mut *self.queue.lock().unwrap_or_else(|p| p.into_inner()));
        for q in queued {
            let due = {
                let mut state = q.bucket.lock();
                if state.rare().debt_queued {
                    state.rare_mut().debt_queued = false;
                }
                self.take_due(&q.bucket, &mut state, &|| q.clone(), now, all)
            };
            if let Some(pending) = due {
                self.send(store, metrics, &q, pending, now, None).await;
            }
        }
    }

    /// Takes a bucket's pending usage (`state` is its locked state) if it is due, or `all`;
    /// otherwise leaves it there and queues the bucket for the periodic flush.
    fn take_due(
        &self,
        bucket: &LeaseBucket,
        state: &mut LeaseState,
        queued: &dyn Fn() -> Queued,
        now: u64,
        all: bool,
    ) -> Option<u64> {
        if state.rare().debt_pending == 0 {
            return None;
        }
        let rare = state.rare_mut();
        let batch = (bucket.rate.burst as f64 * self.batch_fraction) as u64;
        let due = rare.debt_pending >= batch.max(1)
            || now.saturating_sub(rare.debt_since) >= self.horizon;
        if all || due {
            return Some(std::mem::take(&mut rare.debt_pending));
        }
        self.queue_once(state, queued);
        None
    }

    /// Queues a bucket (`state` is its locked state) for the periodic flush, unless it is queued.
    fn queue_once(&self, state: &mut LeaseState, queued: &dyn Fn() -> Queued) {
        if !state.rare().debt_queued {
            state.rare_mut().debt_queued = true;
            self.queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(queued());
        }
    }

    /// Charges `pending` usage (taken from the bucket by the caller) to the global store.
    async fn send(
        &self,
        store: &dyn GlobalStore,
        metrics: &EngineMetrics,
        q: &Queued,
        pending: u64,
        now: u64,
        deadline: Option<tokio::time::Instant>,
    ) {
        let sent = self.clock.now_micros().max(now);
        let started = Instant::now();
        let result = until(
            deadline,
            store.charge(&q.store_key, q.bucket.rate, pending, q.max_debt),
        )
        .await
        .unwrap_or(Err(StoreError::Timeout));
        metrics.observe_result(StoreOp::Charge, started, &result);
        let mut state = q.bucket.lock();
        match result {
            Ok(grant) => {
                state.read_global(grant.remaining, sent);
                metrics.usage(UsageOutcome::Clamped, pending.saturating_sub(grant.granted));
            }
            // Not charged (refused, or answered with an error): kept, and queued for the flush.
            Err(StoreError::Unavailable(_) | StoreError::Full | StoreError::Protocol(_)) => {
                let rare = state.rare_mut();
                if rare.debt_pending == 0 {
                    rare.debt_since = now;
                }
                rare.debt_pending = rare.debt_pending.saturating_add(pending);
                self.queue_once(&mut state, &|| q.clone());
            }
            // Cut off: it may have been charged. Sent at most once rather than twice.
            Err(StoreError::Timeout) => {
                metrics.usage(UsageOutcome::Unconfirmed, pending);
                tracing::debug!(pending, "post-paid usage may be lost: the store timed out");
            }
        }
    }
}

#[cfg(test)]
mod tests;
