//! Resets pushed between engines sharing a store (issue 25 item 12): a reset on one engine makes
//! every other drop its state of the key, so it leases from the refilled bucket at once instead
//! of spending or waiting out its lease of the old one; a `mode: local` bucket is never dropped.

use sluice_core::Entry;
use sluice_core::rules::Match;

use super::*;

fn entries(key: &str, value: &str) -> Vec<Entry> {
    vec![Entry::new(key, value)]
}

/// The table key another engine would push for `entries` of domain `d`.
fn table_key(e: &Engine, entries: &[Entry]) -> Vec<u8> {
    let rules = e.rules();
    let (Match::Rule(rule), keyed) = rules.match_keyed("d", entries) else {
        panic!("no rule matches {entries:?}");
    };
    key::with_encoded(rule.fingerprint, Values::Sent(&keyed), <[u8]>::to_vec)
}

#[tokio::test]
async fn a_reset_on_one_engine_is_pushed_to_the_others_which_lease_again_at_once() {
    let clock = ManualClock::at(1_000_000);
    let store = Forwarding::new(&clock, Mode::Up, 2);
    let a = engine_on(store.clone(), &clock, EngineSettings::default());
    let b = engine_on(store.clone(), &clock, EngineSettings::default());
    let mut to_b = store.pushed_resets().expect("a shared store pushes resets");
    let user = [d(&[("user", "u")])];
    // per_user: 2 a minute. B spends them and is denied.
    for _ in 0..2 {
        assert_eq!(ask(&b, &user).await.overall, Code::Ok);
    }
    assert_eq!(ask(&b, &user).await.overall, Code::OverLimit);
    clock.advance_micros(1_000);
    let rule = a.reset("d", &entries("user", "u")).await.expect("reset");
    assert_eq!(rule.as_deref(), Some("per_user"));
    // Before the push arrives, B still decides on its state of the old bucket.
    assert_eq!(ask(&b, &user).await.overall, Code::OverLimit);
    let pushed = to_b.try_recv().expect("the reset was pushed");
    assert_eq!(&*pushed, table_key(&b, &entries("user", "u")).as_slice());
    b.drop_pushed(&pushed);
    // The bucket is full again and B sees it on its next decision: two more, then denied.
    for _ in 0..2 {
        assert_eq!(ask(&b, &user).await.overall, Code::Ok);
    }
    assert_eq!(ask(&b, &user).await.overall, Code::OverLimit);
}

#[tokio::test]
async fn a_pushed_reset_never_drops_a_local_bucket_nor_another_key() {
    let clock = ManualClock::at(1_000_000);
    let store = Forwarding::new(&clock, Mode::Up, 2);
    let b = engine_on(store.clone(), &clock, EngineSettings::default());
    let local = [d(&[("local", "x")])];
    let user = [d(&[("user", "v")])];
    for _ in 0..3 {
        assert_eq!(ask(&b, &local).await.overall, Code::Ok);
    }
    for _ in 0..2 {
        assert_eq!(ask(&b, &user).await.overall, Code::Ok);
    }
    // `mode: local` is this engine's own limit: a message naming it changes nothing.
    b.drop_pushed(&table_key(&b, &entries("local", "x")));
    assert_eq!(ask(&b, &local).await.overall, Code::OverLimit);
    // Another value's reset, and bytes that are no key at all, leave `user=v` as it was.
    b.drop_pushed(&table_key(&b, &entries("user", "other")));
    b.drop_pushed(b"\xff not a key");
    b.drop_pushed(&[]);
    assert_eq!(ask(&b, &user).await.overall, Code::OverLimit);
    assert_eq!(b.tracked_keys(), 2);
}

#[tokio::test]
async fn an_engine_without_a_bus_resets_its_own_state_only() {
    // The embedded store has no other instance: no receiver, and a reset still works.
    let clock = ManualClock::at(1_000_000);
    let (e, store) = engine(&clock);
    assert!(store.pushed_resets().is_none());
    let user = [d(&[("user", "w")])];
    for _ in 0..2 {
        assert_eq!(ask(&e, &user).await.overall, Code::Ok);
    }
    assert_eq!(ask(&e, &user).await.overall, Code::OverLimit);
    e.reset("d", &entries("user", "w")).await.expect("reset");
    assert_eq!(ask(&e, &user).await.overall, Code::Ok);
}

#[tokio::test]
async fn a_flood_of_pushed_resets_drops_at_most_a_hundred_keys_a_second() {
    let clock = ManualClock::at(1_000_000);
    let store = Forwarding::new(&clock, Mode::Up, 2);
    let b = engine_on(store.clone(), &clock, EngineSettings::default());
    for i in 0..150 {
        ask(&b, &[d(&[("user", &format!("u{i}"))])]).await;
    }
    assert_eq!(b.tracked_keys(), 150);
    for i in 0..150 {
        b.drop_pushed(&table_key(&b, &entries("user", &format!("u{i}"))));
    }
    assert_eq!(b.tracked_keys(), 50, "100 dropped this second, 50 kept");
    clock.advance_micros(1_000_000);
    for i in 100..150 {
        b.drop_pushed(&table_key(&b, &entries("user", &format!("u{i}"))));
    }
    assert_eq!(b.tracked_keys(), 0, "the next second, the rest");
}
