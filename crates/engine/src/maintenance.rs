//! Keeping the engine small and honest over time: lease return, idle eviction, `max_keys`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::bucket::Rate;
use sluice_core::config::Mode;

use crate::bucket::{LeaseBucket, LeaseState};
use crate::engine::Engine;
use crate::key::{self, BucketKey};
use crate::lease::Leaser;
use crate::metrics::StoreOp;

impl Leaser {
    /// Hands tokens back to the global store, counting them.
    pub(crate) async fn return_tokens(&self, returns: Vec<Return>) {
        for r in returns {
            let started = std::time::Instant::now();
            let result = self.store.release(&r.store_key, r.rate, r.tokens).await;
            self.observe(StoreOp::Release, started, &result);
            match result {
                Ok(()) => self.metrics.tokens_returned(r.tokens),
                // Lost tokens only make the limit stricter for a while; never over-admit.
                Err(e) => {
                    tracing::warn!(error = %e, tokens = r.tokens, "could not return leased tokens")
                }
            }
        }
    }
}

/// Tokens to hand back to the global store.
pub(crate) struct Return {
    store_key: String,
    rate: Rate,
    tokens: u64,
}

impl Return {
    /// Takes the bucket's whole lease (the caller holds its lock), if it holds any.
    fn take(key: &BucketKey, bucket: &LeaseBucket, state: &mut LeaseState) -> Option<Self> {
        (state.lease > 0).then(|| Return {
            store_key: key::store_key_of(key),
            rate: bucket.rate,
            tokens: std::mem::take(&mut state.lease),
        })
    }
}

impl Engine {
    /// Runs [`sweep`](Self::sweep) periodically until `shutdown` resolves, then returns every lease.
    pub async fn maintain_until(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        let period = self
            .settings
            .lease_ttl
            .min(self.settings.idle_timeout / 4)
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tick.tick() => self.sweep().await,
            }
        }
        self.return_all_leases().await;
    }

    /// Returns leases unspent for `lease_ttl` and evicts keys idle for `idle_timeout`.
    pub async fn sweep(&self) {
        let now = self.now();
        let idle = self.settings.idle_timeout.as_micros() as u64;
        let ttl = self.settings.lease_ttl.as_micros() as u64;
        let mut returns = Vec::new();
        let mut evicted = 0u64;
        self.buckets.retain(|key, bucket| {
            let is_idle = now.saturating_sub(bucket.last_used()) > idle;
            if bucket.mode != Mode::Local {
                let mut state = bucket.lock();
                if (is_idle || now.saturating_sub(state.leased_at) > ttl)
                    && let Some(r) = Return::take(key, bucket, &mut state)
                {
                    returns.push(r);
                    // The global reading is stale once tokens went back; read it again on use.
                    state.global_known = false;
                }
            }
            evicted += u64::from(is_idle);
            !is_idle
        });
        self.metrics
            .evictions
            .with_label_values(&["idle"])
            .inc_by(evicted);
        self.metrics.tracked_keys.set(self.buckets.len() as i64);
        self.leaser.return_tokens(returns).await;
        self.store().housekeeping();
    }

    /// Returns every lease this instance holds (at shutdown).
    pub async fn return_all_leases(&self) {
        let mut returns = Vec::new();
        for entry in self.buckets.iter() {
            let bucket = entry.value();
            returns.extend(Return::take(entry.key(), bucket, &mut bucket.lock()));
        }
        self.leaser.return_tokens(returns).await;
    }

    /// Keeps the key count under `max_keys`: when full, evicts the least recently used keys until
    /// 90% of the bound remains (one pass to find the cut-off time, one to evict).
    pub(crate) fn make_room(&self, _now: u64) {
        let max = self.settings.max_keys;
        let before = self.buckets.len();
        if before < max {
            return;
        }
        let keep = (max - max / 10).saturating_sub(1);
        let mut used: Vec<u64> = self.buckets.iter().map(|b| b.last_used()).collect();
        let evict = used.len().saturating_sub(keep);
        if evict == 0 {
            return;
        }
        // Keys used before `cutoff` are the `evict` least recently used (ties may evict a few more).
        let (_, cutoff, _) = used.select_nth_unstable(evict - 1);
        let cutoff = *cutoff;
        let mut returns = Vec::new();
        self.buckets.retain(|key, bucket| {
            let keep = bucket.last_used() > cutoff;
            if !keep && bucket.mode != Mode::Local {
                returns.extend(Return::take(key, bucket, &mut bucket.lock()));
            }
            keep
        });
        let evicted = before.saturating_sub(self.buckets.len());
        self.metrics
            .evictions
            .with_label_values(&["capacity"])
            .inc_by(evicted as u64);
        tracing::debug!(
            evicted,
            "max_keys reached; evicted the least recently used keys"
        );
        if !returns.is_empty()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let leaser = Arc::clone(&self.leaser);
            handle.spawn(async move { leaser.return_tokens(returns).await });
        }
    }
}
