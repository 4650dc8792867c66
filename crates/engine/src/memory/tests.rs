use super::*;
use crate::ReserveAsk;
use sluice_core::{ManualClock, Unit};

/// The embedded store holds at most `max_keys` buckets: full ones make room, and a new key is
/// refused (never a limit reset) while every bucket held is below full.
#[tokio::test]
async fn is_bounded_by_max_keys_without_resetting_a_limit() {
    let clock = ManualClock::at(1);
    let store = MemoryStore::with_max_keys(clock.clone(), 3);
    let rate = Rate::per_unit(10, Unit::Second);
    for key in ["a", "b", "c"] {
        assert_eq!(store.lease(key, rate, 10).await.map(|g| g.granted), Ok(10));
    }
    assert_eq!(store.lease("d", rate, 1).await, Err(StoreError::Full));
    assert_eq!(
        store.lease("a", rate, 1).await.map(|g| g.granted),
        Ok(0),
        "a held key keeps its state"
    );
    store.release("e", rate, 5, 0).await.expect("release");
    assert_eq!(store.len(), 3, "a release on an absent key adds nothing");
    // After a second every bucket is full again: the same as absent, so room for new keys.
    clock.advance_millis(1_000);
    assert_eq!(store.lease("d", rate, 1).await.map(|g| g.granted), Ok(1));
    assert!(store.len() <= 3);
}

/// A key's queue of starved callers (`LeaseAsk::queue_below`): with no queue, a grant that
/// covers what the caller cannot do without gets no turn, however short of its lease; while a
/// starved caller's turn is to come, a grant short of `queue_below` joins the queue behind it,
/// and a grant of all of `queue_below` (a cold lease's extra aside) does not.
#[tokio::test]
async fn a_grant_short_of_its_lease_joins_a_queue_only_while_one_waits() {
    let clock = ManualClock::at(1_000_000);
    let store = MemoryStore::new(clock.clone());
    // A token every 25 ms; turns 100 ms apart.
    let rate = Rate {
        burst: 4,
        ..Rate::per_unit(40, Unit::Second)
    };
    let gap = 100_000;
    // A thin slice's request: it cannot do without 1 and may take only 1 from below half the
    // burst; its lease would be `want`.
    let ask = |want: u64, starved_below: u64, queue_below: u64| LeaseAsk {
        want,
        least: 1,
        turn_gap: gap,
        starved_below,
        reserve: None,
        queue_below,
        next_needs: u64::MAX,
    };
    let lease = async |a: LeaseAsk| {
        let g = store.lease_asking("k", rate, a).await.expect("lease");
        (g.granted, g.turn_in)
    };
    assert_eq!(
        lease(ask(3, 1, 3)).await,
        (2, None),
        "short, nobody waiting"
    );
    assert_eq!(lease(ask(1, 1, 1)).await, (1, None));
    assert_eq!(lease(ask(1, 1, 1)).await, (1, None));
    let first = 25_000;
    assert_eq!(
        lease(ask(1, 1, 1)).await,
        (0, Some(first)),
        "starved, first in the queue: its turn when the bucket holds its token"
    );
    assert_eq!(
        lease(ask(1, 1, 1)).await,
        (0, Some(first + gap)),
        "starved while a turn is to come: a gap behind it"
    );
    clock.advance_millis(50);
    assert_eq!(lease(ask(4, 1, 1)).await, (1, None), "all of queue_below");
    clock.advance_millis(25);
    assert_eq!(
        lease(ask(4, 1, 4)).await,
        (1, Some(first + 2 * gap - 75_000)),
        "short of its lease while a turn is to come: behind it"
    );
}

/// The first turn of a queue that has run out waits for what the caller lacks of
/// `starved_below`, or for `next_needs` if less (`LeaseAsk::lacking`): a caller below its limit
/// that asked for 4 and got none waits for the token its request needs, not for 4.
#[tokio::test]
async fn a_first_turn_waits_for_no_more_than_the_next_request_needs() {
    let clock = ManualClock::at(1_000_000);
    let store = MemoryStore::new(clock.clone());
    // A token every 25 ms, empty to start.
    let rate = Rate {
        burst: 4,
        ..Rate::per_unit(40, Unit::Second)
    };
    assert_eq!(store.lease("k", rate, 4).await.map(|g| g.granted), Ok(4));
    let ask = |next_needs: u64| LeaseAsk {
        turn_gap: 1_000_000,
        starved_below: 4,
        next_needs,
        ..LeaseAsk::exactly(4)
    };
    let turn = async |a: LeaseAsk, key: &str| {
        let g = store.lease_asking(key, rate, a).await.expect("lease");
        (g.granted, g.turn_in)
    };
    assert_eq!(turn(ask(1), "k").await, (0, Some(25_000)), "one token");
    // Another key, emptied the same way: the whole ask.
    assert_eq!(store.lease("j", rate, 4).await.map(|g| g.granted), Ok(4));
    assert_eq!(
        turn(ask(u64::MAX), "j").await,
        (0, Some(100_000)),
        "four tokens"
    );
}

/// What may be reserved is judged on the bucket as this call leaves it (after its own take),
/// as `lease.lua` judges it: a full bucket of 100 that grants 60 holds 40, so 30% of the
/// reservable 80 a second (`sluice_core::reserve::reservable`); judged before the take it would
/// be all of it.
#[tokio::test]
async fn a_reservation_is_judged_on_the_bucket_the_call_leaves() {
    let store = MemoryStore::new(ManualClock::at(1));
    let rate = Rate::per_unit(100, Unit::Second);
    // `holder` takes `want` and asks to reserve 50 a second for 10 s.
    let lease = async |holder: u64, want: u64| {
        let reserve = ReserveAsk {
            holder,
            per_mille: 50_000,
            ttl_micros: 10_000_000,
            give_back_milli: 0,
        };
        let ask = LeaseAsk {
            reserve: Some(reserve),
            ..LeaseAsk::exactly(want)
        };
        let g = store.lease_asking("k", rate, ask).await.expect("lease");
        (g.granted, g.reserved)
    };
    assert_eq!(lease(1, 60).await, (60, Some(24_000)), "30% of 80 a second");
    assert_eq!(
        lease(2, 20).await,
        (20, Some(0)),
        "a fifth of the burst left: nothing"
    );
}

/// A lease of rate's give-back is in thousandths of a token, added before the take and capped
/// at the burst, as `lease.lua` adds it: half a token given back lets a bucket holding half a
/// token pay a request; a full bucket keeps nothing more.
#[tokio::test]
async fn a_give_back_counts_thousandths_of_a_token() {
    let store = MemoryStore::new(ManualClock::at(1));
    let rate = Rate {
        burst: 10,
        ..Rate::per_unit(1, Unit::Hour)
    };
    let lease = async |want: u64, give_back_milli: u64| {
        let reserve = ReserveAsk {
            holder: 1,
            per_mille: 0,
            ttl_micros: 0,
            give_back_milli,
        };
        let ask = LeaseAsk {
            reserve: Some(reserve),
            ..LeaseAsk::exactly(want)
        };
        let g = store.lease_asking("k", rate, ask).await.expect("lease");
        (g.granted, g.remaining)
    };
    assert_eq!(lease(0, 5_000).await, (0, 10.0), "capped at the burst");
    assert_eq!(lease(10, 0).await, (10, 0.0));
    assert_eq!(lease(1, 500).await, (0, 0.5), "half a token: not enough");
    assert_eq!(lease(1, 500).await, (1, 0.0), "the other half pays it");
}
