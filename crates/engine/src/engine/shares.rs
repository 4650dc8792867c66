//! The engine's door for RLQS: every token an RLQS share is paid with, every token it gives
//! back and every demand it shares goes through here, so RLQS is bound by what binds RLS and
//! ext_authz — the same global buckets, the same key table and room (`engine.max_keys`), the same
//! local buckets for `mode: local`, the same store deadline, and `sluice_store_calls_total`.

use std::sync::Arc;
use std::time::Instant;

use sluice_core::Entry;
use sluice_core::bucket::Rate;
use sluice_core::config::{Fallback, Mode};
use sluice_core::rules::Payment;

use crate::Engine;
use crate::decision::LimitInfo;
use crate::key::{self, Values};
use crate::metrics::StoreOp;
use crate::plan::Slot;
use crate::store::{LeaseGrant, StoreError, until};

/// The longest an RLQS share's store call may take. Not a decision's timeout (`redis.timeout`,
/// tens of milliseconds, for a request waiting on it): a share's calls are off every request's
/// path, made once a tick per bucket, and a stream acts on its buckets one after another, so a
/// call must end well within the tick (1 s). Cutting them at a decision's timeout under load
/// dropped shares that a slower answer would have paid.
const SHARE_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// A bucket an RLQS share pays from: a rule's global bucket, or, for `mode: local`, this
/// sidecar's local bucket of the rule (the one RLS and ext_authz decide on).
#[derive(Debug, Clone)]
pub struct Payee {
    /// The rule's identity (fingerprint).
    pub identity: u64,
    /// The entries the bucket is keyed by, long values already digested (as keys hold them,
    /// so a payee holds at most ~100 bytes per value whatever Envoy sent).
    pub entries: Arc<[Entry]>,
    /// The global bucket's store key (made once, here).
    pub store_key: String,
    /// The rule's rate.
    pub rate: Rate,
    /// How the rule is shared.
    pub mode: Mode,
}

impl Payee {
    /// The payee of the rule `identity` with `rate` and `mode`, keyed by `entries` (in the
    /// rule's order).
    pub fn new(identity: u64, entries: &[Entry], rate: Rate, mode: Mode) -> Self {
        let entries: Arc<[Entry]> = entries
            .iter()
            .map(|e| Entry::new(e.key.as_str(), key::key_value(&e.value)))
            .collect();
        Self {
            identity,
            store_key: key::store_key(identity, Values::Keyed(&entries)),
            entries,
            rate,
            mode,
        }
    }

    fn info(&self) -> LimitInfo {
        LimitInfo {
            rate: self.rate,
            rule: None,
            mode: self.mode,
            fallback: Fallback::Deny,
            shadow: false,
            quota: false,
            count_denied: false,
            payment: Payment::Prepaid,
        }
    }
}

impl Engine {
    /// Takes up to `want` tokens from `payee` for an RLQS share: from its global bucket (a
    /// counted store call, bounded by the store's decision timeout), or from this sidecar's
    /// local bucket. [`StoreError::Full`] when the key finds no room (counted as refused). The
    /// grant says what is left in the bucket, so shares take more than they need only from
    /// what others leave.
    pub async fn lease_share(&self, payee: &Payee, want: u64) -> Result<LeaseGrant, StoreError> {
        let now = self.now();
        if payee.mode == Mode::Local {
            let bucket = self.local_bucket(payee, now)?;
            let mut state = bucket.lock();
            let granted = state.local.take_up_to(&payee.rate, now, want);
            return Ok(LeaseGrant {
                granted,
                remaining: state.local.available_at(&payee.rate, now),
                window: 0,
                ends_in: None,
                turn_in: None,
                reserved: None,
                reserved_all: 0,
                reserved_ends_in: 0,
            });
        }
        let leaser = &self.leaser;
        let call = leaser.store.lease(&payee.store_key, payee.rate, want);
        let result = self.share_call(StoreOp::Lease, call).await;
        match result {
            Ok(grant) => {
                leaser.metrics.tokens_granted(grant.granted);
                Ok(grant)
            }
            Err(StoreError::Full) => {
                leaser.metrics.key_refused("store", now);
                Err(StoreError::Full)
            }
            Err(e) => Err(e),
        }
    }

    /// Gives `tokens` an RLQS share could not use back to `payee` (lost, never over-given, if
    /// the store fails: stricter for a while).
    pub async fn release_share(&self, payee: &Payee, tokens: u64) {
        if tokens == 0 {
            return;
        }
        let now = self.now();
        if payee.mode == Mode::Local {
            if let Some(bucket) = self
                .table
                .get(payee.identity, Values::Keyed(&payee.entries))
            {
                bucket.lock().local.give_back(&payee.rate, now, tokens, 0);
            }
            return;
        }
        let leaser = &self.leaser;
        let call = leaser
            .store
            .release(&payee.store_key, payee.rate, tokens, 0);
        let result = self.share_call(StoreOp::Release, call).await;
        match result {
            Ok(()) => leaser.metrics.tokens_returned(tokens),
            Err(e) => {
                tracing::debug!(key = %payee.store_key, error = %e, tokens, "RLQS tokens not returned")
            }
        }
    }

    /// Records RLQS `client`'s demand on `payee`'s bucket and reads every client's (see
    /// [`GlobalStore::demand`](crate::GlobalStore::demand)); a counted store call.
    pub async fn share_demand(
        &self,
        payee: &Payee,
        client: u64,
        milli_rps: u64,
        ttl: std::time::Duration,
    ) -> Result<Vec<u64>, StoreError> {
        let call = self
            .leaser
            .store
            .demand(&payee.store_key, client, milli_rps, ttl);
        self.share_call(StoreOp::Demand, call).await
    }

    /// A share's store call: cut at [`SHARE_CALL_TIMEOUT`], counted with its latency.
    async fn share_call<T>(
        &self,
        op: StoreOp,
        call: crate::store::StoreFuture<'_, T>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + SHARE_CALL_TIMEOUT;
        let result = until(Some(deadline), call)
            .await
            .unwrap_or(Err(StoreError::Timeout));
        self.leaser.metrics.observe_result(op, started, &result);
        result
    }

    /// `payee`'s local bucket in the key table, tracked from now on.
    fn local_bucket(
        &self,
        payee: &Payee,
        now: u64,
    ) -> Result<crate::bucket::LeaseBucket, StoreError> {
        let mut evicted = Vec::new();
        let slot = self.table.slot(
            payee.identity,
            payee.identity,
            Values::Keyed(&payee.entries),
            &payee.info(),
            now,
            &mut evicted,
        );
        self.leaser.return_later(evicted);
        match slot {
            Slot::Tracked(bucket) => Ok(bucket),
            Slot::NoRoom(_) => Err(StoreError::Full),
        }
    }
}
