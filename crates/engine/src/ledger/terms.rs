//! What one bucket of a request is asked to pay ([`Terms`]) and how the store stood for it
//! ([`StoreStatus`]): the ledger's input, with what follows from it alone (the mode and rate it
//! is decided with, whether it can ever pay).

use sluice_core::bucket::{Algorithm, Rate};
use sluice_core::config::{Fallback, Mode};

use super::{LeaseState, Reading};
use crate::decision::Denial;

/// How the global store stood for a bucket during this decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreStatus {
    /// Answered, or was not needed.
    Up,
    /// Unavailable: the rule's fallback decides, with `instances` sharing the limit.
    Down {
        /// The rule's fallback.
        fallback: Fallback,
        /// Live instances sharing the limit (at least 1).
        instances: u64,
    },
    /// There is no room for this key's state (`engine.max_keys` reached and every tracked key
    /// holds state that evicting would lose): denied, so no limit is ever reset to make room.
    NoRoom,
}

/// What one bucket of a request is asked to pay, and under which rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Terms {
    /// Hits of every descriptor of the request on this bucket that checks before the request,
    /// summed (saturating).
    pub hits: u64,
    /// Whether anything checks this bucket (`false`: it is only reported to).
    pub checked: bool,
    /// A quota (`quota_mode`): its denial blocks the request only if every quota's does.
    pub quota: bool,
    /// A fixed window whose denials count (`count_denied`): denying a request for lack of
    /// tokens closes the window until it ends (its hits push the counter past the limit).
    pub count_denied: bool,
    /// Post-paid usage reported on this bucket: charged in full whatever else happens.
    pub reported: u64,
    /// Post-paid rules: the most debt the bucket may carry.
    pub max_debt: Option<u64>,
    /// How the bucket is shared.
    pub mode: Mode,
    /// The limit.
    pub rate: Rate,
    /// A shadow-mode rule: decided and reported, but never denies the request.
    pub shadow: bool,
    /// The store's state for this bucket.
    pub store: StoreStatus,
}

impl Terms {
    /// The mode and rate the bucket is decided with: its own, or this instance's share of the
    /// limit in a local bucket while the store is down (`fallback: local_share`).
    pub fn effective(&self) -> (Mode, Rate) {
        self.effective_reserving(0)
    }

    /// [`effective`](Self::effective) for a key whose store keeps `reserved` of its rate for
    /// leases of rate now, as its last answer showed (`LeaseState::store_reserved`, thousandths
    /// of a token per period): the fallback shares what the store refills the bucket with,
    /// `L − R`, not `L`. The reservations' stocks fill through an outage and pay their own
    /// sidecars; a share of `L` beside them admitted both (one sidecar's stock at 80% of `L` and
    /// the other's fallback at `L/2`: 0.08 of a token over `B + L·t` in a 0.6 s outage; the
    /// outage property with leases of rate). The share is exact, not rounded to whole tokens a
    /// period: `(L·1000 − R)` thousandths per `1000·n` periods (rounded down to whole tokens
    /// where that many periods do not fit the rate's multiplier); token leases (`R` = 0) keep
    /// `L/n`, at least 1.
    pub fn effective_reserving(&self, reserved: u64) -> (Mode, Rate) {
        match self.store {
            StoreStatus::Down {
                fallback: Fallback::LocalShare,
                instances,
            } => {
                let n = instances.max(1);
                // A concurrency limit's share is slots, never refilled (they come back as
                // requests end).
                let concurrency = self.rate.algorithm == Algorithm::Concurrency;
                let (requests_per_unit, unit_multiplier) = if concurrency {
                    (0, self.rate.unit_multiplier)
                } else {
                    share_of(&self.rate, reserved, n)
                };
                let share = Rate {
                    requests_per_unit,
                    unit: self.rate.unit,
                    unit_multiplier,
                    burst: (self.rate.burst / n).max(1),
                    algorithm: if concurrency {
                        Algorithm::Concurrency
                    } else {
                        Algorithm::TokenBucket
                    },
                };
                (Mode::Local, share)
            }
            _ => (self.mode, self.rate),
        }
    }

    /// Brings the `local_share` fallback's local bucket up to `now` before it decides (nothing
    /// while the store is up):
    ///
    /// - **Its first decision since the key's last reading of the global bucket**, if that
    ///   reading is younger than the time the key's bucket takes to refill its burst, keeps
    ///   at most this instance's share of it (`g/n`; [`Reading::Shared`] after). Its refill
    ///   since the grant was this instance's only if no other sidecar leased it; a starved
    ///   fleet's sidecars each lease all that refilled at their turn, and every fallback banked
    ///   its share of it again: 2 sidecars went 4.6 tokens beyond `B + L·t` and its slack
    ///   within an outage (4.4 with leases of rate; the outage properties, checked as each
    ///   window ends). Cut, the fallbacks start from at most what the store held as
    ///   each last read it, whose error the slack of `ledger::Owed` states already. A key never
    ///   read keeps its bucket (its debt counts from a reading of 0), and so does one read
    ///   longer ago than its burst's refill (the store holds what refilled since, less what
    ///   others took, and the reading says nothing of either): cut to an idle key's reading of
    ///   0 from a minute before, a burst the exact limiter admits was denied whole (a hostile
    ///   review). Windows are not cut: a reading of the window before says nothing of the
    ///   next, and their fallback owes all it spends (`ledger::Owed`).
    /// - **The store's reservations lapsed** (`LeaseState::store_reserved`) since the local
    ///   bucket last refilled: it refills up to their lapse at the share of `L − R` first, then
    ///   at the share of `L`. Refilled at the later share over the whole gap, an idle fallback
    ///   banked what the store never refilled: one sidecar, 80% of `L` reserved, idle for the
    ///   second before the lapse, held 100 tokens where 20 were its (a hostile review).
    pub(super) fn catch_up_fallback(&self, state: &mut LeaseState, now: u64) {
        if !matches!(
            self.store,
            StoreStatus::Down {
                fallback: Fallback::LocalShare,
                ..
            }
        ) {
            return;
        }
        let (reserved, until) = (
            state.rare().store_reserved,
            state.rare().store_reserved_until,
        );
        if reserved > 0 && now >= until && state.local.updated_micros < until {
            let (_, share) = self.effective_reserving(reserved);
            state.local.refill(&share, until);
        }
        if let (Reading::Read, Some(n)) = (state.reading, self.owes_store()) {
            state.reading = Reading::Shared;
            let refills_burst = self.rate.micros_until(0.0, self.rate.burst as f64);
            let age = now.saturating_sub(state.global_read_at);
            if self.rate.algorithm.is_window() || age >= refills_burst.unwrap_or(u64::MAX) {
                return;
            }
            let (_, share) = self.effective_reserving(state.store_reserved(now));
            state.local.refill(&share, now);
            let cap = state.global_remaining.max(0.0) / n as f64;
            state.local.tokens = state.local.tokens.min(cap);
        }
    }

    /// Tokens the bucket must hold for this to pass: the hits, or one for a peek (0 hits asks
    /// whether one more request would pass).
    pub(super) fn need(&self) -> u64 {
        self.hits.max(1)
    }

    /// Why this bucket can never pay, whatever its state: denied before any store call.
    pub fn hopeless(&self) -> Option<Denial> {
        if !self.checked {
            return None;
        }
        if self.need() > self.effective().1.burst {
            Some(Denial::CostAboveBurst)
        } else if self.store == StoreStatus::NoRoom {
            Some(Denial::NoRoom)
        } else {
            None
        }
    }

    /// Whether the bucket pays from a lease of global tokens (and could lease more).
    pub(super) fn leased(&self) -> bool {
        self.store == StoreStatus::Up
            && self.hits > 0
            && matches!(self.mode, Mode::Strict | Mode::Exact)
    }

    /// Whether a leased rule is paid from the fallback's local bucket, and if so by how many
    /// sidecars' shares: what it spends is owed to the global bucket (`owed::Owed`).
    pub(super) fn owes_store(&self) -> Option<u64> {
        // A concurrency limit's fallback slots go back to the local bucket when their requests
        // end; the store is owed nothing.
        if self.mode == Mode::Local || self.rate.algorithm == Algorithm::Concurrency {
            return None;
        }
        match self.store {
            StoreStatus::Down {
                fallback: Fallback::LocalShare,
                instances,
            } => Some(instances.max(1)),
            _ => None,
        }
    }

    /// Charges post-paid usage in full, whether or not the request passed (it already happened):
    /// a local bucket goes into debt at once (down to `max_debt`); a leased rule pays from its
    /// lease first and leaves the rest pending for the global store. Returns the tokens dropped
    /// at the debt bound here (the store may clamp more of what is pending).
    pub(super) fn report(&self, s: &mut LeaseState, mode: Mode, rate: &Rate, now: u64) -> u64 {
        let max_debt = self.max_debt.unwrap_or(0);
        if self.mode == Mode::Local {
            return self.reported - s.local.charge(rate, now, self.reported, max_debt);
        }
        let rest = s.pay_from_lease(self.reported);
        // More than the burst plus the debt bound can never be charged: the store clamps it.
        let cap = self.rate.burst.saturating_add(max_debt);
        let before = s.rare().debt_pending;
        let pending = before.saturating_add(rest).min(cap);
        if pending != before {
            let rare = s.rare_mut();
            if before == 0 {
                rare.debt_since = now;
            }
            rare.debt_pending = pending;
        }
        let clamped = rest - (pending - before);
        if mode == Mode::Local {
            // The store is down: this instance's own checks see the debt meanwhile.
            s.local.charge(rate, now, rest, max_debt);
        }
        clamped
    }

    /// Whether the store-down fallback decides without looking at any bucket.
    pub(crate) fn forced(&self) -> bool {
        matches!(
            self.store,
            StoreStatus::Down {
                fallback: Fallback::Allow | Fallback::Deny,
                ..
            }
        )
    }

    /// Whether `state` can pay now, and if not, why.
    pub(super) fn pays(&self, state: &LeaseState, now: u64) -> Result<(), Denial> {
        if !self.checked {
            return Ok(());
        }
        if let Some(why) = self.hopeless() {
            return Err(why);
        }
        match self.store {
            StoreStatus::Down {
                fallback: Fallback::Allow,
                ..
            } => Ok(()),
            StoreStatus::Down {
                fallback: Fallback::Deny,
                ..
            } => Err(Denial::StoreDown),
            _ => {
                let (mode, rate) = self.effective_reserving(state.store_reserved(now));
                let have = if self.hits == 0 {
                    // A peek counts the global bucket too, as far as this instance knows it.
                    state.remaining(mode, &rate, now).floor().max(0.0) as u64
                } else if self.owes_store().is_some() {
                    // Leased tokens were charged to the global bucket already: spent first.
                    state
                        .spendable(mode, &rate, now)
                        .saturating_add(state.lease)
                } else {
                    state.spendable(mode, &rate, now)
                };
                if have >= self.need() {
                    Ok(())
                } else {
                    Err(Denial::Empty)
                }
            }
        }
    }
}

/// One of `n` sidecars' share of what the store refills `rate`'s bucket with while `reserved`
/// thousandths of a token per period are reserved: `(requests_per_unit, unit_multiplier)`.
fn share_of(rate: &Rate, reserved: u64, n: u64) -> (u64, u32) {
    let multiplier = rate.unit_multiplier.max(1);
    if reserved == 0 {
        return ((rate.requests_per_unit / n).max(1), multiplier);
    }
    let milli = rate
        .requests_per_unit
        .saturating_mul(sluice_core::reserve::PER_MILLE)
        .saturating_sub(reserved);
    let periods = u32::try_from(sluice_core::reserve::PER_MILLE.saturating_mul(n))
        .ok()
        .and_then(|p| multiplier.checked_mul(p));
    match periods {
        Some(periods) => (milli, periods),
        None => (milli / sluice_core::reserve::PER_MILLE / n, multiplier),
    }
}
