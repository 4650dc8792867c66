//! One key's local state: a lease of global tokens (strict, exact) or a whole bucket (local).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_core::bucket::{BucketState, Rate};
use sluice_core::config::{Fallback, Mode};

/// The local state of one bucket key.
///
/// A std `Mutex` guards the state: it is held for a few arithmetic steps and never across an
/// `.await`, so contention is short and no async mutex is needed.
#[derive(Debug)]
pub struct LeaseBucket {
    /// The limit this key enforces.
    pub rate: Rate,
    /// How it is shared across instances.
    pub mode: Mode,
    /// What to do while the global store is down.
    pub fallback: Fallback,
    /// The identity of the rule (its fingerprint) or override the key belongs to.
    pub identity: u64,
    /// Last decision time, read by eviction without taking the lock.
    last_used: AtomicU64,
    state: Mutex<LeaseState>,
}

/// The mutable part of a [`LeaseBucket`].
#[derive(Debug, Clone)]
pub struct LeaseState {
    /// Local mode (and the store-down fallback): a whole bucket in this process.
    pub local: BucketState,
    /// Strict/exact: leased tokens not yet spent.
    pub lease: u64,
    /// Global tokens left after our last store call (for reporting `limit_remaining`).
    pub global_remaining: f64,
    /// Whether `global_remaining` has been read at least once.
    pub global_known: bool,
    /// A starved key asks the store again only from this time on.
    pub retry_at: u64,
    /// When the last lease was granted (lease_ttl return, demand estimate).
    pub leased_at: u64,
    /// Tokens spent since the last lease was granted.
    pub spent_since_lease: u64,
    /// Smoothed demand, tokens per second.
    pub demand_per_sec: f64,
    /// The size of the last lease asked for (the low watermark is half of it).
    pub last_want: u64,
}

impl LeaseBucket {
    /// A new key's bucket: empty lease, full local bucket.
    pub fn new(rate: Rate, mode: Mode, fallback: Fallback, identity: u64, now: u64) -> Self {
        Self {
            rate,
            mode,
            fallback,
            identity,
            last_used: AtomicU64::new(now),
            state: Mutex::new(LeaseState {
                local: BucketState::full(&rate, now),
                lease: 0,
                global_remaining: rate.burst as f64,
                global_known: false,
                retry_at: 0,
                leased_at: now,
                spent_since_lease: 0,
                demand_per_sec: 0.0,
                last_want: 0,
            }),
        }
    }

    /// Locks the state. A poisoned lock (a panic while held) still holds consistent numbers,
    /// since every update is a few plain assignments, so it is used as is.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, LeaseState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a use at `now`.
    pub fn touch(&self, now: u64) {
        self.last_used.store(now, Ordering::Relaxed);
    }

    /// The last use.
    pub fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }
}

impl LeaseState {
    /// Tokens this instance can spend now without asking the store.
    pub fn spendable(&self, mode: Mode, rate: &Rate, now: u64) -> u64 {
        match mode {
            Mode::Local => {
                let mut b = self.local;
                b.refill(rate, now);
                b.tokens.floor().max(0.0) as u64
            }
            Mode::Strict | Mode::Exact => self.lease,
        }
    }

    /// Spends `n` tokens (the caller checked [`spendable`](Self::spendable)).
    pub fn spend(&mut self, mode: Mode, rate: &Rate, now: u64, n: u64) {
        match mode {
            Mode::Local => {
                let took = self.local.try_take(rate, now, n);
                debug_assert!(took, "spend without spendable tokens");
            }
            Mode::Strict | Mode::Exact => {
                self.lease -= n;
                self.spent_since_lease += n;
            }
        }
    }

    /// Tokens left as this instance knows them: its lease plus the global bucket's last reading,
    /// or the local bucket.
    pub fn remaining(&self, mode: Mode, rate: &Rate, now: u64) -> f64 {
        match mode {
            Mode::Local => {
                let mut b = self.local;
                b.refill(rate, now);
                b.tokens
            }
            Mode::Strict | Mode::Exact => self.lease as f64 + self.global_remaining,
        }
    }

    /// Whether a busy lease is down to half of what was last asked for: time to refill ahead.
    pub fn lease_is_low(&self) -> bool {
        self.last_want > 1 && self.lease <= self.last_want / 2
    }

    /// Adds a grant of a `want`-token request to the lease and updates the demand estimate.
    pub fn add_grant(&mut self, granted: u64, remaining: f64, want: u64, now: u64) {
        // At least 1 µs: many decisions within one microsecond mean very high demand, not none.
        let elapsed = now.saturating_sub(self.leased_at).max(1);
        {
            let rate = self.spent_since_lease as f64 * 1e6 / elapsed as f64;
            self.demand_per_sec = if self.demand_per_sec == 0.0 {
                rate
            } else {
                0.5 * self.demand_per_sec + 0.5 * rate
            };
        }
        self.lease += granted;
        self.last_want = want;
        self.global_remaining = remaining;
        self.global_known = true;
        self.leased_at = now;
        self.spent_since_lease = 0;
    }
}
