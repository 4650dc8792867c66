use super::*;
use proptest::prelude::*;
use sluice_core::Unit;
use sluice_core::bucket::Rate;
use sluice_core::config::Fallback;

const SEC: u64 = 1_000_000;

fn terms(hits: u64, mode: Mode, burst: u64) -> Terms {
    Terms {
        hits,
        checked: true,
        quota: false,
        count_denied: false,
        reported: 0,
        max_debt: None,
        mode,
        rate: Rate {
            requests_per_unit: 10,
            unit: Unit::Second,
            unit_multiplier: 1,
            burst,
            algorithm: sluice_core::bucket::Algorithm::TokenBucket,
        },
        shadow: false,
        store: StoreStatus::Up,
    }
}

fn settled(s: Settlement) -> (bool, SmallVec<[Verdict; 4]>) {
    match s {
        Settlement::Settled { allowed, verdicts } => (allowed, verdicts),
        Settlement::LeaseAgain => panic!("asked to lease again"),
    }
}

#[test]
fn a_cost_above_the_burst_is_denied_for_good_and_charges_nothing() {
    let t = [terms(11, Mode::Local, 10)];
    let mut s = LeaseState::new(Mode::Strict, &t[0].rate, 0);
    let before = s.clone();
    let (allowed, v) = settled(settle(&t, &mut [&mut s], 0, true));
    assert!(!allowed);
    assert_eq!(v[0].denial, Some(Denial::CostAboveBurst));
    assert_eq!(v[0].retry_after, None, "it never passes");
    assert_eq!(s.local, before.local);
    assert_eq!(t[0].hopeless(), Some(Denial::CostAboveBurst));
}

#[test]
fn a_leased_bucket_that_came_up_short_leases_again_once() {
    let t = [terms(2, Mode::Strict, 10)];
    let mut s = LeaseState::new(Mode::Strict, &t[0].rate, 0);
    s.lease = 1;
    assert_eq!(settle(&t, &mut [&mut s], 0, true), Settlement::LeaseAgain);
    let (allowed, v) = settled(settle(&t, &mut [&mut s], 0, false));
    assert!(!allowed);
    assert_eq!(v[0].denial, Some(Denial::Empty));
    assert_eq!(s.lease, 1, "nothing charged");
    // A starved key waits for its retry time instead.
    s.set_retry_at(5);
    assert!(matches!(
        settle(&t, &mut [&mut s], 0, true),
        Settlement::Settled { .. }
    ));
}

#[test]
fn a_peek_blocks_the_request_when_nothing_is_left() {
    let t = [terms(0, Mode::Local, 1), terms(1, Mode::Local, 5)];
    let mut empty = LeaseState::new(Mode::Strict, &t[0].rate, 0);
    empty.local.tokens = 0.0;
    let mut full = LeaseState::new(Mode::Strict, &t[1].rate, 0);
    let (allowed, v) = settled(settle(&t, &mut [&mut empty, &mut full], 0, true));
    assert!(!allowed);
    assert_eq!(v[0].denial, Some(Denial::Empty));
    assert_eq!(v[1].denial, None, "the other bucket could pay");
    assert_eq!(full.local.tokens, 5.0, "but was not charged");
    assert_eq!(
        v[0].retry_after,
        Some(100_000),
        "one token at 10/s is 100 ms away"
    );
}

#[test]
fn fallbacks_decide_while_the_store_is_down() {
    let down = |fallback| Terms {
        store: StoreStatus::Down {
            fallback,
            instances: 4,
        },
        ..terms(1, Mode::Strict, 8)
    };
    let mut s = LeaseState::new(Mode::Strict, &terms(1, Mode::Strict, 8).rate, 0);
    let (allowed, v) = settled(settle(&[down(Fallback::Allow)], &mut [&mut s], 0, true));
    assert!(allowed && v[0].fallback);
    let (allowed, v) = settled(settle(&[down(Fallback::Deny)], &mut [&mut s], 0, true));
    assert!(!allowed && v[0].denial == Some(Denial::StoreDown));
    // local_share: 8 / 4 instances = a local bucket of 2.
    let share = [down(Fallback::LocalShare)];
    let admitted = (0..5)
        .filter(|_| settled(settle(&share, &mut [&mut s], 0, true)).0)
        .count();
    assert_eq!(admitted, 2);
    let big = Terms {
        hits: 3,
        ..down(Fallback::LocalShare)
    };
    assert_eq!(
        big.hopeless(),
        Some(Denial::CostAboveBurst),
        "above the share"
    );
}

/// One hit on a key of 100 a second (burst 100) whose store is down, decided by `local_share`
/// among `instances` sidecars.
fn local_share(instances: u64) -> Terms {
    Terms {
        store: StoreStatus::Down {
            fallback: Fallback::LocalShare,
            instances,
        },
        rate: Rate::per_unit(100, Unit::Second),
        ..terms(1, Mode::Strict, 100)
    }
}

/// With leases of rate the fallback shares what the store refills the bucket with, `L − R`,
/// exactly (thousandths of a token over `1000·n` periods), while the reservations last; then
/// `L` again.
#[test]
fn the_fallback_shares_the_refill_reservations_leave() {
    let down = local_share(3);
    let (_, share) = down.effective_reserving(40_000);
    assert_eq!(
        (share.requests_per_unit, share.unit_multiplier),
        (60_000, 3_000)
    );
    assert!(
        (share.refill(0.0, SEC) - 20.0).abs() < 1e-9,
        "60 a second over 3"
    );
    let (_, tokens) = down.effective_reserving(0);
    assert_eq!((tokens.requests_per_unit, tokens.unit_multiplier), (33, 1));
    // No room for 1000·n periods in the multiplier: whole tokens, rounded down.
    let long = Terms {
        rate: Rate {
            unit_multiplier: u32::MAX / 2,
            ..Rate::per_unit(100, Unit::Second)
        },
        ..down
    };
    let (_, share) = long.effective_reserving(40_500);
    assert_eq!(
        (share.requests_per_unit, share.unit_multiplier),
        (19, u32::MAX / 2)
    );
    // The state counts `R` until the last reservation lapses.
    let mut s = LeaseState::new(Mode::Strict, &down.rate, 0);
    s.rare_mut().store_reserved = 40_000;
    s.rare_mut().store_reserved_until = 5 * SEC;
    assert_eq!(s.store_reserved(5 * SEC - 1), 40_000);
    assert_eq!(s.store_reserved(5 * SEC), 0);
}

/// Across the reservations' lapse the fallback's local bucket refills at the share of `L − R`
/// up to it and at the share of `L` after: one sidecar, 80 of 100 a second reserved until 5 s,
/// its local bucket empty at 4.5 s, asked at 5.2 s: 0.5 s at 20 and 0.2 s at 100, 30 tokens
/// (70, refilled at 100 over the whole gap).
#[test]
fn the_fallback_refills_at_each_share_across_the_reservations_lapse() {
    let down = local_share(1);
    let mut s = LeaseState::new(Mode::Strict, &down.rate, 0);
    s.rare_mut().store_reserved = 80_000;
    s.rare_mut().store_reserved_until = 5 * SEC;
    s.local = sluice_core::bucket::BucketState::empty(4 * SEC + SEC / 2);
    let now = 5 * SEC + SEC / 5;
    let admitted = (0..100)
        .filter(|_| {
            settled(settle(
                std::slice::from_ref(&down),
                &mut [&mut s],
                now,
                true,
            ))
            .0
        })
        .count();
    assert_eq!(admitted, 30);
}

/// The fallback's first decision since the key's last reading of the global bucket keeps at
/// most its share of that reading (`Terms::catch_up_fallback`): 2 sidecars on 100 a second, the
/// store empty after this one's grant at 0 (the other sidecar's turn leases what refills next),
/// the store gone by 0.15 s. The local bucket had banked 7.5 tokens of that refill; it starts
/// from none, then refills at its share, 50 a second. A reading of 60 keeps 30 of the 45 its
/// local bucket refilled in 0.9 s, once per reading; a grant reading 10 cuts the next
/// outage's to 5; a reading older than the burst's refill (1 s) cuts nothing.
#[test]
fn the_fallback_starts_from_its_share_of_the_last_reading() {
    let down = local_share(2);
    let admit = |s: &mut LeaseState, at| {
        (0..100)
            .filter(|_| {
                settled(settle(
                    std::slice::from_ref(&down),
                    &mut [&mut *s],
                    at,
                    true,
                ))
                .0
            })
            .count()
    };
    let mut s = LeaseState::new(Mode::Strict, &down.rate, 0);
    s.add_grant(1, 0.0, 1, 0);
    s.lease = 0;
    assert_eq!(
        admit(&mut s, 150_000),
        0,
        "the refill the other's turn took"
    );
    assert_eq!(admit(&mut s, 250_000), 5, "then its share");

    let mut full = LeaseState::new(Mode::Strict, &down.rate, 0);
    full.add_grant(1, 60.0, 1, 0);
    full.lease = 0;
    assert_eq!(admit(&mut full, 9 * SEC / 10), 30);
    assert_eq!(admit(&mut full, 16 * SEC / 10), 35, "not cut again");
    full.add_grant(0, 10.0, 1, 3 * SEC);
    assert_eq!(admit(&mut full, 3 * SEC + SEC / 2), 5);
    full.add_grant(0, 0.0, 1, 5 * SEC);
    assert_eq!(admit(&mut full, 6 * SEC + SEC / 2), 50, "a stale reading");
}

/// What `local_share` spends on a leased rule is owed to the global bucket, as far as the
/// bucket's own refill during the outage does not already stand for it (`owed.rs`); a
/// local-mode rule owes nothing; a grant starts the fallback's bucket empty.
#[test]
fn the_fallback_owes_what_it_spends_on_leased_rules_beyond_the_refill() {
    let down = |mode| Terms {
        store: StoreStatus::Down {
            fallback: Fallback::LocalShare,
            instances: 2,
        },
        ..terms(1, mode, 8)
    };
    let rate = terms(1, Mode::Strict, 8).rate;
    let mut s = LeaseState::new(Mode::Strict, &rate, 0);
    // The global bucket was empty after the last grant.
    s.add_grant(8, 0.0, 8, 0);
    s.lease = 0;
    let spend_for = |s: &mut LeaseState, mode, at| {
        (0..20)
            .filter(|_| settled(settle(&[down(mode)], &mut [&mut *s], at, true)).0)
            .count()
    };
    assert_eq!(spend_for(&mut s, Mode::Strict, 0), 0, "nothing at once");
    // 10/s shared by 2 = 5/s; after 0.4 s, 2 tokens, all owed: the store refills from empty.
    assert_eq!(spend_for(&mut s, Mode::Strict, 4 * SEC / 10), 2);
    assert_eq!(s.owed(&rate), 2);
    // Its share's refill (3 by 1 s, then its burst, 4, each second): the global bucket, full
    // since 0.8 s (its share: 4), holds only the last second's, and so does an exact bucket
    // that was drained by everything spent (refilled to the burst before each second's).
    assert_eq!(spend_for(&mut s, Mode::Strict, SEC), 3);
    for at in 2..10 {
        assert_eq!(spend_for(&mut s, Mode::Strict, at * SEC), 4);
    }
    assert_eq!(s.owed(&rate), 4);
    // A lease held when the store went away is spent first, and owes nothing.
    let mut held = LeaseState::new(Mode::Strict, &rate, 0);
    held.add_grant(3, 0.0, 3, 0);
    assert_eq!(spend_for(&mut held, Mode::Strict, 0), 3);
    assert_eq!((held.lease, held.owed(&rate)), (0, 0));
    let mut local = LeaseState::new(Mode::Strict, &rate, 0);
    assert_eq!(spend_for(&mut local, Mode::Local, 0), 4);
    assert_eq!(
        local.owed(&rate),
        0,
        "a local rule has no global bucket to owe"
    );
}

#[test]
fn no_room_denies_even_a_peek_and_never_leases_again() {
    let t = [Terms {
        store: StoreStatus::NoRoom,
        ..terms(0, Mode::Strict, 5)
    }];
    let mut s = LeaseState::new(Mode::Strict, &t[0].rate, 0);
    let (allowed, v) = settled(settle(&t, &mut [&mut s], 0, true));
    assert!(!allowed && v[0].denial == Some(Denial::NoRoom));
}

#[test]
fn a_local_bucket_is_at_rest_only_when_full() {
    let rate = terms(1, Mode::Local, 10).rate;
    let mut s = LeaseState::new(Mode::Strict, &rate, 0);
    assert!(s.at_rest(Mode::Local, &rate, 0));
    s.local.tokens = 9.0;
    assert!(!s.at_rest(Mode::Local, &rate, 0));
    assert!(s.at_rest(Mode::Local, &rate, SEC / 10), "refilled");
    assert!(s.at_rest(Mode::Strict, &rate, 0), "leases go back");
}

/// Calls on a key answered out of order (a post-paid charge sent after a lease call and answered
/// before it) leave the reading sent last: an older one never replaces it.
#[test]
fn an_older_reading_of_the_store_never_replaces_a_newer_one() {
    let rate = terms(1, Mode::Strict, 10).rate;
    let mut s = LeaseState::new(Mode::Strict, &rate, 0);
    s.read_global(4.0, 2 * SEC);
    s.read_global(9.0, SEC);
    assert_eq!((s.global_remaining, s.global_read_at), (4.0, 2 * SEC));
    s.read_global(3.0, 3 * SEC);
    assert_eq!((s.global_remaining, s.global_read_at), (3.0, 3 * SEC));
}

proptest! {
    /// Over any buckets, states and hits: either every enforcing bucket is charged exactly its
    /// hits, or no state changes at all; shadow buckets never block.
    #[test]
    fn all_or_nothing(
        buckets in prop::collection::vec(
            (0u64..12, 0u64..8, prop::bool::ANY, prop::bool::ANY, 0.0f64..12.0, 0usize..3),
            1..5,
        ),
    ) {
        let modes = [Mode::Local, Mode::Strict, Mode::Exact];
        let t: Vec<Terms> = buckets
            .iter()
            .map(|&(hits, _, shadow, _, _, mode)| Terms {
                shadow,
                ..terms(hits, modes[mode], 10)
            })
            .collect();
        let mut states: Vec<LeaseState> = buckets
            .iter()
            .map(|&(_, lease, _, starved, tokens, _)| {
                let mut s = LeaseState::new(Mode::Strict, &t[0].rate, 0);
                s.lease = lease;
                s.local.tokens = tokens.min(10.0);
                s.set_retry_at(if starved { 1 } else { 0 });
                s
            })
            .collect();
        let before = states.clone();
        let mut refs: Vec<&mut LeaseState> = states.iter_mut().collect();
        let settlement = settle(&t, &mut refs, 0, false);
        let Settlement::Settled { allowed, verdicts } = settlement else {
            return Err(TestCaseError::fail("no retry was allowed"));
        };
        let blocked = t.iter().zip(&verdicts).any(|(t, v)| !t.shadow && v.denial.is_some());
        prop_assert_eq!(allowed, !blocked);
        for ((t, v), (b, a)) in t.iter().zip(&verdicts).zip(before.iter().zip(&states)) {
            let charged = allowed && v.denial.is_none() && t.hits > 0;
            let spent_lease = b.lease - a.lease;
            let spent_local = b.local.tokens - a.local.tokens;
            let spent = if t.mode == Mode::Local { spent_local } else { spent_lease as f64 };
            prop_assert_eq!(spent, if charged { t.hits as f64 } else { 0.0 });
        }
    }
}
