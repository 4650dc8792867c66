//! The lease policy's step on its own: a key's state in, an ask or a key changed out, with no
//! store and no clock (times are plain numbers).

use proptest::prelude::*;
use sluice_core::Unit;
use sluice_core::bucket::{Algorithm, Rate};
use sluice_core::config::Mode;

use super::{Next, Policy, Turn};
use crate::decision::EngineSettings;
use crate::ledger::LeaseState;
use crate::store::{LeaseAsk, LeaseGrant};

const NOW: u64 = 1_000_000_000;

fn rate(limit: u64, burst: u64) -> Rate {
    Rate {
        burst,
        ..Rate::per_unit(limit, Unit::Second)
    }
}

fn policy(settings: &EngineSettings, live: u64) -> Policy<'_> {
    Policy {
        settings,
        live,
        in_process: false,
        counts_holders: false,
    }
}

fn ask(next: Next) -> LeaseAsk {
    match next {
        Next::Ask(ask) => ask,
        Next::ByDemand(_) => panic!("a key that never denied asks by demand"),
        Next::Early(_) => panic!("a key with no turn asks before none"),
    }
}

proptest! {
    /// A fleet of `live` sidecars whose first requests reach the store in the same millisecond
    /// (cold keys, requests in step) takes at most half the burst from its bottom half, so
    /// while the burst covers the fleet every sidecar's request finds its token.
    #[test]
    fn a_fleet_in_step_leaves_the_bottom_half_of_the_burst(
        live in 1u64..2_000,
        burst in 1u64..10_000,
        limit in 1u64..10_000,
        hits in 1u64..4,
    ) {
        let settings = EngineSettings::default();
        let p = policy(&settings, live);
        let r = rate(limit, burst);
        let mut least = 0u64;
        for _ in 0..live {
            let mut state = LeaseState::new(Mode::Strict, &r, NOW);
            let a = ask(p.next(&mut state, &r, Mode::Strict, hits, NOW));
            prop_assert!(a.want >= hits, "{a:?} short of the request");
            prop_assert!(a.least <= a.want);
            prop_assert!(a.least <= (burst / (2 * live)).max(hits), "{a:?}");
            least += a.least;
        }
        if burst >= 2 * live * hits {
            prop_assert!(least <= burst / 2, "{least} of {burst} from the bottom half");
        }
    }

    /// No lockout: whatever the store answers (any grant, any turn however far), a starved key
    /// asks again within twice the queue the live fleet makes, or `lease_ttl`.
    #[test]
    fn a_starved_key_always_asks_again_within_the_bound(
        live in 1u64..5_000,
        burst in 1u64..10_000,
        limit in 0u64..10_000,
        want in 1u64..10_000,
        granted_of_want in 0u64..100,
        remaining in 0.0f64..10_000.0,
        turn_in in proptest::option::of(any::<u64>()),
        window in any::<bool>(),
    ) {
        let settings = EngineSettings::default();
        let p = policy(&settings, live);
        let r = Rate {
            algorithm: if window { Algorithm::SlidingWindow } else { Algorithm::TokenBucket },
            ..rate(limit, burst)
        };
        let gap = p.turn_gap(Mode::Strict, &r);
        let mut state = LeaseState::new(Mode::Strict, &r, NOW);
        let granted = want * granted_of_want / 100;
        let asked = LeaseAsk { turn_gap: gap, starved_below: want, ..LeaseAsk::exactly(want) };
        let grant = LeaseGrant {
            turn_in,
            ..LeaseGrant::of(granted, remaining.min(burst as f64), &r, NOW)
        };
        p.apply(&mut state, &r, &asked, &grant, want, NOW, NOW + 1_000);
        let bound = p.longest_wait(gap);
        prop_assert!(state.retry_at() <= NOW + bound, "{} µs", state.retry_at() - NOW);
        prop_assert_eq!(state.retry_at() > NOW, granted < want, "starved only when short");
        prop_assert_eq!(state.queued, granted < want && turn_in.is_some());
        prop_assert_eq!(state.lease, granted);
    }

    /// At its turn a starved key asks for what it saw, never less than its request needs and
    /// never more than the burst (unless the request itself is more), all or nothing; below
    /// its limit, its first turn waits for no more than its request lacks.
    #[test]
    fn a_turn_asks_for_the_demand_it_saw(
        burst in 1u64..10_000,
        limit in 1u64..10_000,
        seen in 0u64..100_000,
        missing in 1u64..20_000,
        under_limit: bool,
    ) {
        let settings = EngineSettings::default();
        let p = policy(&settings, 32);
        let r = rate(limit, burst);
        let gap = p.turn_gap(Mode::Strict, &r);
        let turn = Turn { seen, missing, denying: true, gap, under_limit };
        let a = p.by_demand(&r, &turn);
        prop_assert!(a.want >= missing);
        prop_assert!(a.want <= burst.max(missing));
        // What it saw, up to `max_lease_fraction` of the burst at least.
        let fraction = (burst as f64 * settings.max_lease_fraction).ceil() as u64;
        prop_assert!(a.want >= seen.min(fraction), "{a:?}");
        prop_assert_eq!((a.least, a.starved_below), (a.want, a.want));
        prop_assert_eq!(a.lacking(0), if under_limit { missing } else { a.want });
    }
}

/// A key whose grant came with a turn is in the queue: its next lease call is sized by demand
/// (not a lease horizon's), and a turn that got all it asked for while it had been denying
/// keeps it there; one that was not denying is back to ordinary leases.
#[test]
fn a_turn_puts_the_key_in_the_queue_until_its_demand_is_met() {
    let settings = EngineSettings::default();
    let p = policy(&settings, 100);
    let r = rate(100, 100);
    let gap = p.turn_gap(Mode::Strict, &r);
    assert_eq!(gap, 1_000_000 / u64::from(settings.starved_calls_per_sec));
    let mut state = LeaseState::new(Mode::Strict, &r, NOW);
    let asked = LeaseAsk {
        turn_gap: gap,
        ..LeaseAsk::exactly(5)
    };
    let grant = LeaseGrant {
        turn_in: Some(3_000_000),
        ..LeaseGrant::of(0, 0.0, &r, NOW)
    };
    p.apply(&mut state, &r, &asked, &grant, 1, NOW, NOW + 1_000);
    assert!(state.queued);
    assert_eq!(state.retry_at(), NOW + 3_000_000, "its turn, not a horizon");
    let Next::ByDemand(turn) = p.next(&mut state, &r, Mode::Strict, 1, NOW + 3_000_000) else {
        panic!("a queued key asks by demand");
    };
    let mut met = state.clone();
    met.queued = false;
    Policy::after_demand(&mut met, &turn, true);
    assert!(!met.queued, "it had not denied: back to ordinary leases");
    let denying = Turn {
        denying: true,
        ..turn
    };
    Policy::after_demand(&mut met, &denying, true);
    assert!(met.queued, "it had denied: the queue goes on");
}

/// A queued key's turn asks for the demand it saw; while the sidecar's own demand is below the
/// limit, the first turn of a queue that has run out waits only for what its request lacks
/// (one sidecar at 61% of 22/s, burst 3: a Poisson clump of 3 timed its turn for 2 more tokens
/// and a request the exact limiter admitted was denied). A sidecar spending about the limit on
/// its own waits for all of it: every token that refills is its own anyway, and a turn a token
/// at a time cost a lone sidecar at 4× its limit 106 calls a second, not 10 (simulated).
#[test]
fn below_its_limit_a_first_turn_waits_for_the_request_not_the_demand() {
    let settings = EngineSettings::default();
    let p = policy(&settings, 1);
    let r = rate(100, 100);
    for (demand, lacks) in [(0.0, 1), (61.0, 1), (89.0, 1), (91.0, 6), (400.0, 6)] {
        let mut state = LeaseState::new(Mode::Strict, &r, NOW);
        state.queued = true;
        state.demand_per_sec = demand;
        state.denied_since_lease = 6;
        let Next::ByDemand(turn) = p.next(&mut state, &r, Mode::Strict, 1, NOW) else {
            panic!("a queued key asks by demand");
        };
        let a = p.by_demand(&r, &turn);
        assert_eq!(a.want, 6, "the demand it saw: {a:?}");
        assert_eq!(a.lacking(0), lacks, "at {demand}/s: {a:?}");
        assert_eq!(a.lacking(5), 1, "a grant of 5 leaves 1 to wait for");
    }
}

/// The in-process store has no turns: a starved key asks again as soon as its token is due.
#[test]
fn in_process_no_turns_and_asks_when_the_token_is_due() {
    let settings = EngineSettings::default();
    let p = Policy {
        in_process: true,
        ..policy(&settings, 1)
    };
    let r = rate(10, 10);
    assert_eq!(p.turn_gap(Mode::Strict, &r), 0);
    let mut state = LeaseState::new(Mode::Strict, &r, NOW);
    let grant = LeaseGrant::of(0, 0.5, &r, NOW);
    let asked = LeaseAsk {
        starved_below: 1,
        ..LeaseAsk::exactly(1)
    };
    p.apply(&mut state, &r, &asked, &grant, 1, NOW, NOW);
    // Half a token at 10 a second: the other half is due in 50 ms.
    assert_eq!(state.retry_at(), NOW + 50_000);
}

/// A request's call joins a queue (`LeaseAsk::queue_below`) when short of the lease it would
/// have had, never of a cold lease's extra; and a grant that covered the request but came with
/// a turn is spent, then the key waits for its turn (no call for each request meanwhile).
#[test]
fn a_request_joins_the_queue_short_of_its_lease_not_of_a_cold_extra() {
    let settings = EngineSettings::default();
    let p = policy(&settings, 4);
    let r = rate(100, 100);
    let mut state = LeaseState::new(Mode::Strict, &r, NOW);
    let cold = ask(p.next(&mut state, &r, Mode::Strict, 1, NOW));
    assert_eq!(
        cold.want, 12,
        "a cold lease: this instance's share of half the burst"
    );
    assert_eq!(
        cold.queue_below, 1,
        "the lease it would have had without it"
    );
    let grant = LeaseGrant {
        turn_in: Some(300_000),
        ..LeaseGrant::of(1, 0.0, &r, NOW)
    };
    p.apply(&mut state, &r, &cold, &grant, 1, NOW, NOW + 1_000);
    assert_eq!(state.lease, 1, "it spends what came");
    assert!(state.queued);
    assert_eq!(state.retry_at(), NOW + 300_000, "then waits for its turn");
}

/// A burst that covers a step of the fleet but not twice (`n ≤ B < 2n`): a lease asks beyond
/// what its request lacks only for its demand's share of the slack `B − n`, so a fleet of equal
/// slices asks for no extra and a hot pod keeps some; outside that range, a horizon of demand.
#[test]
fn a_burst_under_twice_the_fleet_shares_its_slack_by_demand() {
    let settings = EngineSettings::default();
    let r = rate(184, 21);
    // (live, demand a second, want, least); 7.5 a second is 1.5 a horizon, rounded to 2.
    for (live, demand, want, least) in [
        (19, 7.5, 1, 1),
        (11, 7.5, 1, 1),
        (19, 150.0, 2, 1),
        (10, 7.5, 2, 1),
        (22, 7.5, 2, 1),
        (1, 7.5, 2, 2),
    ] {
        let p = policy(&settings, live);
        let mut state = LeaseState::new(Mode::Strict, &r, NOW);
        state.read_global(5.0, NOW); // not a cold key
        state.demand_per_sec = demand;
        let a = ask(p.next(&mut state, &r, Mode::Strict, 1, NOW));
        assert_eq!(
            (a.want, a.least),
            (want, least),
            "{live} at {demand}/s: {a:?}"
        );
    }
}

/// A burst that refills faster than a lease horizon: the turns come no further apart than the
/// bucket takes to fill, and a short grant waits no longer than that either. Waiting a horizon
/// (200 ms) on a burst of 1 at 324 a second let 64 tokens' worth of refill overflow.
#[test]
fn a_small_burst_waits_no_longer_than_it_takes_to_fill() {
    let settings = EngineSettings::default();
    let p = policy(&settings, 1);
    let full_in = 1_000_000u64.div_ceil(324);
    let small = rate(324, 1);
    let gap = p.turn_gap(Mode::Strict, &small);
    assert_eq!(gap, full_in, "a turn per burst's refill, not 10 a second");
    assert_eq!(
        p.turn_gap(Mode::Strict, &rate(100, 100)),
        1_000_000 / u64::from(settings.starved_calls_per_sec),
        "a burst of a second keeps the configured gap"
    );
    for (remaining, turn_in) in [(0.0, None), (0.5, None), (0.0, Some(gap))] {
        let mut state = LeaseState::new(Mode::Strict, &small, NOW);
        let asked = LeaseAsk {
            turn_gap: gap,
            starved_below: 1,
            ..LeaseAsk::exactly(1)
        };
        let grant = LeaseGrant {
            turn_in,
            ..LeaseGrant::of(0, remaining, &small, NOW)
        };
        p.apply(&mut state, &small, &asked, &grant, 1, NOW, NOW);
        let wait = state.retry_at() - NOW;
        assert!(wait > 0, "it was short: it waits");
        assert!(
            wait <= full_in,
            "{remaining} left, turn {turn_in:?}: waits {wait} µs, the bucket is full in {full_in}"
        );
    }
    // A zero rate never fills: the wait is the horizon's, not a call on every request.
    let never = rate(0, 1);
    let mut state = LeaseState::new(Mode::Strict, &never, NOW);
    let asked = LeaseAsk {
        starved_below: 1,
        ..LeaseAsk::exactly(1)
    };
    p.apply(
        &mut state,
        &never,
        &asked,
        &LeaseGrant::of(0, 0.0, &never, NOW),
        1,
        NOW,
        NOW,
    );
    assert!(state.retry_at() - NOW >= super::micros(settings.lease_horizon));
}

/// A caller's place in a starved key's queue spans the time its own ask takes to refill, at
/// most the turn gap: a queue of callers that each want a token is done in `n/L` seconds, not
/// `n/C`. Spaced `1/C` apart, 28 callers denied at one step of 128 sidecars in step (burst
/// 100, 80% of `L`) still waited through the next step, while the bucket refilled to full
/// and overflowed: 17% false denials, simulated.
#[test]
fn a_turn_spans_the_refill_of_what_it_asks_for() {
    let settings = EngineSettings::default();
    let p = policy(&settings, 128);
    let r = rate(100, 100);
    let gap = p.turn_gap(Mode::Strict, &r);
    assert_eq!(gap, 100_000);
    let mut state = LeaseState::new(Mode::Strict, &r, NOW);
    let a = ask(p.next(&mut state, &r, Mode::Strict, 1, NOW));
    assert_eq!(a.turn_gap, 10_000, "one token refills in 10 ms: {a:?}");
    let turn = Turn {
        seen: 4,
        missing: 1,
        denying: true,
        gap,
        under_limit: false,
    };
    assert_eq!(
        p.by_demand(&r, &turn).turn_gap,
        40_000,
        "four tokens, 40 ms"
    );
    let many = Turn { seen: 50, ..turn };
    assert_eq!(
        p.by_demand(&r, &many).turn_gap,
        gap,
        "never more than the turn gap"
    );
    assert_eq!(super::queue_gap(&r, 1, 0), 0, "no turns stay no turns");
    assert_eq!(
        super::queue_gap(&rate(0, 10), 1, gap),
        gap,
        "a zero rate keeps the gap"
    );
    assert_eq!(
        super::queue_gap(&r, 0, gap),
        10_000,
        "a turn takes at least a token"
    );
}

/// A caller with a turn is paced by the key's queue, so it asks again at its turn, or once the
/// tokens it lacks are there if that is later, not a lease horizon later: waiting a horizon
/// denied what an exact limiter admits while the bucket refilled (one sidecar on a burst of 5
/// at 80% of its limit: 3.2% of its requests, 1.7% without the floor, simulated). A caller with
/// no turn keeps the horizon between its calls.
#[test]
fn a_caller_with_a_turn_asks_when_its_tokens_are_there() {
    let settings = EngineSettings::default();
    let p = policy(&settings, 2);
    let r = rate(100, 100);
    let asked = LeaseAsk {
        turn_gap: 10_000,
        starved_below: 1,
        ..LeaseAsk::exactly(1)
    };
    let wait = |turn_in: Option<u64>| {
        let mut state = LeaseState::new(Mode::Strict, &r, NOW);
        let grant = LeaseGrant {
            turn_in,
            ..LeaseGrant::of(0, 0.5, &r, NOW)
        };
        p.apply(&mut state, &r, &asked, &grant, 1, NOW, NOW);
        state.retry_at() - NOW
    };
    assert_eq!(wait(Some(1_000)), 5_000, "half a token lacking: 5 ms");
    assert_eq!(wait(Some(30_000)), 30_000, "its turn, if later");
    assert_eq!(
        wait(None),
        super::micros(settings.lease_horizon),
        "no turn: a horizon"
    );
}

/// Requests waiting behind a key's call count toward the next one in exact mode, and in strict
/// mode only while the bucket showed slack (three quarters of its burst) at the last reading
/// and the key is no concurrency limit: the slack is judged again when the call is sized.
#[test]
fn waiters_count_in_strict_mode_only_while_the_bucket_shows_slack() {
    let settings = EngineSettings::default();
    let p = policy(&settings, 32);
    let r = rate(100, 100);
    let slots = Rate {
        algorithm: Algorithm::Concurrency,
        ..rate(100, 100)
    };
    // (mode, rate, the bucket at the last reading, what the ask wants and keeps)
    for (mode, r, read, want) in [
        (Mode::Strict, &r, 80.0, (4, 4)),
        (Mode::Strict, &r, 74.0, (1, 1)),
        (Mode::Strict, &slots, 80.0, (1, 1)),
        (Mode::Exact, &r, 10.0, (4, 4)),
    ] {
        let mut state = LeaseState::new(mode, r, NOW);
        state.read_global(read, NOW);
        state.rare_mut().waiting = 3;
        let a = ask(p.next(&mut state, r, mode, 1, NOW));
        assert_eq!((a.want, a.least), want, "{mode:?} at {read}: {a:?}");
    }
}

/// With `n ≤ B < 2n` a lease's extra beyond what it lacks is capped by a step counted in
/// requests (`extra_cap`), not in this instance's waiters: counted with them, the step looked
/// wider than the burst and the cap went (19 sidecars on a burst of 21 with leases of up to
/// half of it: 11 tokens for 3 requests). Its waiters are in the step the cap leaves room
/// for: the other 18 requests and these 3 are the whole burst, so no extra.
#[test]
fn waiters_leave_the_cap_of_a_burst_under_twice_the_fleet() {
    let settings = EngineSettings {
        max_lease_fraction: 0.5,
        ..EngineSettings::default()
    };
    let p = policy(&settings, 19);
    let r = rate(184, 21);
    let mut state = LeaseState::new(Mode::Strict, &r, NOW);
    state.read_global(20.0, NOW);
    state.demand_per_sec = 150.0;
    state.rare_mut().waiting = 2;
    let a = ask(p.next(&mut state, &r, Mode::Strict, 1, NOW));
    assert_eq!((a.want, a.least), (3, 3), "3 requests, no extra: {a:?}");
    // Without the waiters, one request and its extra of the 2 the step leaves (at 150 of 184).
    state.rare_mut().waiting = 0;
    let a = ask(p.next(&mut state, &r, Mode::Strict, 1, NOW));
    assert_eq!((a.want, a.least), (2, 1), "{a:?}");
}

/// A key whose lease of rate fills asks the store for what its request lacks, and beyond it
/// for its share of the burst's top half only (`least`: what it lacks), joining no queue
/// for the share.
#[test]
fn a_rate_leased_key_asks_for_its_share_of_the_top_half() {
    let settings = EngineSettings::default();
    let p = policy(&settings, 2);
    let r = rate(100, 100);
    let mut state = LeaseState::new(Mode::Strict, &r, NOW);
    state.read_global(30.0, NOW);
    state.rare_mut().rate_lease = Some(crate::ledger::rate_lease::RateLease {
        per_mille: 40_000,
        filled_to: NOW,
        until: NOW + 10_000_000,
        ..crate::ledger::rate_lease::RateLease::starting(NOW)
    });
    let a = ask(p.next(&mut state, &r, Mode::Strict, 1, NOW));
    assert_eq!(
        (a.want, a.least, a.starved_below, a.queue_below),
        (25, 1, 1, 1),
        "a quarter of the burst (half of it, between 2): {a:?}"
    );
}

/// With leases of rate on, a thin key of a remote store (a hit in the 20 s since its grant, as
/// each of 100 000 keys sharing 5 000 requests a second) asks for no reservation and boxes no
/// rare part; one that saw 10 hits in the second since its grant starts its lease of rate and
/// asks for 10 a second.
#[test]
fn only_a_key_that_could_fill_a_stock_starts_a_lease_of_rate() {
    let settings = EngineSettings {
        rate_lease_ttl: Some(std::time::Duration::from_secs(10)),
        ..EngineSettings::default()
    };
    let p = policy(&settings, 2);
    let r = rate(100, 100);
    let mut thin = LeaseState::new(Mode::Strict, &r, NOW);
    thin.add_grant(1, 50.0, 1, NOW);
    thin.spent_since_lease = 1;
    assert_eq!(p.reserve(&mut thin, &r, 7, NOW + 20_000_000), None);
    assert!(!thin.rare_boxed(), "a thin key boxed its rare part");

    let mut busy = LeaseState::new(Mode::Strict, &r, NOW);
    busy.add_grant(1, 50.0, 1, NOW);
    busy.spent_since_lease = 10;
    let asked = p
        .reserve(&mut busy, &r, 7, NOW + 1_000_000)
        .expect("a reservation");
    assert_eq!((asked.holder, asked.per_mille), (7, 10_000));
    assert!(busy.rare_boxed());
}
