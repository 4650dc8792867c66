//! Turns: how a starved key's sidecars share a remote store's calls. The store keeps the key's
//! queue ([`crate::store::next_turn`]); here is when a sidecar asks for a turn, how long it may
//! wait for one, and how much it asks for when its turn comes (docs/architecture.md, "Fleet
//! scale").

use sluice_core::bucket::Rate;
use sluice_core::config::Mode;

use super::{Leaser, micros};
use crate::plan::Charge;
use crate::store::{LeaseAsk, StoreError};

/// What a sidecar knows when it asks by demand (at its turn, or after it had to deny).
pub(super) struct Turn {
    /// Hits spent and denied since its last lease.
    pub(super) seen: u64,
    /// Tokens the request lacks.
    pub(super) missing: u64,
    /// Whether it denied since its last lease.
    pub(super) denying: bool,
    /// The gap between turns (µs).
    pub(super) gap: u64,
}

impl Leaser {
    /// Leases for `charge` by demand: at its turn, or after it had to deny.
    pub(super) async fn lease_by_demand(
        &self,
        charge: &Charge<'_>,
        turn: Turn,
        now: u64,
    ) -> Option<StoreError> {
        let bucket = &charge.bucket;
        // Its turn (or a request denied since the last lease): ask for what was asked of
        // this instance since the last lease (it will wait about as long again), up to what
        // the key refills in a lease horizon or a turn gap (or `max_lease_fraction` of the
        // burst, where more): each turn then takes what refilled since the turn before it,
        // so the fleet's starved calls take all of `L` at `starved_calls_per_sec` calls a
        // second, and no sidecar takes more than it is likely to get to spend (after a
        // reset, the burst goes to every sidecar that asks, not to the first).
        let most = self.turn_ask_cap(&bucket.rate, turn.gap).max(turn.missing);
        let want = turn.seen.clamp(turn.missing, most);
        let ask = LeaseAsk {
            want,
            least: want,
            turn_gap: turn.gap,
            starved_below: want,
            reserve: None,
        };
        let failed = self
            .lease(bucket, charge.store_key(), ask, charge.hits, now)
            .await;
        let mut state = bucket.lock();
        if failed.is_none() && !state.queued {
            // All it asked for. If this instance had to deny since its last lease and the
            // bucket is still below half its burst, the key is still contended: the lease,
            // enough for about as long as this instance waited, is kept that long (the
            // sweep would hand most of it back after `lease_ttl`, into a bucket that missed
            // turns may have let fill), and the next ask is sized the same way. It asks
            // again as soon as the lease runs out: no turn to wait for, so a key whose
            // demand fell under its limit is never denied here. A lease that covered its
            // demand, or a bucket far from its limit, is back to ordinary leases (else
            // leases sized for a wait that no longer comes would hold the burst).
            state.queued = turn.denying && !state.cold_lease;
        }
        failed
    }

    /// The most a demand-sized ask takes: what `rate` refills in a lease horizon or a turn
    /// gap, whichever is longer, or `max_lease_fraction` of the burst, where more; at most the
    /// burst.
    fn turn_ask_cap(&self, rate: &Rate, turn_gap: u64) -> u64 {
        let span = micros(self.settings.lease_horizon).max(turn_gap);
        let refilled = rate.refill(0.0, span).ceil() as u64;
        refilled.max(self.lease_cap(rate.burst, 0)).min(rate.burst)
    }

    /// The gap between turns of a starved key's callers (µs; 0: no turns): a strict token
    /// bucket on a remote store. The in-process store is asked again as soon as a token is due
    /// (its calls cost nothing); windows keep their own retry (what a window leaves unused is
    /// gone when it ends, so waiting in a queue would lose it); exact mode asks on every request.
    pub(crate) fn turn_gap(&self, mode: Mode, rate: &Rate) -> u64 {
        let turns =
            mode == Mode::Strict && !self.store.is_in_process() && !rate.algorithm.is_window();
        if turns { self.configured_turn_gap() } else { 0 }
    }

    /// The longest a starved key waits for its turn: twice the queue every live instance would
    /// make (`turn_gap` apart), at least `lease_ttl`. A store that lost count of its queue
    /// cannot lock a key out for longer.
    pub(super) fn longest_wait(&self, turn_gap: u64) -> u64 {
        let queue = self.store.live_instances().saturating_mul(turn_gap);
        self.longest_wait_without_turn()
            .max(queue.saturating_mul(2))
    }

    /// The longest any starved key waits: `lease_ttl` (at least a lease horizon), so a reset, a
    /// returned lease or a rate that never refills is seen again soon.
    pub(super) fn longest_wait_without_turn(&self) -> u64 {
        micros(self.settings.lease_ttl).max(micros(self.settings.lease_horizon))
    }

    /// How long a starved key's lease is kept ([`longest_wait`](Self::longest_wait) at the
    /// configured turn gap): the sweep's bound for it.
    pub(crate) fn starved_lease_ttl(&self) -> u64 {
        self.longest_wait(self.configured_turn_gap())
    }

    /// `1 / starved_calls_per_sec`, in µs.
    fn configured_turn_gap(&self) -> u64 {
        1_000_000 / u64::from(self.settings.starved_calls_per_sec.max(1))
    }
}
