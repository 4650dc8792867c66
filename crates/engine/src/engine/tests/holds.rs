//! Concurrency limits (`rate_limit.concurrency`): holds acquired at a request's start, given
//! back by its release or its hold timeout; hostile releases change nothing.

use super::*;
use sluice_core::descriptor::Hold;

const HOLDS: &str = r#"
domains:
  - domain: d
    descriptors:
      - key: tenant
        rate_limit: {concurrency: 3, hold_timeout: 10s, name: in_flight}
      - key: local_tenant
        rate_limit: {concurrency: 3, hold_timeout: 10s, mode: local, name: local_in_flight}
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
"#;

fn holding_engine(clock: &ManualClock, settings: EngineSettings) -> Engine {
    Engine::new(
        parse_config(HOLDS).expect("config").rules,
        MemoryStore::new(clock.clone()),
        Arc::new(clock.clone()),
        settings,
        EngineMetrics::unregistered(),
    )
}

fn acquire(key: &str, value: &str) -> Descriptor {
    let mut d = d(&[(key, value)]);
    d.hold = Hold::Acquire;
    d
}

fn release(key: &str, value: &str, token: u64) -> Descriptor {
    let mut d = d(&[(key, value)]);
    d.hold = Hold::Release(token);
    d
}

/// Acquires one slot of `key=value`: the token if admitted.
async fn take(e: &Engine, key: &str, value: &str) -> Option<u64> {
    let dec = ask(e, &[acquire(key, value)]).await;
    assert_eq!(
        dec.overall == Code::Ok,
        dec.hold.is_some(),
        "a token iff admitted"
    );
    dec.hold
}

async fn give(e: &Engine, key: &str, value: &str, token: u64) -> u32 {
    ask(e, &[release(key, value, token)]).await.released
}

fn releases(e: &Engine, outcome: &str) -> u64 {
    e.leaser
        .metrics
        .hold_releases
        .with_label_values(&[outcome])
        .get()
}

#[tokio::test]
async fn the_n_plus_first_in_flight_is_denied_until_one_ends() {
    for key in ["tenant", "local_tenant"] {
        let clock = ManualClock::at(1);
        let e = holding_engine(&clock, EngineSettings::default());
        let mut tokens = Vec::new();
        for _ in 0..3 {
            tokens.push(take(&e, key, "a").await.expect("room"));
        }
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), 3, "{key}: one token per request");
        let denied = ask(&e, &[acquire(key, "a")]).await;
        assert_eq!(denied.overall, Code::OverLimit, "{key}: the fourth");
        assert_eq!(denied.outcomes[0].denial, Some(Denial::Empty));
        assert_eq!(denied.hold, None);
        assert!(take(&e, key, "b").await.is_some(), "{key}: another tenant");
        // Time alone gives nothing back (no refill).
        clock.advance_millis(5_000);
        assert!(
            take(&e, key, "a").await.is_none(),
            "{key}: still 3 in flight"
        );
        assert_eq!(give(&e, key, "a", tokens[1]).await, 1, "{key}");
        assert!(take(&e, key, "a").await.is_some(), "{key}: one ended");
        assert!(take(&e, key, "a").await.is_none(), "{key}: full again");
    }
}

#[tokio::test]
async fn a_release_gives_back_only_a_hold_it_names_on_its_own_key() {
    let clock = ManualClock::at(1);
    let e = holding_engine(&clock, EngineSettings::default());
    let mine = take(&e, "tenant", "a").await.expect("room");
    let theirs = take(&e, "tenant", "b").await.expect("room");
    take(&e, "tenant", "a").await.expect("room");
    take(&e, "tenant", "a").await.expect("room");
    // Another tenant's token, a made-up one, a garbage value (0), mine on another key.
    assert_eq!(give(&e, "tenant", "a", theirs).await, 0);
    assert_eq!(give(&e, "tenant", "a", mine ^ 1).await, 0);
    assert_eq!(give(&e, "tenant", "a", 0).await, 0);
    assert_eq!(give(&e, "tenant", "c", mine).await, 0);
    assert_eq!(
        give(&e, "user", "a", mine).await,
        0,
        "a rate limit holds nothing"
    );
    assert!(take(&e, "tenant", "a").await.is_none(), "still 3 in flight");
    // Released twice: the second finds nothing, and adds no fourth slot.
    assert_eq!(give(&e, "tenant", "a", mine).await, 1);
    assert_eq!(give(&e, "tenant", "a", mine).await, 0);
    assert!(take(&e, "tenant", "a").await.is_some());
    assert!(take(&e, "tenant", "a").await.is_none(), "3, not 4");
    assert_eq!(releases(&e, "released"), 1);
    assert_eq!(releases(&e, "unknown"), 6);
}

#[tokio::test]
async fn a_hold_never_released_comes_back_at_its_hold_timeout_and_only_once() {
    for key in ["tenant", "local_tenant"] {
        let clock = ManualClock::at(1);
        let e = holding_engine(&clock, EngineSettings::default());
        let first = take(&e, key, "a").await.expect("room");
        clock.advance_millis(5_000);
        take(&e, key, "a").await.expect("room");
        take(&e, key, "a").await.expect("room");
        clock.advance_millis(4_999);
        e.sweep().await;
        assert!(take(&e, key, "a").await.is_none(), "{key}: not yet");
        clock.advance_millis(1);
        e.sweep().await;
        assert!(
            take(&e, key, "a").await.is_some(),
            "{key}: the first lapsed"
        );
        assert!(take(&e, key, "a").await.is_none(), "{key}: only the first");
        let expired = e
            .leaser
            .metrics
            .holds_expired
            .with_label_values(&[if key == "tenant" {
                "in_flight"
            } else {
                "local_in_flight"
            }]);
        assert_eq!(expired.get(), 1, "{key}");
        // Its late release finds nothing: the slot came back once.
        assert_eq!(give(&e, key, "a", first).await, 0, "{key}");
        assert!(take(&e, key, "a").await.is_none(), "{key}: still 3");
    }
}

#[tokio::test]
async fn a_plain_descriptor_only_asks_whether_one_more_fits() {
    let clock = ManualClock::at(1);
    let e = holding_engine(&clock, EngineSettings::default());
    let check = [d(&[("tenant", "a")])];
    for _ in 0..10 {
        let dec = ask(&e, &check).await;
        assert_eq!((dec.overall, dec.hold), (Code::Ok, None), "takes nothing");
    }
    for _ in 0..3 {
        take(&e, "tenant", "a").await.expect("room");
    }
    assert_eq!(ask(&e, &check).await.overall, Code::OverLimit, "full");
}

#[tokio::test]
async fn a_hold_is_all_or_nothing_with_the_requests_other_limits() {
    let clock = ManualClock::at(1);
    let e = holding_engine(&clock, EngineSettings::default());
    let both = [acquire("tenant", "a"), d(&[("user", "u")])];
    assert!(ask(&e, &both).await.hold.is_some());
    assert!(ask(&e, &both).await.hold.is_some());
    let denied = ask(&e, &both).await;
    assert_eq!(
        (denied.overall, denied.hold),
        (Code::OverLimit, None),
        "user over"
    );
    // The denied request took no slot: one is left.
    assert!(take(&e, "tenant", "a").await.is_some());
    assert!(take(&e, "tenant", "a").await.is_none());
}

#[tokio::test]
async fn one_request_acquiring_a_key_twice_holds_two_slots_under_one_token() {
    let clock = ManualClock::at(1);
    let e = holding_engine(&clock, EngineSettings::default());
    let twice = ask(&e, &[acquire("tenant", "a"), acquire("tenant", "a")]).await;
    let token = twice.hold.expect("room for 2");
    assert!(take(&e, "tenant", "a").await.is_some());
    assert!(take(&e, "tenant", "a").await.is_none(), "2 + 1");
    assert_eq!(give(&e, "tenant", "a", token).await, 1);
    assert!(take(&e, "tenant", "a").await.is_some());
    assert!(take(&e, "tenant", "a").await.is_some(), "both came back");
}

#[tokio::test]
async fn hostile_costs_and_floods_are_bounded() {
    let clock = ManualClock::at(1);
    let settings = EngineSettings {
        max_holds: 4,
        ..EngineSettings::default()
    };
    let e = holding_engine(&clock, settings);
    // u32::MAX slots at once: more than the limit can ever hold.
    let mut huge = acquire("tenant", "a");
    huge.hits_addend = Some(u64::from(u32::MAX));
    let dec = ask(&e, &[huge]).await;
    assert_eq!(dec.outcomes[0].denial, Some(Denial::CostAboveBurst));
    assert_eq!(dec.hold, None);
    // A flood of holds never released: at most max_holds are kept, then new ones are refused
    // (not a crash, not unbounded memory), until the hold timeout frees them.
    let mut kept = 0;
    for tenant in 0..10 {
        kept += usize::from(take(&e, "tenant", &tenant.to_string()).await.is_some());
    }
    assert_eq!(kept, 4);
    let refused = ask(&e, &[acquire("tenant", "x")]).await;
    assert_eq!(refused.outcomes[0].denial, Some(Denial::NoRoom));
    clock.advance_millis(10_000);
    e.sweep().await;
    assert_eq!(e.holds_kept(), 0, "all lapsed");
    assert!(take(&e, "tenant", "x").await.is_some());
}

#[tokio::test]
async fn keys_with_holds_are_not_evicted() {
    let clock = ManualClock::at(1);
    let settings = EngineSettings {
        max_keys: 2,
        idle_timeout: Duration::from_secs(1),
        ..EngineSettings::default()
    };
    let e = holding_engine(&clock, settings);
    let token = take(&e, "local_tenant", "a").await.expect("room");
    clock.advance_millis(5_000);
    e.sweep().await;
    assert_eq!(e.tracked_keys(), 1, "idle, but a request is in flight");
    assert_eq!(give(&e, "local_tenant", "a", token).await, 1, "found");
}

/// Two sidecars (engines) on one store: random acquires, releases (of real, released and
/// made-up tokens), time, sweeps. Never more than N holds in flight on a key across both; every
/// hold given back once; and once all are given back, N fit again (no slot lost).
#[test]
fn never_more_than_n_in_flight_and_no_slot_lost() {
    use proptest::prelude::*;
    #[derive(Debug, Clone)]
    enum Op {
        Acquire(usize, u8),
        Release(usize, usize),
        Bogus(usize, u64),
        Advance(u64),
        Sweep(usize),
    }
    let op = prop_oneof![
        4 => (0..2usize, 0..2u8).prop_map(|(e, t)| Op::Acquire(e, t)),
        3 => (0..2usize, any::<usize>()).prop_map(|(e, i)| Op::Release(e, i)),
        1 => (0..2usize, any::<u64>()).prop_map(|(e, t)| Op::Bogus(e, t)),
        1 => (0..4_000u64).prop_map(Op::Advance),
        1 => (0..2usize).prop_map(Op::Sweep),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    proptest!(ProptestConfig::with_cases(64), |(ops in proptest::collection::vec(op, 1..80))| {
        runtime.block_on(async {
            let clock = ManualClock::at(1);
            let store = MemoryStore::new(clock.clone());
            let sidecar = || Engine::new(
                parse_config(HOLDS).expect("config").rules,
                store.clone(),
                Arc::new(clock.clone()),
                EngineSettings::default(),
                EngineMetrics::unregistered(),
            );
            let engines = [sidecar(), sidecar()];
            // Holds in flight: (engine, tenant, token, taken at).
            let mut live: Vec<(usize, u8, u64, u64)> = Vec::new();
            for op in ops {
                let now = clock.now_micros();
                // Holds past their timeout may have been given back by a sweep: as far as the
                // limit goes, they no longer count once a sweep ran (below).
                match op {
                    Op::Acquire(i, t) => {
                        if let Some(token) = take(&engines[i], "tenant", &t.to_string()).await {
                            live.push((i, t, token, now));
                        }
                    }
                    Op::Release(i, at) if !live.is_empty() => {
                        let (e, t, token, _) = live.remove(at % live.len());
                        // Released on its own sidecar (Envoy calls the one it acquired on);
                        // on the other, it finds nothing.
                        prop_assert_eq!(give(&engines[1 - e], "tenant", &t.to_string(), token).await, 0);
                        let _ = give(&engines[e], "tenant", &t.to_string(), token).await;
                        let _ = i;
                    }
                    Op::Release(..) => {}
                    Op::Bogus(i, token) => {
                        let real = live.iter().any(|l| l.2 == token);
                        if !real {
                            prop_assert_eq!(give(&engines[i], "tenant", "0", token).await, 0);
                        }
                    }
                    Op::Advance(ms) => clock.advance_millis(ms),
                    Op::Sweep(i) => {
                        engines[i].sweep().await;
                        let now = clock.now_micros();
                        live.retain(|&(e, _, _, at)| e != i || now - at < 10_000_000);
                    }
                }
                for t in 0..2u8 {
                    let n = live.iter().filter(|l| l.1 == t).count();
                    prop_assert!(n <= 3, "tenant {}: {} in flight", t, n);
                }
            }
            // Everything given back (released, or lapsed and swept), leases returned: N fit.
            for (e, t, token, _) in std::mem::take(&mut live) {
                give(&engines[e], "tenant", &t.to_string(), token).await;
            }
            clock.advance_millis(20_000);
            for e in &engines {
                e.sweep().await;
            }
            for t in 0..2u8 {
                let mut fit = 0;
                for i in 0..6 {
                    fit += usize::from(take(&engines[i % 2], "tenant", &t.to_string()).await.is_some());
                }
                prop_assert_eq!(fit, 3, "tenant {}", t);
            }
            Ok(())
        })?;
    });
}
