//! Holds: the slots of a concurrency limit (`rate_limit.concurrency`), or the tokens of a
//! reservation (`reserve:` on a post-paid rule), a request took when it started, kept on its
//! key's state until it ends.
//!
//! A concurrency limit is a bucket of `N` slots that never refills
//! ([`Algorithm::Concurrency`]); a request takes a slot through the same plan, lease and ledger
//! as any token (so it is all or nothing with the request's other limits), and the engine
//! records a [`HoldRecord`] under the bucket's lock. Giving the hold back (its release, or the
//! hold timeout) puts the slots back where they came from:
//! - **the lease** (strict mode, store up), if the lease they came from is still this
//!   instance's: a lease that lapsed (no store call for a hold timeout: `LeaseState::expire`)
//!   was freed by the store, so its holds give back nothing (`Rare::hold_epoch`);
//! - **the local bucket** (`mode: local`, or the `local_share` fallback while the store is
//!   down);
//! - **nowhere**: a request passed by the `allow` fallback took nothing.
//!
//! Records are bounded: at most `N` slots per key are held (the bucket has no more), and the
//! engine refuses a hold beyond `engine.max_holds` ([`HoldCount`]).
//!
//! [`Algorithm::Concurrency`]: sluice_core::bucket::Algorithm::Concurrency
//!

use std::sync::atomic::{AtomicU64, Ordering};

use sluice_core::bucket::{Algorithm, Rate};

use crate::ledger::LeaseState;
pub use crate::ledger::held::{HeldFrom, HoldRecord};

/// Records a hold on `state` (its lock held).
pub(crate) fn record(state: &mut LeaseState, hold: HoldRecord) {
    state.rare_mut().holds.push(hold);
}

/// Gives back the hold `token` on `state`, if it holds one; returns what it paid (its slots, or
/// the tokens a reservation covers). A concurrency limit's slots all go back; a reservation
/// gives back what `used` left of it (the caller charges usage beyond what it covered).
pub(crate) fn release(
    state: &mut LeaseState,
    rate: &Rate,
    token: u64,
    used: u64,
    now: u64,
) -> Option<u64> {
    if token == 0 {
        return None;
    }
    let holds = &mut state.rare_mut().holds;
    let at = holds.iter().position(|h| h.token == token)?;
    let mut hold = holds.swap_remove(at);
    // What the reservation paid, and so covers of the usage: nothing under the `allow`
    // fallback, which took nothing.
    let covered = if hold.source == HeldFrom::Nothing {
        0
    } else {
        hold.slots
    };
    if rate.algorithm != Algorithm::Concurrency {
        hold.slots -= used.min(hold.slots);
    }
    give_back(state, rate, &hold, now);
    Some(covered)
}

/// Gives back every hold on `state` that lapsed by `now`; returns how many. A concurrency
/// limit's slots come back; a reservation never settled stays charged (its usage is unknown:
/// the estimate is what it paid).
pub(crate) fn expire(state: &mut LeaseState, rate: &Rate, now: u64) -> u64 {
    let lapsed = |h: &HoldRecord| now >= h.until;
    if !state.rare().holds.iter().any(lapsed) {
        return 0;
    }
    let mut expired = Vec::new();
    state.rare_mut().holds.retain(|h| {
        let keep = !lapsed(h);
        if !keep {
            expired.push(*h);
        }
        keep
    });
    if rate.algorithm == Algorithm::Concurrency {
        for hold in &expired {
            give_back(state, rate, hold, now);
        }
    }
    expired.len() as u64
}

/// Slots this instance holds on `state` in requests in flight, counted in the store (from a
/// lease still this instance's).
pub(crate) fn leased_slots(state: &LeaseState) -> u64 {
    let epoch = state.rare().hold_epoch;
    state
        .rare()
        .holds
        .iter()
        .filter(|h| h.source == HeldFrom::Lease(epoch))
        .map(|h| h.slots)
        .fold(0, u64::saturating_add)
}

/// Compares what the store counts as this instance's slots (`held`, from a lease answer) with
/// what it believes it holds (its lease and the holds of requests in flight taken from it);
/// returns the slots to give back. More in the store: a grant whose answer was lost (a timeout)
/// left them there, and they would stay this instance's for as long as it keeps calling. Fewer:
/// the store let some lapse (this instance did not renew in time, or Redis's clock jumped):
/// the lease keeps only what the store still holds for it, and holds of the old lease give
/// nothing back (`hold_epoch`). Skipped while a return is on its way (the store still counts
/// it).
pub(crate) fn reconcile(state: &mut LeaseState, held: u64) -> u64 {
    if state.rare().returning > 0 {
        return 0;
    }
    let believed = state.lease.saturating_add(leased_slots(state));
    if held >= believed {
        return held - believed;
    }
    let rare = state.rare_mut();
    rare.hold_epoch = rare.hold_epoch.wrapping_add(1);
    state.lease = state.lease.min(held);
    held - state.lease
}

fn give_back(state: &mut LeaseState, rate: &Rate, hold: &HoldRecord, now: u64) {
    match hold.source {
        HeldFrom::Lease(epoch) if epoch == state.rare().hold_epoch => {
            state.lease = state.lease.saturating_add(hold.slots);
        }
        HeldFrom::Lease(_) | HeldFrom::Nothing => {}
        HeldFrom::Local => {
            state.local.refill(rate, now);
            state.local.tokens = (state.local.tokens + hold.slots as f64).min(rate.burst as f64);
        }
    }
}

/// Holds in memory across keys, bounded by `engine.max_holds`.
#[derive(Debug)]
pub(crate) struct HoldCount {
    held: AtomicU64,
    max: u64,
}

impl HoldCount {
    pub(crate) fn new(max: u64) -> Self {
        Self {
            held: AtomicU64::new(0),
            max,
        }
    }

    /// Whether a new hold fits.
    pub(crate) fn has_room(&self) -> bool {
        self.held.load(Ordering::Relaxed) < self.max
    }

    pub(crate) fn add(&self, n: u64) {
        self.held.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn remove(&self, n: u64) {
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                Some(h.saturating_sub(n))
            });
    }

    /// Sets the count to what a sweep found.
    pub(crate) fn set(&self, n: u64) {
        self.held.store(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}
