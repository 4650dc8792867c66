//! Leases of rate on the engine's side (issue 42, `engine.rate_lease_ttl`): every lease call of
//! a strict token-bucket key also asks the store to reserve part of the key's rate, sized by
//! the demand this instance measured, and the answer starts the key's stock filling
//! ([`RateLease`]). The store's side is [`sluice_core::reserve`].

use std::sync::atomic::{AtomicU64, Ordering};

use sluice_core::bucket::Algorithm;
use sluice_core::config::Mode;

use super::{Leaser, micros};
use crate::bucket::LeaseBucket;
use crate::ledger::rate_lease::RateLease;
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
    /// The reservation to ask for with a lease call of `bucket` sent at `now` (`None`: leases of
    /// rate are off, the store is in process, or the key is not a strict token bucket). Its
    /// stock stops filling at `now`: the store ends the old reservation when the call arrives.
    pub(super) fn reserve_ask(&self, bucket: &LeaseBucket, now: u64) -> Option<ReserveAsk> {
        let ttl = self.settings.rate_lease_ttl?;
        if self.store.is_in_process() || bucket.rate.algorithm != Algorithm::TokenBucket {
            return None;
        }
        let mut state = bucket.lock();
        if state.mode != Mode::Strict {
            return None;
        }
        state.fill(&bucket.rate, now);
        let seen = state.seen_since_lease();
        // What was seen since the last lease was seen over the time since it (from the start,
        // if none): counted from the first ask, a starved sidecar of a thousand, with 20 hits
        // seen while it waited for its turn, asked for 20 a second.
        let since = state.leased_at.min(now);
        let lease = state
            .rare_mut()
            .rate_lease
            .get_or_insert_with(|| RateLease::starting(since));
        let give_back = lease.sending(seen, now);
        Some(ReserveAsk {
            holder: self.holder,
            per_mille: lease.ask(&bucket.rate),
            ttl_micros: self.rate_lease_ttl(ttl),
            give_back,
        })
    }

    /// How long a reservation lasts: `engine.rate_lease_ttl`, or longer in a large fleet, so its
    /// renewals cost a key about `starved_calls_per_sec` calls a second in all.
    fn rate_lease_ttl(&self, ttl: std::time::Duration) -> u64 {
        let per_sec = u64::from(self.settings.starved_calls_per_sec.max(1));
        let fleet = self.store.live_instances().saturating_mul(1_000_000) / per_sec;
        micros(ttl)
            .max(fleet)
            .min(sluice_core::reserve::MAX_TTL_MICROS)
    }

    /// Ends this instance's reservation of `r`'s key and gives its tokens back, in one call.
    pub(super) async fn end_reservation(&self, r: &Return) -> Result<(), StoreError> {
        let ask = LeaseAsk {
            reserve: Some(ReserveAsk {
                holder: self.holder,
                per_mille: 0,
                ttl_micros: 0,
                give_back: r.tokens,
            }),
            ..LeaseAsk::exactly(0)
        };
        self.store
            .lease_asking(&r.store_key, r.rate, ask)
            .await
            .map(|_| ())
    }
}
