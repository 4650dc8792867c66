//! A bucket as the embedded store holds it: its state, its rate, its rule, and the leases of
//! rate on it (refilled at `L − R` first, as `bucket.lua` refills one).

use sluice_core::bucket::{BucketState, Rate};
use sluice_core::reserve::Reservations;

/// A bucket as the store holds it.
#[derive(Debug)]
pub(super) struct Stored {
    /// The rate it was last used with.
    pub(super) rate: Rate,
    pub(super) state: BucketState,
    /// The identity of the rule it belongs to (from its store key; 0 for keys of another form).
    pub(super) holder: u64,
    /// Leases of rate on it (`sluice_core::reserve`), boxed: most buckets have none.
    pub(super) reserved: Option<Box<Reservations>>,
}

impl Stored {
    /// Brings the bucket up to `now` where reservations change its refill (a bucket without
    /// any refills in the caller's own step, as before).
    pub(super) fn advance(&mut self, now: u64) {
        if let Some(r) = self.reserved.as_deref_mut() {
            r.advance(&mut self.state, &self.rate, now);
            if r.is_empty() {
                self.reserved = None;
            }
        }
    }

    /// Tokens available at `now`, without changing the bucket.
    pub(super) fn available_at(&self, now: u64) -> f64 {
        match self.reserved.as_deref() {
            Some(r) => {
                let (mut r, mut state) = (r.clone(), self.state);
                r.advance(&mut state, &self.rate, now);
                state.available_at(&self.rate, now)
            }
            None => self.state.available_at(&self.rate, now),
        }
    }
}
