//! Where an RLQS bucket's tokens come from: the rule's global bucket, and those of the
//! descriptor's further limits (`rate_limits`), leased and handed back together.

use std::sync::Arc;

use sluice_core::bucket::Rate;
use sluice_core::config::Fallback;
use sluice_engine::{GlobalStore, StoreError};

/// Where a bucket's tokens come from.
#[derive(Clone)]
pub struct Source {
    /// The store holding the rule's bucket (the global store, or this sidecar's own for `local`).
    pub store: Arc<dyn GlobalStore>,
    /// The store key (the same one RLS and ext_authz charge).
    pub key: String,
    /// The rule's rate.
    pub rate: Rate,
    /// What to do while the store is down.
    pub fallback: Fallback,
    /// The descriptor's further limits (`rate_limits`): every token leased for the bucket is
    /// leased from each of them too (the least any grants is kept, the rest handed back), so
    /// what Envoy is assigned never exceeds any limit. Shares are sized by the first limit.
    pub further: Vec<Further>,
}

/// A further limit of an RLQS bucket's descriptor.
#[derive(Clone)]
pub struct Further {
    /// The store holding it.
    pub store: Arc<dyn GlobalStore>,
    /// Its store key.
    pub key: String,
    /// Its rate.
    pub rate: Rate,
}

impl Source {
    /// Hands `tokens` back to every limit (the bucket could not use them).
    pub async fn release(&self, tokens: u64) {
        if tokens == 0 {
            return;
        }
        if let Err(e) = self.store.release(&self.key, self.rate, tokens, 0).await {
            tracing::debug!(key = %self.key, error = %e, "RLQS tokens not returned");
        }
        for f in &self.further {
            if let Err(e) = f.store.release(&f.key, f.rate, tokens, 0).await {
                tracing::debug!(key = %f.key, error = %e, "RLQS tokens not returned");
            }
        }
    }

    /// Leases up to `want` tokens from every limit; keeps the least any of them granted and
    /// hands the rest back. `Err` (nothing kept) if a store is unavailable.
    pub(super) async fn lease(&self, want: u64) -> Result<u64, StoreError> {
        let first = self.store.lease(&self.key, self.rate, want).await?.granted;
        let mut grants = Vec::with_capacity(self.further.len());
        let mut failed = None;
        for f in &self.further {
            match f.store.lease(&f.key, f.rate, first).await {
                Ok(grant) => grants.push(grant.granted),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let kept = if failed.is_some() {
            0
        } else {
            grants.iter().copied().fold(first, u64::min)
        };
        if first > kept
            && let Err(e) = self
                .store
                .release(&self.key, self.rate, first - kept, 0)
                .await
        {
            tracing::debug!(key = %self.key, error = %e, "RLQS tokens not returned");
        }
        for (f, granted) in self.further.iter().zip(grants) {
            if granted > kept
                && let Err(e) = f.store.release(&f.key, f.rate, granted - kept, 0).await
            {
                tracing::debug!(key = %f.key, error = %e, "RLQS tokens not returned");
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(kept),
        }
    }
}
