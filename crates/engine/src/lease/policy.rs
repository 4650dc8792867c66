//! The lease policy as one synchronous step over a key's state and `now`: how much a lease call
//! asks for, and what its answer does to the key (its lease, its stock of rate, its turn in a
//! starved key's queue, when it may ask again). No store I/O and no clock: the
//! [`Leaser`](super::Leaser) reads what the store knows of the fleet once per call
//! ([`Leaser::policy`](super::Leaser::policy)), asks here under the key's lock, makes the call,
//! and hands the answer back here. governor's `gcra.rs` is the model: state in, decision out.

use sluice_core::bucket::{Algorithm, Rate};
use sluice_core::config::Mode;

use super::micros;
use crate::decision::EngineSettings;
use crate::ledger::LeaseState;
use crate::ledger::rate_lease::RateLease;
use crate::store::{LeaseAsk, ReserveAsk};

/// What the policy knows beyond one key: the engine's settings and the store's view of the fleet.
pub(crate) struct Policy<'a> {
    pub(super) settings: &'a EngineSettings,
    /// Live instances the store counts (1 for a store that does not count).
    pub(super) live: u64,
    /// The store is in this process: its calls cost nothing, so no turns and no cold leases.
    pub(super) in_process: bool,
    /// The store counts a concurrency key's holders ([`crate::store::GlobalStore::counts_holders`]).
    pub(super) counts_holders: bool,
}

/// A request's lease call, as the policy sizes it.
pub(super) enum Next {
    /// At its turn in a starved key's queue, or after it had to deny: sized by demand.
    ByDemand(Turn),
    /// Once before its turn ([`LeaseState::early_call_due`]).
    Early(LeaseAsk),
    /// Any other lease.
    Ask(LeaseAsk),
}

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
    /// Its own demand is below the key's limit ([`UNDER_LIMIT`] of it): its turn, if it is the
    /// first of a queue that has run out, comes when the bucket holds what its next request
    /// lacks, not all it asks for ([`LeaseAsk::next_needs`]).
    pub(super) under_limit: bool,
}

/// The fraction of a key's limit below which a sidecar's measured demand counts as under it
/// ([`Turn::under_limit`]): the estimate of a sidecar alone over its limit, which spends about
/// the limit, must not read as under it (its turns would come a token at a time: a lone sidecar
/// at 4× a limit of 100/s asked 106 times a second, not 10; simulated).
const UNDER_LIMIT: f64 = 0.9;

impl Policy<'_> {
    /// The lease call for a request of `hits` on a key in `state` (a bucket of `rate`, `mode`)
    /// whose lease cannot pay it: what it is missing and about a lease horizon of demand beyond
    /// it, or a cold lease where the key looks far from its limit, or, at a starved key's turn,
    /// the demand it saw while it waited.
    pub(super) fn next(
        &self,
        state: &mut LeaseState,
        rate: &Rate,
        mode: Mode,
        hits: u64,
        now: u64,
    ) -> Next {
        state.expire(now);
        state.fill(rate, now);
        let seen = state.seen_since_lease();
        // What this request lacks and, in exact mode or while the bucket shows slack, what the
        // requests waiting behind it need ([`Waiter`](super::waiting::Waiter)): judged again
        // here, since the answer they waited for may have shown a drained bucket.
        let lacks = hits.saturating_sub(state.lease);
        let waiting = if super::waiting::counts(state, rate, mode) {
            state.rare().waiting
        } else {
            0
        };
        let missing = lacks.saturating_add(waiting);
        let demand = f64::from(state.demand_per_sec);
        let cold = state.far_from_limit(rate, now);
        let denying = state.denied_since_lease > 0;
        let turn_gap = self.turn_gap(mode, rate);
        if state.early_call_due(now) {
            // Once before its turn, for what the request lacks: not into the queue again, and
            // a short answer leaves its turn as it was (`starved_below` 0: no new wait).
            state.set_early_at(None);
            return Next::Early(LeaseAsk::exactly(missing));
        }
        if (state.queued || denying) && turn_gap > 0 {
            return Next::ByDemand(Turn {
                seen,
                missing,
                denying,
                gap: turn_gap,
                under_limit: demand < UNDER_LIMIT * rate.per_second(),
            });
        }
        // A lease of rate fills the stock with the key's mean demand: the store is asked for
        // what a request lacks, and the burst stays in the store for every sidecar. Beyond it,
        // this instance's share of the burst, only from its top half (`least`) and no more
        // than a step leaves (`extra_cap`): asked for one token at a time, a hot pod whose
        // stock filled a hair under its demand called once per request, and a request behind a
        // chain of those calls waited the store's timeout (21 sidecars at 78% of 360 a second
        // on a burst of 378, one hot: 202 store calls and a false denial, 106 and none with
        // the share; simulated).
        if state.rate_leased(now) {
            let extra = self.extra_cap(rate, lacks, missing, demand);
            let want = self
                .fleet_share(rate.burst, missing)
                .min(missing.saturating_add(extra));
            return Next::Ask(LeaseAsk {
                want,
                least: missing,
                turn_gap: queue_gap(rate, missing, turn_gap),
                starved_below: missing,
                queue_below: missing,
                ..LeaseAsk::exactly(missing)
            });
        }
        let mut want = self.lease_size(mode, rate.burst, missing, demand);
        let share = self.fleet_share(rate.burst, missing);
        if !denying {
            want = want.min(missing.saturating_add(self.extra_cap(rate, lacks, missing, demand)));
        }
        // What the lease keeps if the store shows the key is not far from its limit after all,
        // and all it may take from below half the burst: this instance's share of it while it
        // admits everything ([`fleet_share`](Self::fleet_share)). Once it has been denying, the
        // key is starved and the bottom half is what the key's queue of turns shares out: the
        // whole lease, as before, so a grant short of it still means a turn.
        let mut keep = if denying { want } else { want.min(share) };
        // A cold lease: a key far from its limit gets the share even without measured demand,
        // so its next requests on this instance are decided without a store call (it is kept
        // for `cold_lease_ttl`, then what is left goes back). Its extra beyond `keep` comes only
        // from above half the burst ([`LeaseAsk::least`]), since the count of live instances
        // can be low (a fleet starting together counts itself as it registers). Not for a
        // concurrency limit: slots taken ahead of demand would sit free here while another
        // sidecar's request is refused.
        let concurrency = rate.algorithm == Algorithm::Concurrency;
        // Short of its lease while others wait for their turns: into the queue
        // ([`LeaseAsk::queue_below`]), not for a cold lease's extra (a key far from its limit
        // is not starved), nor for a concurrency limit (its slots come back when requests end,
        // and a holder waiting for its turn would refuse free ones).
        let queue_below = if concurrency { keep } else { want };
        if cold && mode == Mode::Strict && !self.in_process && !concurrency {
            want = want.max(share);
        }
        if rate.algorithm.is_window() {
            // A window's lease lapses when the window ends: ask for no more than this
            // instance can spend before then (its clock's idea of the end), so few leased
            // tokens go unspent at the edge.
            let left = sluice_core::window::until_window_end(rate, now) as f64 / 1e6;
            want = want.min(((demand * left).ceil() as u64).max(missing));
            keep = keep.min(want);
        }
        // Short of what the request needs, or of a lease while this instance has been denying
        // requests: starved fleet-wide, so into the key's queue. A lease merely short of its
        // size is no such sign (under its limit a key's tokens can sit in other sidecars' leases
        // for a while); it waits a lease horizon, as before the queue.
        let starved_below = if denying { keep } else { missing };
        Next::Ask(LeaseAsk {
            want,
            least: keep,
            turn_gap: queue_gap(rate, starved_below, turn_gap),
            starved_below,
            reserve: None,
            queue_below,
            next_needs: u64::MAX,
        })
    }

    /// The lease call at a starved key's turn (or after it had to deny): what was asked of this
    /// instance since its last lease (it will wait about as long again), up to what the key
    /// refills in a lease horizon or a turn gap (or `max_lease_fraction` of the burst, where
    /// more): each turn then takes what refilled since the turn before it, so the fleet's
    /// starved calls take all of `L` at `starved_calls_per_sec` calls a second, and no sidecar
    /// takes more than it is likely to get to spend (after a reset, the burst goes to every
    /// sidecar that asks, not to the first). Below its limit, a sidecar's first turn comes
    /// when its next request can be paid ([`Turn::under_limit`]).
    pub(super) fn by_demand(&self, rate: &Rate, turn: &Turn) -> LeaseAsk {
        let most = self.turn_ask_cap(rate, turn.gap).max(turn.missing);
        let want = turn.seen.clamp(turn.missing, most);
        LeaseAsk {
            want,
            least: want,
            turn_gap: queue_gap(rate, want, turn.gap),
            starved_below: want,
            reserve: None,
            queue_below: want,
            next_needs: if turn.under_limit {
                turn.missing
            } else {
                u64::MAX
            },
        }
    }

    /// A call before its turn ([`Next::Early`]) ended: the turn is still this sidecar's, and
    /// it asks at it by demand, as it would have without the call (whose answer took it out
    /// of the queue): the early call is an extra, not a new place in the fleet's order.
    pub(super) fn after_early(state: &mut LeaseState) {
        state.queued = true;
    }

    /// A demand-sized lease call for `turn` ended (`got_all`: it succeeded and left the key out
    /// of the queue). If this instance had to deny since its last lease and the bucket is still
    /// below half its burst, the key is still contended: the lease, enough for about as long as
    /// this instance waited, is kept that long (the sweep would hand most of it back after
    /// `lease_ttl`, into a bucket that missed turns may have let fill), and the next ask is
    /// sized the same way. It asks again as soon as the lease runs out: no turn to wait for, so
    /// a key whose demand fell under its limit is never denied here. A lease that covered its
    /// demand, or a bucket far from its limit, is back to ordinary leases (else leases sized for
    /// a wait that no longer comes would hold the burst).
    pub(super) fn after_demand(state: &mut LeaseState, turn: &Turn, succeeded: bool) {
        if succeeded && !state.queued {
            state.queued = turn.denying && !state.cold_lease;
        }
    }

    /// The background refill of a busy key (nothing is missing yet), or its lease of rate's
    /// renewal: `None` when neither is due.
    pub(super) fn refill(&self, state: &LeaseState, rate: &Rate, now: u64) -> Option<LeaseAsk> {
        let want = self.lease_size(Mode::Strict, rate.burst, 1, f64::from(state.demand_per_sec));
        if state.lease_is_low() {
            // A refill ahead that comes up short takes a turn only while the key has a queue of
            // starved callers (else it waits a lease horizon). A key with a lease of rate takes
            // from below half the burst only this instance's share of it, as a request's lease
            // does ([`fleet_share`](Self::fleet_share)): with a refill of 5 beside each
            // reservation, 32 sidecars at 80% of a burst of 100 held the burst in leases as
            // their reservations began (stocks empty, the store refilling at L − R), and the
            // store was empty for a request the exact limiter admits (simulated). Token leases
            // keep taking all of it: the store refills at L under them, and the share cost them
            // more calls than decisions (128 sidecars at 100%: 143 calls a second, for 6.0% →
            // 1.4% false denials).
            let least = if state.has_rate_lease() {
                want.min(self.fleet_share(rate.burst, 1))
            } else {
                want
            };
            Some(LeaseAsk {
                least,
                turn_gap: queue_gap(rate, least, self.turn_gap(Mode::Strict, rate)),
                queue_below: least,
                ..LeaseAsk::exactly(want)
            })
        } else if state.rate_lease_due(rate, now) {
            // A lease of rate in its last quarter: renewed with no tokens, before the stock
            // stops filling (the call asks for the reservation).
            Some(LeaseAsk::exactly(0))
        } else {
            None
        }
    }

    /// The reservation a lease call of a key in `state` (a bucket of `rate`) sent at `now` asks
    /// for, as `holder` (`None`: leases of rate are off, the store is in process, the key is
    /// not a strict token bucket, or it has no lease of rate and is too thin to start one,
    /// [`RateLease::worth_starting`]). Its stock stops filling at `now`: the store ends the old
    /// reservation when the call arrives.
    pub(super) fn reserve(
        &self,
        state: &mut LeaseState,
        rate: &Rate,
        holder: u64,
        now: u64,
    ) -> Option<ReserveAsk> {
        let ttl = self.settings.rate_lease_ttl?;
        if self.in_process || rate.algorithm != Algorithm::TokenBucket || state.mode != Mode::Strict
        {
            return None;
        }
        state.fill(rate, now);
        let stock = state.lease;
        let seen = state.seen_since_lease();
        // What was seen since the last lease was seen over the time since it (from the start,
        // if none): counted from the first ask, a starved sidecar of a thousand, with 20 hits
        // seen while it waited for its turn, asked for 20 a second.
        let since = state.leased_at.min(now);
        if state.rare().rate_lease.is_none()
            && !RateLease::worth_starting(seen, now - since, state.demand_per_sec)
        {
            return None;
        }
        let lease = state
            .rare_mut()
            .rate_lease
            .get_or_insert_with(|| RateLease::starting(since));
        let give_back_milli = lease.sending(seen, now, stock == 0);
        Some(ReserveAsk {
            holder,
            per_mille: lease.ask(rate),
            ttl_micros: self.rate_lease_ttl(ttl),
            give_back_milli,
        })
    }

    /// How long a reservation lasts: `engine.rate_lease_ttl`, or longer in a large fleet, so its
    /// renewals cost a key about `starved_calls_per_sec` calls a second in all.
    fn rate_lease_ttl(&self, ttl: std::time::Duration) -> u64 {
        let per_sec = u64::from(self.settings.starved_calls_per_sec.max(1));
        let fleet = self.live.saturating_mul(1_000_000) / per_sec;
        micros(ttl)
            .max(fleet)
            .min(sluice_core::reserve::MAX_TTL_MICROS)
    }

    /// The gap between turns of a starved key's callers (µs; 0: no turns): a strict token
    /// bucket on a remote store. The in-process store is asked again as soon as a token is due
    /// (its calls cost nothing); windows keep their own retry (what a window leaves unused is
    /// gone when it ends, so waiting in a queue would lose it); exact mode asks on every request.
    ///
    /// At most the time a token bucket takes to refill its whole burst: turns further apart
    /// let it overflow between them, rate no caller gets. A starved key then costs at least
    /// `L / B` calls a second, whatever `starved_calls_per_sec` says (each call takes at most
    /// the burst): the floor of a small burst.
    pub(super) fn turn_gap(&self, mode: Mode, rate: &Rate) -> u64 {
        let turns = mode == Mode::Strict && !self.in_process && !rate.algorithm.is_window();
        if !turns {
            return 0;
        }
        no_later_than_full(rate, 0.0, self.configured_turn_gap())
    }

    /// The longest a starved key waits for its turn: twice the queue every live instance would
    /// make (`turn_gap` apart), at least `lease_ttl`. A store that lost count of its queue
    /// cannot lock a key out for longer.
    pub(super) fn longest_wait(&self, turn_gap: u64) -> u64 {
        let queue = self.live.saturating_mul(turn_gap);
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
    pub(super) fn starved_lease_ttl(&self) -> u64 {
        self.longest_wait(self.configured_turn_gap())
    }

    /// `1 / starved_calls_per_sec`, in µs.
    fn configured_turn_gap(&self) -> u64 {
        1_000_000 / u64::from(self.settings.starved_calls_per_sec.max(1))
    }
}

/// A caller's place in a starved key's queue ([`LeaseAsk::turn_gap`]): the turn `gap` (µs), but
/// no longer than `rate` takes to refill the `want` tokens (at least one) it asks for, so the
/// turns hand out what refills as it refills. Spaced a whole gap apart, callers that each want
/// a token left the rest of each gap's refill in the bucket, which overflowed while they
/// waited: 128 sidecars in step on a burst of 100 at 80% of `L`, in any order, had 17% of
/// their requests denied that an exact limiter admits (0 now, simulated). The price is a
/// starved key's calls where its callers want little (about `L / want` turns a second, not
/// `1 / gap`: docs/architecture.md, *Fleet scale*). 0 stays 0 (no turns); a zero rate keeps
/// the gap.
pub(super) fn queue_gap(rate: &Rate, want: u64, gap: u64) -> u64 {
    if gap == 0 {
        return 0;
    }
    let want = want.clamp(1, rate.burst.max(1)) as f64;
    rate.micros_until(0.0, want)
        .map_or(gap, |refill| gap.min(refill.max(1)))
}

/// `wait` (µs), but no longer than a token bucket of `rate` holding `tokens` takes to be full
/// again (at least 1 µs): what refills after that overflows the burst, rate no caller gets.
/// Other algorithms, and a zero rate (never full), keep `wait`.
pub(super) fn no_later_than_full(rate: &Rate, tokens: f64, wait: u64) -> u64 {
    match rate.algorithm {
        Algorithm::TokenBucket => rate
            .micros_until(tokens, rate.burst as f64)
            .map_or(wait, |full| wait.min(full.max(1))),
        _ => wait,
    }
}

mod size;
#[cfg(test)]
mod tests;
