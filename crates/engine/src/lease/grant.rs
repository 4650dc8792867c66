//! The second half of the lease policy's step ([`Policy`]): what a lease call's answer does to
//! its key, under the key's lock and with no store I/O.

use sluice_core::bucket::{Algorithm, Rate};

use super::micros;
use super::policy::{Policy, no_later_than_full};
use crate::ledger::LeaseState;
use crate::store::{LeaseAsk, LeaseGrant};

impl Policy<'_> {
    /// The store answered `ask`, sent at `now` for a request needing `needed` tokens (0 for a
    /// refill ahead), with `grant`, which reached this instance at `arrived`: the lease takes the
    /// tokens, the stock of rate its reservation, and a starved key its turn (when it may ask
    /// again). Returns a concurrency key's slots the store counts for this instance beyond what
    /// it believes it holds: the caller releases them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn apply(
        &self,
        state: &mut LeaseState,
        rate: &Rate,
        ask: &LeaseAsk,
        grant: &LeaseGrant,
        needed: u64,
        now: u64,
        arrived: u64,
    ) -> u64 {
        state.expire(now);
        state.fill(rate, arrived);
        apply_reserved(state, rate, ask, grant, now, arrived);
        state.rate_lease_answered();
        if grant.reserved_all != 0 || state.rare().store_reserved != 0 {
            let rare = state.rare_mut();
            rare.store_reserved = grant.reserved_all;
            rare.store_reserved_until = arrived.saturating_add(grant.reserved_ends_in);
        }
        let window = grant.ends_in.map(|ends_in| (grant.window, ends_in));
        let concurrency = rate.algorithm == Algorithm::Concurrency;
        // A concurrency limit's fallback bucket holds slots, which never refill: it keeps what
        // it has (emptied at each grant, as a rate's is, it would refuse everything while the
        // store is down).
        let local = state.local;
        // Neither waiting for a turn nor denying: a lull's first short answer, not a starved
        // fleet's turn.
        let admitting = !state.queued && state.denied_since_lease == 0;
        state.add_window_grant(grant.granted, grant.remaining, ask.want, now, window);
        if concurrency {
            state.local = local;
        }
        // Free slots go back after `lease_ttl` (never kept as a cold lease): others may wait.
        state.cold_lease = grant.remaining >= rate.burst as f64 / 2.0 && !concurrency;
        state.queued = false;
        // What the store counts as this instance's slots against what it believes it holds.
        let lost_grant = if concurrency && self.counts_holders {
            crate::holds::reconcile(state, grant.window)
        } else {
            0
        };
        // Starved: the store gave this caller a turn in the key's queue, or less than it
        // cannot do without. A grant merely short of the lease's size, with no turn, is no
        // such sign: under its limit a key's tokens can sit in other sidecars' leases for a
        // while, and a refill ahead (which needs nothing now) that found the store empty
        // used to make this sidecar deny its next requests for a lease horizon without
        // asking; the fleet simulator's property test found 3 false denials of 210 that way
        // (7 sidecars in step at 47% of the limit, burst 21). The next request asks instead.
        // A turn also comes with a grant that covered the request but not the lease while
        // others wait (`LeaseAsk::turn_gap`): this sidecar spends it, then waits for its turn.
        if grant.turn_in.is_some() || grant.granted < ask.starved_below {
            let (retry_at, until) = self.retry_at(state, rate, ask, grant, needed, now);
            state.set_retry_at(retry_at);
            // Slots come back when requests end, at no time a refill can tell: no early call.
            let early = grant.turn_in.filter(|_| admitting && !concurrency);
            state.set_early_at(early.and_then(|turn| early_call_at(ask, turn, until, now)));
        }
        lost_grant
    }

    /// When a starved key asks again, and how long until the tokens it lacks are due in the
    /// store (µs, were nobody else asking). Global demand is above the limit (the grant was
    /// short of `least`, the lease the key would have had without a cold lease; a cold lease
    /// coming up short is no sign of contention): it spends what came, then denies locally
    /// while tokens refill in the global bucket (up to the burst, so nothing is lost) instead
    /// of asking on every request. A remote store is asked again after one lease horizon, or
    /// later if the tokens this request needs take longer to refill; the in-process store as
    /// soon as they are due. Never later than `lease_ttl`, so a reset, a returned lease or a
    /// rate that never refills is seen again soon, and a key can always lease again (no
    /// lockout).
    ///
    /// A sliding window is the exception: nothing accumulates for later (what a window leaves
    /// unused is gone when it ends) while the previous window's hits fade out continuously, so
    /// a starved sidecar asks again as soon as a whole lease has faded in, at least a tenth of
    /// a horizon apart; waiting a horizon for it capped what all sidecars together could take
    /// at their lease size per horizon (90% of L with the defaults and 4 sidecars; a quarter
    /// horizon 97.4–97.9%, a tenth 99%: RESULTS.md).
    fn retry_at(
        &self,
        state: &mut LeaseState,
        rate: &Rate,
        ask: &LeaseAsk,
        grant: &LeaseGrant,
        needed: u64,
        now: u64,
    ) -> (u64, u64) {
        let sliding = rate.algorithm == Algorithm::SlidingWindow;
        let missing = if sliding {
            ask.want.max(1)
        } else {
            needed.saturating_sub(state.lease).max(1)
        };
        let horizon = micros(self.settings.lease_horizon);
        // A concurrency limit never refills: its slots come back when requests end, at no
        // time a rate can tell, so it asks again after a horizon.
        let never = if rate.algorithm == Algorithm::Concurrency {
            horizon
        } else {
            u64::MAX
        };
        let until = rate
            .micros_until_at(grant.remaining, missing as f64, now)
            .unwrap_or(never);
        // How long at least between a starved key's calls. A caller with a turn in the key's
        // queue (below) is paced by the queue, so it asks at its turn, or once the tokens it
        // lacks are there if that is later. Floored at a horizon, its wait denied requests an
        // exact limiter admits while the bucket refilled: one sidecar on a burst of 5 at 80% of
        // its limit, 3.2% of its requests (1.7% without the floor), and 93% of `B + L·t` taken
        // at 400% (99.8%); 2 sidecars at 100% with one hot pod 0.73% (0.42%), for 4 more calls
        // a second (the fleet simulator, RESULTS.md).
        let floor = if self.in_process || (grant.turn_in.is_some() && !sliding) {
            1
        } else if sliding {
            horizon / 10
        } else {
            horizon
        };
        // Never past the moment the global bucket is full again: what refills after it
        // overflows the burst, rate an exact limiter grants and no sidecar gets. A burst
        // smaller than a lease horizon's refill lost most of its rate to the wait: one sidecar
        // on a burst of 1 at 324 a second, at 70% of it, had 55% of its requests denied that
        // an exact limiter admits (the fleet simulator's property test; 11% with this bound).
        let wait = no_later_than_full(rate, grant.remaining, until.max(floor));
        // A turn in the key's queue of starved callers: the fleet's starved sidecars ask one at
        // a time, `turn_gap` apart, so the key costs `starved_calls_per_sec` calls a second
        // however many they are. The wait is bounded by twice the queue every live instance
        // would make, so a store that lost count cannot lock a key out.
        let (wait, most) = match grant.turn_in {
            Some(turn) => {
                state.queued = true;
                (
                    wait.max(turn),
                    self.longest_wait(self.turn_gap(state.mode, rate)),
                )
            }
            None => (wait, self.longest_wait_without_turn()),
        };
        (now.saturating_add(wait.min(most)), until)
    }
}

/// When a caller given a turn `turn` µs away asks once before it
/// ([`Early`](super::policy::Next::Early)), if it may: when the tokens it lacks are due
/// (`until` µs away, were nobody ahead of it), if it is at most one turn behind the head of the
/// queue (the first of a queue comes when the tokens it lacks are there, at most a gap away,
/// each next one `ask.turn_gap` later). A turn ahead can go unused, a sidecar given one with no
/// request since, and the tokens then sat in the store while this one denied requests an exact
/// limiter admits: a hot pod on a burst of 3 across 3 sidecars at 56% of the limit, 3 of 612
/// (the fleet property test). Further back in a queue, the turns ahead are taken. Only for a
/// caller that was neither queued nor denying before the call that gave it the turn
/// (`admitting`, the caller's to say): when any sidecar under the limit could make one, a
/// starved pair's store calls doubled (10.5 → 20.3 a second at 4× a limit of 100, simulated),
/// the early calls taking the tokens of the turn ahead. A light sidecar in a lasting queue
/// whose early call paid its request is not denying at its turn, so it can make one such call
/// a turn: bounded by the turns, never one a request.
fn early_call_at(ask: &LeaseAsk, turn: u64, until: u64, now: u64) -> Option<u64> {
    let behind = turn.checked_sub(until).filter(|&b| b > 0)?;
    (behind < ask.turn_gap.saturating_mul(2)).then(|| now.saturating_add(until.max(1)))
}

/// A call that asked for a reservation (`ask.reserve`), sent at `sent`, was answered at
/// `arrived`: the key's stock (a bucket of `rate`) fills at what was granted from then until
/// `sent` plus the ttl ([`RateLease::granted`](crate::ledger::rate_lease::RateLease::granted)).
fn apply_reserved(
    state: &mut LeaseState,
    rate: &Rate,
    ask: &LeaseAsk,
    grant: &LeaseGrant,
    sent: u64,
    arrived: u64,
) {
    let (Some(asked), Some(lease)) = (ask.reserve, state.rare_mut().rate_lease.as_mut()) else {
        return;
    };
    let granted = grant.reserved.unwrap_or(0);
    lease.granted(
        rate,
        granted,
        sent,
        arrived,
        asked.ttl_micros,
        grant.remaining,
    );
}

#[cfg(test)]
mod tests {
    use sluice_core::Unit;
    use sluice_core::bucket::Rate;
    use sluice_core::config::Mode;

    use crate::decision::EngineSettings;
    use crate::lease::policy::{Next, Policy};
    use crate::ledger::LeaseState;
    use crate::store::{LeaseAsk, LeaseGrant};

    const NOW: u64 = 1_000_000_000;

    /// Three sidecars on a remote store.
    fn policy(settings: &EngineSettings) -> Policy<'_> {
        Policy {
            settings,
            live: 3,
            in_process: false,
            counts_holders: false,
        }
    }

    /// 100 a second on a burst of 3.
    fn rate() -> Rate {
        Rate {
            burst: 3,
            ..Rate::per_unit(100, Unit::Second)
        }
    }

    /// A request short of its token (half of one in the store: due in 5 ms) given a turn
    /// `turn_in` µs away, turns 10 ms apart.
    fn given_a_turn(turn_in: u64, before: impl Fn(&mut LeaseState)) -> LeaseState {
        let settings = EngineSettings::default();
        let (p, r) = (policy(&settings), rate());
        let mut state = LeaseState::new(Mode::Strict, &r, NOW);
        before(&mut state);
        let asked = LeaseAsk {
            turn_gap: 10_000,
            starved_below: 1,
            ..LeaseAsk::exactly(1)
        };
        let grant = LeaseGrant {
            turn_in: Some(turn_in),
            ..LeaseGrant::of(0, 0.5, &r, NOW)
        };
        p.apply(&mut state, &r, &asked, &grant, 1, NOW, NOW);
        state
    }

    /// One turn behind the head of the queue, a caller asks once when its token is due, for
    /// that token alone and with no place in the queue; a short answer keeps its turn.
    #[test]
    fn one_turn_behind_a_caller_asks_once_before_its_turn() {
        let mut state = given_a_turn(15_000, |_| {});
        assert_eq!(state.retry_at(), NOW + 15_000);
        assert!(
            !state.early_call_due(NOW + 4_999),
            "its token is not due yet"
        );
        assert!(state.early_call_due(NOW + 5_000));
        assert!(!state.early_call_due(NOW + 15_000), "its turn has come");
        let settings = EngineSettings::default();
        let (p, r) = (policy(&settings), rate());
        let Next::Early(ask) = p.next(&mut state, &r, Mode::Strict, 1, NOW + 6_000) else {
            panic!("one call before its turn");
        };
        assert_eq!((ask.want, ask.turn_gap, ask.starved_below), (1, 0, 0));
        assert!(!state.early_call_due(NOW + 6_000), "once");
        let short = LeaseGrant::of(0, 0.1, &r, NOW + 6_000);
        p.apply(&mut state, &r, &ask, &short, 1, NOW + 6_000, NOW + 6_000);
        Policy::after_early(&mut state);
        assert_eq!(state.retry_at(), NOW + 15_000, "its turn is kept");
        assert!(state.queued, "and taken by demand");
    }

    /// No call before its turn for the queue's first, for a caller further back (the turns
    /// ahead are taken), nor for one that was queued or denying (a starved fleet's turns).
    #[test]
    fn no_call_before_a_turn_where_the_turns_ahead_are_taken() {
        let none = |state: LeaseState| (0..15_000).all(|t| !state.early_call_due(NOW + t * 10));
        assert!(none(given_a_turn(5_000, |_| {})), "first of the queue");
        assert!(none(given_a_turn(25_000, |_| {})), "two turns behind");
        assert!(none(given_a_turn(15_000, |s| s.queued = true)), "queued");
        assert!(
            none(given_a_turn(15_000, |s| s.denied_since_lease = 1)),
            "denying"
        );
    }
}
