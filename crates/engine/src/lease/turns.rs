//! Turns: how a starved key's sidecars share a remote store's calls. The store keeps the key's
//! queue ([`crate::store::next_turn`]); the policy says when a sidecar asks for a turn, how long
//! it may wait for one, and how much it asks for when its turn comes ([`Policy::by_demand`],
//! docs/architecture.md, "Fleet scale"); here is the call.

use super::Leaser;
use super::policy::{Policy, Turn};
use crate::plan::Charge;
use crate::store::StoreError;

impl Leaser {
    /// Leases for `charge` by demand: at its turn, or after it had to deny.
    pub(super) async fn lease_by_demand(
        &self,
        policy: &Policy<'_>,
        charge: &Charge<'_>,
        turn: Turn,
        now: u64,
    ) -> Option<StoreError> {
        let bucket = &charge.bucket;
        let ask = policy.by_demand(&bucket.rate, &turn);
        let failed = self
            .lease(policy, bucket, charge.store_key(), ask, charge.hits, now)
            .await;
        Policy::after_demand(&mut bucket.lock(), &turn, failed.is_none());
        failed
    }

    /// How long a starved key's lease is kept: the sweep's bound for it
    /// ([`Policy::starved_lease_ttl`]).
    pub(crate) fn starved_lease_ttl(&self) -> u64 {
        self.policy().starved_lease_ttl()
    }
}
