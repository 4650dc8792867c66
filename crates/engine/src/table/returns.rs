//! What the table hands the leaser after a sweep or an eviction: leases to return (and
//! concurrency keys' renewals), and what the sweep saw of holds.

use sluice_core::bucket::{Algorithm, Rate};

use crate::bucket::LeaseBucket;
use crate::key;
use crate::ledger::LeaseState;

/// Tokens to hand back to the global store.
#[derive(Debug)]
pub(crate) struct Return {
    /// The global bucket.
    pub(crate) store_key: String,
    /// Its limit.
    pub(crate) rate: Rate,
    /// How many.
    pub(crate) tokens: u64,
    /// The window they were leased from (windows only; the store drops them if it is over).
    pub(crate) window: u64,
    /// Concurrency limits: the bucket, whose lease lives a hold timeout longer once the store
    /// has the call (every call moves this instance's lapse on). Also a return of 0 slots:
    /// a renewal of slots held by requests in flight.
    pub(crate) renews: Option<LeaseBucket>,
    /// When it was made (engine clock): a renewal counts from then.
    pub(crate) at: u64,
    /// A lease of rate ends with it: the store is told in the same call (the tokens go back
    /// with it), so a pod that leaves or a key that went idle frees its share of `L` at once
    /// instead of at the reservation's expiry.
    pub(crate) ends_reservation: bool,
}

impl Return {
    /// Takes the bucket's whole lease (the caller holds its lock), if it holds any that has
    /// not lapsed with its window.
    pub(super) fn take(bucket: &LeaseBucket, state: &mut LeaseState, now: u64) -> Option<Self> {
        state.expire(now);
        state.fill(&bucket.rate, now);
        if let Some(back) = state.end_rate_lease() {
            let tokens = std::mem::take(&mut state.lease).saturating_add(back);
            return Some(Return {
                ends_reservation: true,
                ..Self::of(bucket, state, tokens, now)
            });
        }
        (state.lease > 0).then(|| {
            let tokens = std::mem::take(&mut state.lease);
            if bucket.rate.algorithm == Algorithm::Concurrency {
                // Until the store has it, its count of this instance's slots includes these:
                // a lease answer meanwhile must not read them as a lost grant.
                state.rare_mut().returning += 1;
            }
            Self::of(bucket, state, tokens, now)
        })
    }

    pub(super) fn of(bucket: &LeaseBucket, state: &LeaseState, tokens: u64, now: u64) -> Self {
        let concurrency = bucket.rate.algorithm == Algorithm::Concurrency;
        Return {
            store_key: key::store_key_of(bucket.identity, bucket.key()),
            rate: bucket.rate,
            tokens,
            window: state.rare().lease_window,
            renews: concurrency.then(|| bucket.clone()),
            at: now,
            ends_reservation: false,
        }
    }

    /// A concurrency key's renewal, if it is due: slots of requests in flight that came from
    /// the lease are still counted in the store, and the lease lapses a hold timeout after the
    /// last store call; renewed once half of that has passed (at least 2.5 s before it).
    pub(super) fn renewal(bucket: &LeaseBucket, state: &LeaseState, now: u64) -> Option<Self> {
        let until = state.rare().lease_until;
        // Half the timeout before its lapse, and never less than 2.5 s (two sweeps and a store
        // call) before it.
        let ahead = (bucket.rate.period_micros() / 2).max(2_500_000);
        let due = until != u64::MAX && now < until && until - now < ahead;
        (due && crate::holds::leased_slots(state) > 0).then(|| Self::of(bucket, state, 0, now))
    }
}

/// What a sweep found: tokens to hand back (and renewals), holds that lapsed, and the holds in
/// flight, by the identity of the rule (or override) they are on.
#[derive(Debug, Default)]
pub(crate) struct Swept {
    pub(crate) returns: Vec<Return>,
    pub(crate) expired: std::collections::HashMap<u64, u64>,
    pub(crate) in_flight: std::collections::HashMap<u64, u64>,
    pub(crate) holds: u64,
}
