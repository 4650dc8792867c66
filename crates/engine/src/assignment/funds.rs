//! Where an RLQS share's tokens come from: the rule's bucket and those of the descriptor's
//! further limits (`rate_limits`), leased and handed back together, all through the
//! [`Engine`] (see `engine/shares.rs`).

use std::sync::Arc;

use sluice_core::config::Fallback;

use crate::engine::{Engine, Payee};
use crate::store::StoreError;

/// Where a share's tokens come from.
#[derive(Clone)]
pub struct Funds {
    /// The engine every payment goes through.
    pub engine: Arc<Engine>,
    /// The rule's bucket: shares are sized by its rate.
    pub payee: Payee,
    /// What to do while the store is down.
    pub fallback: Fallback,
    /// The descriptor's further limits (`rate_limits`): every token leased for the share is
    /// leased from each of them too (the least any grants is kept, the rest handed back), so
    /// what Envoy is assigned never exceeds any limit.
    pub further: Vec<Payee>,
}

impl std::fmt::Debug for Funds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Funds")
            .field("payee", &self.payee)
            .field("further", &self.further)
            .finish_non_exhaustive()
    }
}

impl Funds {
    /// Hands `tokens` back to every limit (the share could not use them).
    pub async fn release(&self, tokens: u64) {
        if tokens == 0 {
            return;
        }
        self.engine.release_share(&self.payee, tokens).await;
        for f in &self.further {
            self.engine.release_share(f, tokens).await;
        }
    }

    /// Leases up to `want` tokens from every limit; keeps the least any of them granted and
    /// hands the rest back. `Err` (nothing kept) if a store is unavailable or has no room.
    pub(super) async fn lease(&self, want: u64) -> Result<Leased, StoreError> {
        let first = self.engine.lease_share(&self.payee, want).await?;
        let mut left = first.remaining;
        let mut grants = Vec::with_capacity(self.further.len());
        let mut failed = None;
        for f in &self.further {
            match self.engine.lease_share(f, first.granted).await {
                Ok(grant) => {
                    left = left.min(grant.remaining);
                    grants.push(grant.granted);
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let kept = if failed.is_some() {
            0
        } else {
            grants.iter().copied().fold(first.granted, u64::min)
        };
        self.engine
            .release_share(&self.payee, first.granted.saturating_sub(kept))
            .await;
        for (f, granted) in self.further.iter().zip(grants) {
            self.engine
                .release_share(f, granted.saturating_sub(kept))
                .await;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(Leased { kept, left }),
        }
    }
}

/// What a lease for a share brought.
pub(super) struct Leased {
    /// Tokens kept (the least any limit granted).
    pub kept: u64,
    /// The least any limit had left after it.
    pub left: f64,
}
