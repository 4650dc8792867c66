//! Leases of rate on the engine's side (issue 42, `engine.rate_lease_ttl`): every lease call of
//! a strict token-bucket key also asks the store to reserve part of the key's rate, sized by
//! the demand this instance measured, and the answer starts the key's stock filling
//! ([`RateLease`](crate::ledger::rate_lease::RateLease)); what it asks for is
//! [`Policy::reserve`](super::Policy::reserve). The store's side is [`sluice_core::reserve`].

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Leaser, Policy};
use crate::bucket::LeaseBucket;
use crate::store::{LeaseAsk, ReserveAsk, StoreError};
use crate::table::Return;

/// Engines of one process are told apart as holders by a number each (a Redis store replaces
/// it with its instance's own, unique across processes).
static HOLDERS: AtomicU64 = AtomicU64::new(1);

/// A new engine's number as a holder of reservations.
pub(super) fn next_holder() -> u64 {
    HOLDERS.fetch_add(1, Ordering::Relaxed)
}

impl Leaser {
    /// The reservation to ask for with a lease call of `bucket` sent at `now`
    /// ([`Policy::reserve`](super::Policy::reserve)).
    pub(super) fn reserve_ask(
        &self,
        policy: &Policy<'_>,
        bucket: &LeaseBucket,
        now: u64,
    ) -> Option<ReserveAsk> {
        // Off (the default): not even the key's lock.
        self.settings.rate_lease_ttl?;
        policy.reserve(&mut bucket.lock(), &bucket.rate, self.holder, now)
    }

    /// Ends this instance's reservation of `r`'s key and gives its tokens back, in one call.
    pub(super) async fn end_reservation(&self, r: &Return) -> Result<(), StoreError> {
        let ask = LeaseAsk {
            reserve: Some(ReserveAsk {
                holder: self.holder,
                per_mille: 0,
                ttl_micros: 0,
                give_back_milli: r.tokens.saturating_mul(1_000),
            }),
            ..LeaseAsk::exactly(0)
        };
        self.store
            .lease_asking(&r.store_key, r.rate, ask)
            .await
            .map(|_| ())
    }
}
