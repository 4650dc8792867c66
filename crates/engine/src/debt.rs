//! Post-paid usage on its way to the global store.
//!
//! A report is charged to this instance's bucket at once (its own checks see it in the same
//! decision) and left pending for the store. Sending every report would cost one store call per
//! request, so pending usage is sent in batches: at once when it reaches a batch (the rule's
//! `max_lease_fraction` of the burst, as a lease would be), else with the next report once a lease
//! horizon old, or by the periodic flush ([`Leaser::flush_queued_debts`], every half horizon).
//! Other instances therefore see a report within about 2.5 lease horizons at worst (up to 1.5 to
//! be sent, one to be read again), and Redis sees at most one charge call per batch of usage or
//! per horizon for each key and instance, whatever the request rate.
//!
//! Nothing is lost on the way: usage pending on a key keeps it from being evicted, a refused call
//! puts it back (and queues it), and shutdown sends everything pending. A call that times out may
//! or may not have charged; it is not sent again (`sluice_usage_tokens_total{outcome="unconfirmed"}`).

use std::sync::Arc;
use std::time::Instant;

use sluice_core::Descriptor;
use sluice_core::config::Mode;

use crate::bucket::LeaseBucket;
use crate::key;
use crate::lease::{Leaser, until};
use crate::metrics::{StoreOp, UsageOutcome};
use crate::plan::Plan;
use crate::store::StoreError;

/// A bucket whose pending usage waits for the periodic flush.
#[derive(Debug)]
pub(crate) struct Queued {
    bucket: Arc<LeaseBucket>,
    store_key: String,
    max_debt: u64,
}

impl Leaser {
    /// After a decision: sends the pending usage of each reported, leased charge of `plan` that
    /// is due (a batch, or a lease horizon old), waiting at most until `deadline`; queues the rest
    /// for the periodic flush.
    pub(crate) async fn flush_debts(
        &self,
        plan: &Plan,
        descriptors: &[Descriptor],
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
            let bucket = &charge.bucket;
            let store_key =
                || key::store_key(bucket.identity, &descriptors[charge.descriptor].entries);
            let pending = {
                let mut state = bucket.lock();
                if state.debt_pending == 0 {
                    continue;
                }
                if !self.debt_due(bucket, state.debt_pending, state.debt_since, now) {
                    if !state.debt_queued {
                        state.debt_queued = true;
                        drop(state);
                        self.queue(Arc::clone(bucket), store_key(), max_debt);
                    }
                    continue;
                }
                std::mem::take(&mut state.debt_pending)
            };
            let queued = Queued {
                bucket: Arc::clone(bucket),
                store_key: store_key(),
                max_debt,
            };
            self.send_debt(&queued, pending, now, deadline).await;
        }
    }

    /// The periodic flush: sends the queued usage that is due (all of it when `all`, at
    /// shutdown) and queues the rest again.
    pub(crate) async fn flush_queued_debts(&self, now: u64, all: bool) {
        let queued = std::mem::take(&mut *self.debts.lock().unwrap_or_else(|p| p.into_inner()));
        for q in queued {
            let pending = {
                let mut state = q.bucket.lock();
                state.debt_queued = false;
                if state.debt_pending == 0 {
                    continue;
                }
                if !all && !self.debt_due(&q.bucket, state.debt_pending, state.debt_since, now) {
                    state.debt_queued = true;
                    drop(state);
                    self.queue(q.bucket, q.store_key, q.max_debt);
                    continue;
                }
                std::mem::take(&mut state.debt_pending)
            };
            self.send_debt(&q, pending, now, None).await;
        }
    }

    /// Whether `pending` usage, pending since `since`, should be sent now.
    fn debt_due(&self, bucket: &LeaseBucket, pending: u64, since: u64, now: u64) -> bool {
        let batch = (bucket.rate.burst as f64 * self.settings.max_lease_fraction) as u64;
        let horizon = u64::try_from(self.settings.lease_horizon.as_micros()).unwrap_or(u64::MAX);
        pending >= batch.max(1) || now.saturating_sub(since) >= horizon
    }

    fn queue(&self, bucket: Arc<LeaseBucket>, store_key: String, max_debt: u64) {
        self.debts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Queued {
                bucket,
                store_key,
                max_debt,
            });
    }

    /// Charges `pending` usage (taken from the bucket by the caller) to the global store.
    async fn send_debt(
        &self,
        q: &Queued,
        pending: u64,
        now: u64,
        deadline: Option<tokio::time::Instant>,
    ) {
        let started = Instant::now();
        let result = until(
            deadline,
            self.store
                .charge(&q.store_key, q.bucket.rate, pending, q.max_debt),
        )
        .await
        .unwrap_or(Err(StoreError::Timeout));
        self.observe(StoreOp::Charge, started, &result);
        let mut state = q.bucket.lock();
        match result {
            Ok(grant) => {
                state.read_global(grant.remaining, now);
                self.metrics
                    .usage(UsageOutcome::Clamped, pending.saturating_sub(grant.granted));
            }
            // Not charged (refused, or answered with an error): kept, and queued for the flush.
            Err(StoreError::Unavailable(_) | StoreError::Full | StoreError::Protocol(_)) => {
                if state.debt_pending == 0 {
                    state.debt_since = now;
                }
                state.debt_pending = state.debt_pending.saturating_add(pending);
                if !state.debt_queued {
                    state.debt_queued = true;
                    drop(state);
                    self.queue(Arc::clone(&q.bucket), q.store_key.clone(), q.max_debt);
                }
            }
            // Cut off: it may have been charged. Sent at most once rather than twice.
            Err(StoreError::Timeout) => {
                self.metrics.usage(UsageOutcome::Unconfirmed, pending);
                tracing::debug!(pending, "post-paid usage may be lost: the store timed out");
            }
        }
    }
}
