//! How many tokens a lease asks for ([`Policy::next`]): about a lease horizon of demand, within
//! the caps that keep a fleet's leases from holding what other sidecars' requests need.

use sluice_core::bucket::{Algorithm, Rate};
use sluice_core::config::Mode;

use super::Policy;
use crate::lease::micros;

impl Policy<'_> {
    /// How many tokens to ask for: about `lease_horizon` of demand (rounded to the nearest
    /// token), at least `missing`, at most `max_lease_fraction` of the burst (unless `missing`
    /// itself is more). Exact mode asks for exactly what is missing (its own request's and those
    /// waiting behind it).
    ///
    /// Rounded, not up: a sidecar whose demand reads just over a request a horizon (1.001 for
    /// requests in step 199.8 ms apart) asked for 2, and when the burst is between one and two
    /// tokens per sidecar the first callers of a step took the tokens the last ones needed (34
    /// sidecars in step on a burst of 34: 8 of 1 190 denied). Token leases then failed the fleet
    /// property test (no false denial while `B ≥ n`) within 4 000 fleets every run; rounded,
    /// they passed 12 000 (simulated). The price: a slice of 1–1.5 requests a horizon asks a
    /// little more often (RESULTS.md).
    pub(super) fn lease_size(
        &self,
        mode: Mode,
        burst: u64,
        missing: u64,
        demand_per_sec: f64,
    ) -> u64 {
        if mode == Mode::Exact {
            return missing;
        }
        let horizon = (demand_per_sec * self.settings.lease_horizon.as_secs_f64()).round() as u64;
        horizon.clamp(missing, self.lease_cap(burst, missing))
    }

    /// This instance's share of half the burst among the live instances, at least `missing`:
    /// what a lease may take from below half the burst ([`LeaseAsk::least`]), and a cold
    /// lease's size. Every instance's leases then hold at most half the burst's bottom half, so
    /// when the whole fleet asks at once (requests in step) each instance gets its request's
    /// token while the burst covers the fleet. Without it, 32 sidecars at 30% of a limit of 124
    /// with a burst of 128, each asking for a lease of 7 in the same millisecond, left 14 with
    /// nothing: 18 false denials of 128 (the fleet simulator's property test,
    /// `crates/fleetsim/tests/properties.rs`). A cold lease used to be at least
    /// `max_lease_fraction` of the burst too: at 1 000 sidecars on a burst of 100 a few cold
    /// leases of 5 held the top half of the burst for 30 s, and the simulator saw 12% of
    /// requests at 80% of the limit denied (0 with the share alone).
    pub(super) fn fleet_share(&self, burst: u64, missing: u64) -> u64 {
        let share = burst / self.live.saturating_mul(2).max(1);
        share.max(missing)
    }

    /// The most a lease may ask beyond `missing` (what its request lacks, `lacks`, and what
    /// the requests waiting behind it need) when the burst covers the fleet's requests in step
    /// but not twice (`n ≤ B < 2n`, per `lacks`): the
    /// bottom half of the burst cannot pay a step then, and extras from the top half took what
    /// the step's last callers needed (19 sidecars in step at 78% of 184 a second on a burst of
    /// 21, each leasing 1.5 requests a horizon rounded to 2: 3 of 1 007 requests denied that an
    /// exact limiter admits; the fleet property test). So the slack `B − n` is shared by
    /// demand: this instance's `demand / L` of it, and the whole fleet's extras fit beside a
    /// step while it is under its limit. A hot pod keeps most of its lease; a fleet of equal
    /// slices gets none and calls for each request, as it nearly did (1 012 calls for 1 007
    /// requests). Otherwise unbounded here: with `B ≥ 2n` the bottom half covers a step, and
    /// with `B < n` an exact limiter denies part of a step too; and for a concurrency limit,
    /// whose slots are no rate to share (its leases' own rules apply). The slack is what the
    /// step leaves with this instance's waiters in it: counted as the fleet's step, they lifted
    /// the cap, and beside it they took what the step's last callers needed.
    pub(super) fn extra_cap(
        &self,
        rate: &Rate,
        lacks: u64,
        missing: u64,
        demand_per_sec: f64,
    ) -> u64 {
        let step = self.live.saturating_mul(lacks.max(1));
        if rate.burst < step || rate.burst / 2 >= step || rate.algorithm == Algorithm::Concurrency {
            return u64::MAX;
        }
        let limit_per_sec = rate.per_second();
        if limit_per_sec <= 0.0 {
            return 0;
        }
        let share = (demand_per_sec / limit_per_sec).clamp(0.0, 1.0);
        let with_waiters = (step - lacks.max(1)).saturating_add(missing.max(lacks).max(1));
        (rate.burst.saturating_sub(with_waiters) as f64 * share) as u64
    }

    /// The most a lease may hold: `max_lease_fraction` of the burst, or `missing` if more.
    pub(super) fn lease_cap(&self, burst: u64, missing: u64) -> u64 {
        ((burst as f64 * self.settings.max_lease_fraction).ceil() as u64).max(missing)
    }

    /// The most a demand-sized ask takes: what `rate` refills in a lease horizon or a turn
    /// gap, whichever is longer, or `max_lease_fraction` of the burst, where more; at most the
    /// burst.
    pub(super) fn turn_ask_cap(&self, rate: &Rate, turn_gap: u64) -> u64 {
        let span = micros(self.settings.lease_horizon).max(turn_gap);
        let refilled = rate.refill(0.0, span).ceil() as u64;
        refilled.max(self.lease_cap(rate.burst, 0)).min(rate.burst)
    }
}
