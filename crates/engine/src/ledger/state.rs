//! One bucket key's mutable state in this process: its lease, the last reading of the global
//! bucket, the fallback's local bucket, and post-paid usage on its way to the store.

use sluice_core::bucket::{BucketState, Rate};
use sluice_core::config::Mode;

use super::owed::Owed;

/// What a key's state knows of the global bucket's level (`LeaseState::global_remaining`).
/// One byte: the state has no other spare (docs/architecture.md, *Memory per tracked key*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Never read, or stale (tokens went back since).
    Unknown,
    /// Read at `global_read_at`.
    Read,
    /// Read, and since then the `local_share` fallback cut its local bucket to this
    /// instance's share of it (`Terms::catch_up_fallback`: once per reading).
    Shared,
}

/// The mutable state of one bucket key in this process.
#[derive(Debug, Clone)]
pub struct LeaseState {
    /// Local mode (and the store-down fallback): a whole bucket in this process.
    pub local: BucketState,
    /// Strict/exact: leased tokens not yet spent.
    pub lease: u64,
    /// Global tokens left after our last store call (for reporting `limit_remaining`).
    pub global_remaining: f64,
    /// Whether `global_remaining` was read (and is not stale), and whether the fallback has
    /// started from it since ([`Reading`]; [`global_known`](Self::global_known)).
    pub reading: Reading,
    /// Whether the lease is a cold lease: the store still held at least half the burst after
    /// it was granted. The sweep keeps such a lease for `cold_lease_ttl`, others for
    /// `lease_ttl`. Decided by the store's answer, not by `far_from_limit`'s estimate, which
    /// refills an old reading as if nobody else spent: with that estimate every lease of a
    /// contended key looked cold after half a burst's refill time and sat unspent for 30 s.
    pub cold_lease: bool,
    /// When `global_remaining` was read: estimates refill it from then on.
    pub global_read_at: u64,
    /// Whether the last lease came up short and the store gave this instance a turn
    /// ([`retry_at`](Self::retry_at)): the key is starved fleet-wide. Until the turn its lease
    /// is kept whatever its age (the sweep returns it no sooner), and at the turn it asks for
    /// the demand it saw meanwhile (`spent_since_lease + denied_since_lease`).
    pub queued: bool,
    /// When the last lease was granted (lease_ttl return, demand estimate).
    pub leased_at: u64,
    /// Tokens spent since the last lease was granted.
    pub spent_since_lease: u64,
    /// Hits denied for want of tokens since the last lease was granted (saturating): with
    /// `spent_since_lease`, the demand a starved key saw while it waited for its turn.
    pub denied_since_lease: u32,
    /// Smoothed demand, tokens per second (an estimate: `f32` keeps every key 4 bytes smaller;
    /// see [`decayed_demand`](super::demand::decayed_demand)).
    pub demand_per_sec: f32,
    /// The lease after the last grant, at most what that call asked for, up to `u32::MAX`: the
    /// low watermark is half of it ([`lease_is_low`](Self::lease_is_low)).
    pub last_lease: u32,
    /// The key's sharing mode, as its rule gave it when the key was created. Kept here, not
    /// beside the key's rate, because it fills this struct's one spare byte (beside the rate it
    /// cost 8: docs/architecture.md "Memory per tracked key"). The ledger's steps take the mode
    /// of the request's terms instead; this one serves eviction and listings.
    pub mode: Mode,
    /// State few keys need (windows, post-paid usage, what a fallback owes), boxed so the
    /// others do not carry it: `None` means every field at its default ([`Rare::default`]).
    /// Visible to the ledger's modules so a step can borrow it beside `lease` without
    /// allocating it (`rate_lease.rs`); everything else goes through [`rare`](Self::rare) and
    /// [`rare_mut`](Self::rare_mut).
    pub(super) rare: Option<Box<Rare>>,
}

/// The part of a key's state most keys never use.
#[derive(Debug, Clone, PartialEq)]
pub struct Rare {
    /// Windows: the window the lease was taken from (a release names it).
    pub lease_window: u64,
    /// Fixed windows counting denials: the last window this instance closed, plus one (0:
    /// none), so a window is closed (and the store told) once, not at every denial in it.
    pub closed_window: u64,
    /// Windows: when the lease lapses (this clock's time for the store's end of that window,
    /// measured from when the lease call was sent, so never later than the true end);
    /// `u64::MAX` for a token bucket, whose leased tokens never lapse.
    pub lease_until: u64,
    /// What the `local_share` fallback owes the global bucket for what it spent on a leased
    /// rule while the store was down ([`Owed`]: the part of it the global bucket's own refill
    /// during the outage does not already stand for): charged before the next lease.
    pub owed: Owed,
    /// Post-paid usage charged here but not yet sent to the global store (`crate::debt` sends
    /// it in batches; a failed call leaves it for the next).
    pub debt_pending: u64,
    /// When `debt_pending` last went from 0 to more: it is sent within a lease horizon of this.
    pub debt_since: u64,
    /// Whether the bucket is in the periodic flush's queue.
    pub debt_queued: bool,
    /// This bucket's last denial (`quota get` shows it). Here, not in every key's state: only
    /// keys that were denied pay for it.
    pub last_denial: Option<crate::decision::LastDenial>,
    /// Concurrency limits: the holds of requests in flight on this key ([`crate::holds`]).
    pub holds: Vec<super::held::HoldRecord>,
    /// Concurrency limits: which lease holds taken from the lease came from. It moves on when
    /// the lease lapses (the store freed this instance's slots), so holds of the lapsed lease
    /// give nothing back to the new one.
    pub hold_epoch: u32,
    /// Concurrency limits: returns of leased slots on their way to the store (its count of
    /// this instance's slots includes them until they land).
    pub returning: u32,
    /// A starved key asks the store again only from this time on: a lease horizon on, or its
    /// turn in the key's queue of starved callers where the store gave one (`queued`). Never
    /// more than `max(lease_ttl, 2·live instances / starved_calls_per_sec)` ahead, so a key
    /// can always lease again.
    ///
    /// Only keys that came up short set it (they are denied, so they box `Rare` anyway for
    /// their `last_denial`): in the state of every key it cost 8 bytes more per key.
    pub retry_at: u64,
    /// A caller whose turn is one behind the head of a starved key's queue asks once from this
    /// time on, before its turn (0: no such call; [`LeaseState::early_call_due`]).
    pub early_at: u64,
    /// Hits of the requests waiting for another request's store call on this key (exact mode,
    /// or strict while the bucket shows slack: `lease::waiting::counts`). The call in flight's
    /// successor asks for them all at once, so concurrent requests of one key share a round
    /// trip instead of queueing for one each.
    pub waiting: u64,
    /// Leases of rate (`EngineSettings::rate_lease_ttl`): this key's reservation and its stock.
    pub rate_lease: Option<super::rate_lease::RateLease>,
    /// Every reservation the store kept on this key's bucket at its last lease answer (`R`,
    /// thousandths of a token per period; `LeaseGrant::reserved_all`), any sidecar's: the store
    /// refills the bucket at `L − R`, which the `local_share` fallback shares
    /// (`Terms::effective_reserving`) and is charged against ([`LeaseState::owe`]), until
    /// [`store_reserved_until`](Self::store_reserved_until).
    pub store_reserved: u64,
    /// When every reservation of [`store_reserved`](Self::store_reserved) has lapsed at the
    /// latest (µs, this instance's clock: the answer's arrival plus `reserved_ends_in`, later
    /// than the store's own end, so `R` is counted a little long: stricter).
    pub store_reserved_until: u64,
}

/// Every [`Rare`] field at its default.
const NO_RARE: Rare = Rare {
    lease_window: 0,
    closed_window: 0,
    lease_until: u64::MAX,
    owed: Owed::NOTHING,
    debt_pending: 0,
    debt_since: 0,
    debt_queued: false,
    last_denial: None,
    holds: Vec::new(),
    hold_epoch: 0,
    returning: 0,
    waiting: 0,
    retry_at: 0,
    early_at: 0,
    rate_lease: None,
    store_reserved: 0,
    store_reserved_until: 0,
};

/// [`NO_RARE`] in one place, to lend (a `const` with a `Vec` is not promoted to a static).
static DEFAULT_RARE: Rare = NO_RARE;

impl Default for Rare {
    fn default() -> Self {
        NO_RARE
    }
}

impl LeaseState {
    /// The rarely used part of the state (defaults when never set).
    pub fn rare(&self) -> &Rare {
        self.rare.as_deref().unwrap_or(&DEFAULT_RARE)
    }

    /// When a starved key may ask the store again ([`Rare::retry_at`]; 0: at any time).
    pub fn retry_at(&self) -> u64 {
        self.rare().retry_at
    }

    /// Sets [`Rare::retry_at`], boxing the rare part only for a time other than its default.
    pub fn set_retry_at(&mut self, at: u64) {
        if at != self.retry_at() {
            self.rare_mut().retry_at = at;
        }
    }

    /// Whether a caller waiting for its turn may ask before it, now (once, from
    /// [`Rare::early_at`]): the turn ahead of it may go unused (`lease/grant.rs`).
    pub fn early_call_due(&self, now: u64) -> bool {
        let rare = self.rare();
        rare.early_at != 0 && rare.early_at <= now && now < rare.retry_at
    }

    /// Sets [`Rare::early_at`] (`None`: none), boxing the rare part only for a time.
    pub fn set_early_at(&mut self, at: Option<u64>) {
        let at = at.unwrap_or(0);
        if at != self.rare().early_at {
            self.rare_mut().early_at = at;
        }
    }

    /// The rarely used part of the state, to change (boxed on first use).
    pub fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Whether `global_remaining` has been read at least once (and is not stale).
    pub fn global_known(&self) -> bool {
        self.reading != Reading::Unknown
    }

    /// Whether this key boxed its rare part (most keys never do: docs/architecture.md, *Memory
    /// per tracked key*).
    pub fn rare_boxed(&self) -> bool {
        self.rare.is_some()
    }

    /// A new key's state: no lease, a full local bucket.
    pub fn new(mode: Mode, rate: &Rate, now: u64) -> Self {
        Self {
            mode,
            local: BucketState::full(rate, now),
            lease: 0,
            global_remaining: rate.burst as f64,
            reading: Reading::Unknown,
            cold_lease: false,
            global_read_at: now,
            queued: false,
            leased_at: now,
            spent_since_lease: 0,
            denied_since_lease: 0,
            demand_per_sec: 0.0,
            last_lease: 0,
            rare: None,
        }
    }

    /// Drops a window's lease once its window is over: its tokens belong to a window that has
    /// ended, and spending them in the next one would admit more than `L` there. Called before
    /// any read of the lease.
    pub fn expire(&mut self, now: u64) {
        if now >= self.rare().lease_until {
            self.lease = 0;
            let rare = self.rare_mut();
            rare.lease_until = u64::MAX;
            // A concurrency lease lapses with every slot this instance held in the store.
            rare.hold_epoch = rare.hold_epoch.wrapping_add(1);
        }
    }

    /// Tokens this instance can spend now without asking the store.
    pub fn spendable(&self, mode: Mode, rate: &Rate, now: u64) -> u64 {
        match mode {
            Mode::Local => self.local.available_at(rate, now).floor().max(0.0) as u64,
            Mode::Strict | Mode::Exact => self.live_lease(now),
        }
    }

    /// The lease, unless it lapsed with its window.
    fn live_lease(&self, now: u64) -> u64 {
        if now < self.rare().lease_until {
            self.lease
        } else {
            0
        }
    }

    /// Spends `n` tokens the caller checked with [`spendable`](Self::spendable).
    pub(super) fn spend(&mut self, mode: Mode, rate: &Rate, now: u64, n: u64) {
        match mode {
            Mode::Local => {
                let took = self.local.try_take(rate, now, n);
                debug_assert!(took, "spend without spendable tokens");
            }
            Mode::Strict | Mode::Exact => {
                self.lease -= n;
                self.spent_since_lease = self.spent_since_lease.saturating_add(n);
            }
        }
    }

    /// Tokens left as this instance knows them: its lease plus the global bucket's last reading,
    /// or the local bucket.
    pub fn remaining(&self, mode: Mode, rate: &Rate, now: u64) -> f64 {
        match mode {
            Mode::Local => self.local.available_at(rate, now),
            Mode::Strict | Mode::Exact => {
                self.live_lease(now) as f64 + self.global_estimate(rate, now)
                    - self.rare().debt_pending as f64
            }
        }
    }

    /// The global bucket as this instance last read it, refilled since (others' spending since
    /// is unknown here, so this is an upper bound).
    fn global_estimate(&self, rate: &Rate, now: u64) -> f64 {
        if !rate.algorithm.is_window() {
            rate.refill(
                self.global_remaining,
                now.saturating_sub(self.global_read_at),
            )
        } else if rate.window(now) == rate.window(self.global_read_at) {
            self.global_remaining
        } else {
            // A window began since the reading: as far as this instance knows, full.
            rate.burst as f64
        }
    }

    /// Whether the global bucket showed slack ([`sluice_core::reserve::slack`]: three quarters
    /// of its burst or more) at the last reading, not refilled since; or no reading is kept
    /// (never read here, or read before this instance gave its tokens back).
    pub fn showed_slack(&self, rate: &Rate) -> bool {
        !self.global_known() || sluice_core::reserve::slack(rate, self.global_remaining)
    }

    /// Whether the key looks far from its limit: never read here, or the global bucket held at
    /// least half its burst at the last reading (refilled since). Such a key's lease is a
    /// *cold lease*: sized without measured demand (`Policy::fleet_share`, `lease/policy.rs`) and kept for
    /// `cold_lease_ttl` instead of `lease_ttl`.
    pub fn far_from_limit(&self, rate: &Rate, now: u64) -> bool {
        !self.global_known() || self.global_estimate(rate, now) >= rate.burst as f64 / 2.0
    }

    /// The demand seen since the last lease: hits spent and hits denied for want of tokens.
    pub fn seen_since_lease(&self) -> u64 {
        self.spent_since_lease
            .saturating_add(u64::from(self.denied_since_lease))
    }

    /// Counts `hits` denied for want of tokens (the demand a starved key sees while it waits).
    pub(super) fn denied(&mut self, hits: u64) {
        let hits = u32::try_from(hits).unwrap_or(u32::MAX);
        self.denied_since_lease = self.denied_since_lease.saturating_add(hits);
    }

    /// Pays what it can of `n` tokens from the lease (already charged to the global bucket) and
    /// returns the rest.
    pub(super) fn pay_from_lease(&mut self, n: u64) -> u64 {
        let from_lease = n.min(self.lease);
        self.lease -= from_lease;
        n - from_lease
    }

    /// Records a reading of the global bucket taken at `now`, unless a later one is held (calls
    /// answered out of order keep what the store said last).
    pub fn read_global(&mut self, remaining: f64, now: u64) {
        if self.global_known() && now < self.global_read_at {
            return;
        }
        self.global_remaining = remaining;
        self.reading = Reading::Read;
        self.global_read_at = now;
    }

    /// Whether a busy lease is down to half of what it was after its last grant (at most what
    /// that call asked for): time to refill ahead. Half of what was *asked* for made a grant
    /// short of its ask (the store near its limit, or the fleet's share of half the burst) low
    /// as it arrived, and the next decision sent a refill ahead into a store with few tokens, to
    /// sit in this sidecar's lease while others needed them: at 128 sidecars at 100% of `L`
    /// (simulated) 789 leases went back with tokens unspent in 60 s, and 6.0% of requests an exact
    /// limiter admits were denied; counted from the grant, none (RESULTS.md).
    pub fn lease_is_low(&self) -> bool {
        self.last_lease > 1 && self.lease <= u64::from(self.last_lease / 2)
    }

    /// Whether forgetting this state loses nothing a limit depends on. A local bucket must have
    /// refilled to full (an absent key starts full), or evicting it would reset its limit. A
    /// leased key keeps its truth in the global store; its lease goes back when it is evicted.
    pub fn at_rest(&self, mode: Mode, rate: &Rate, now: u64) -> bool {
        // Usage not yet sent to the store is kept until it is (this instance's checks count it),
        // and holds until they are given back (their release finds them here).
        self.rare().debt_pending == 0
            && self.rare().holds.is_empty()
            && (mode != Mode::Local || self.remaining(mode, rate, now) >= rate.burst as f64)
    }

    /// Adds a grant of a `want`-token request, sent at `now`, to the lease and updates the demand
    /// estimate. A window's grant (`window`, ending `ends_in` after the store's answer) replaces
    /// a lease of an earlier window instead of adding to it.
    pub fn add_window_grant(
        &mut self,
        granted: u64,
        remaining: f64,
        want: u64,
        now: u64,
        window: Option<(u64, u64)>,
    ) {
        if let Some((window, ends_in)) = window {
            if window != self.rare().lease_window {
                self.lease = 0;
            }
            let rare = self.rare_mut();
            rare.lease_window = window;
            rare.lease_until = now.saturating_add(ends_in);
        }
        self.add_grant(granted, remaining, want, now);
    }

    /// Adds a grant of a `want`-token request to the lease and updates the demand estimate.
    pub fn add_grant(&mut self, granted: u64, remaining: f64, want: u64, now: u64) {
        self.demand_per_sec = super::demand::decayed_demand(
            self.demand_per_sec,
            self.spent_since_lease,
            now.saturating_sub(self.leased_at),
        );
        self.lease = self.lease.saturating_add(granted);
        self.last_lease = u32::try_from(want.min(self.lease)).unwrap_or(u32::MAX);
        self.read_global(remaining, now);
        self.leased_at = now;
        self.spent_since_lease = 0;
        self.denied_since_lease = 0;
        // The fallback's local bucket starts empty from each grant and refills at the share's
        // rate: while the store answers, the global bucket holds this key's burst, so an outage
        // must not add another one on top.
        self.local = BucketState::empty(now);
    }
}
