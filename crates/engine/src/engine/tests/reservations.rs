//! Reservations (`reserve:` on a post-paid rule): an estimate paid when a request starts,
//! settled against the usage reported when it ends.

use super::*;
use sluice_core::descriptor::{Hold, LimitOverride};

const RESERVING: &str = r#"
domains:
  - domain: d
    descriptors:
      - key: budget
        rate_limit:
          unit: hour
          requests_per_unit: 1000
          charge: post_paid
          reserve: {default: 100, max: 500}
          hold_timeout: 10s
          name: budget
"#;

fn reserving_engine(clock: &ManualClock) -> (Engine, Arc<MemoryStore<ManualClock>>) {
    let store = MemoryStore::new(clock.clone());
    let e = Engine::new(
        parse_config(RESERVING).expect("config").rules,
        store.clone(),
        Arc::new(clock.clone()),
        EngineSettings::default(),
        EngineMetrics::unregistered(),
    );
    (e, store)
}

/// Reserves for tenant `t` (estimate: the `sluice-estimate` entry, if any): the token.
async fn reserve(e: &Engine, t: &str, estimate: Option<u64>) -> Option<u64> {
    reserve_with(e, t, estimate, None).await
}

/// [`reserve`], the descriptor carrying a caller's `limit` override if given.
async fn reserve_with(
    e: &Engine,
    t: &str,
    estimate: Option<u64>,
    limit: Option<LimitOverride>,
) -> Option<u64> {
    let mut d = d(&[("budget", t)]);
    d.hold = Hold::Acquire;
    d.estimate = estimate;
    d.limit_override = limit;
    let dec = ask(e, &[d]).await;
    assert_eq!(dec.overall == Code::Ok, dec.hold.is_some());
    dec.hold
}

/// Settles `token` with `used` tokens reported (Envoy's stream-done entry).
async fn settle(e: &Engine, t: &str, token: u64, used: u64) -> Decision {
    settle_with(e, t, token, used, None).await
}

/// [`settle`], the descriptor carrying a caller's `limit` override if given.
async fn settle_with(
    e: &Engine,
    t: &str,
    token: u64,
    used: u64,
    limit: Option<LimitOverride>,
) -> Decision {
    let mut d = d(&[("budget", t)]);
    d.hold = Hold::Release(token);
    d.hits_addend = Some(used);
    d.limit_override = limit;
    ask(e, &[d]).await
}

/// What the global bucket holds once every lease and pending usage went back (the clock does
/// not move in these tests, so nothing refills).
async fn left(e: &Engine, store: &MemoryStore<ManualClock>, t: &str) -> f64 {
    e.return_all_leases().await;
    let view = e.quota("d", &[Entry::new("budget", t)]).await;
    assert_eq!(view.local_lease, 0);
    let _ = store;
    view.global_remaining.expect("read")
}

#[tokio::test]
async fn a_reservation_pays_its_estimate_up_front_and_settles_to_the_usage() {
    let clock = ManualClock::at(1);
    let (e, store) = reserving_engine(&clock);
    // 10 default reservations of 100 fit in 1 000; the 11th is denied before it runs.
    let mut tokens = Vec::new();
    for _ in 0..10 {
        tokens.push(reserve(&e, "acme", None).await.expect("room"));
    }
    assert!(reserve(&e, "acme", None).await.is_none(), "1 000 reserved");
    // Over-estimated: used 30 of 100, 70 come back; not enough for another 100.
    let done = settle(&e, "acme", tokens[0], 30).await;
    assert_eq!((done.overall, done.released), (Code::Ok, 1));
    assert!(reserve(&e, "acme", None).await.is_none(), "70 free");
    settle(&e, "acme", tokens[1], 0).await;
    let again = reserve(&e, "acme", None).await.expect("170 free");
    // Under-estimated: used 400 of 100: the 300 beyond are charged (into debt).
    settle(&e, "acme", tokens[2], 400).await;
    for t in tokens.iter().skip(3).chain([&again]) {
        settle(&e, "acme", *t, 100).await;
    }
    // Charged = reported: 30 + 0 + 400 + 8 × 100.
    assert_eq!(left(&e, &store, "acme").await, 1000.0 - 1230.0);
    let over = e
        .leaser
        .metrics
        .reservation_errors
        .with_label_values(&["over"]);
    let under = e
        .leaser
        .metrics
        .reservation_errors
        .with_label_values(&["under"]);
    // 11 settled: 10 at or above their usage (70, 100 and nine exact), 1 under by 300.
    assert_eq!((over.get_sample_count(), under.get_sample_count()), (10, 1));
    assert_eq!(
        (over.get_sample_sum(), under.get_sample_sum()),
        (170.0, 300.0)
    );
}

#[tokio::test]
async fn estimates_are_the_requests_own_cut_to_the_max_and_usage_without_one_is_charged_in_full() {
    let clock = ManualClock::at(1);
    let (e, store) = reserving_engine(&clock);
    let named = reserve(&e, "acme", Some(250)).await.expect("250");
    let huge = reserve(&e, "acme", Some(u64::MAX))
        .await
        .expect("cut to 500");
    let zero = reserve(&e, "acme", Some(0)).await.expect("at least 1");
    // 250 + 500 + 1 reserved: 249 left, so a default of 100 fits twice and not a third time.
    reserve(&e, "acme", None).await.expect("100");
    reserve(&e, "acme", None).await.expect("100");
    assert!(reserve(&e, "acme", None).await.is_none(), "49 left");
    for t in [named, huge, zero] {
        settle(&e, "acme", t, 0).await;
    }
    assert!(reserve(&e, "acme", None).await.is_some(), "refunded");
    // A settle that names no reservation (made up, already settled, another tenant's) is a
    // plain report: its usage is charged in full, never lost.
    let fresh = left(&e, &store, "globex").await;
    assert_eq!(fresh, 1000.0);
    settle(&e, "globex", named, 60).await;
    settle(&e, "globex", 12345, 40).await;
    assert_eq!(left(&e, &store, "globex").await, 900.0);
}

#[tokio::test]
async fn a_reservation_never_settled_stays_charged_after_its_hold_timeout() {
    let clock = ManualClock::at(1);
    let (e, store) = reserving_engine(&clock);
    let token = reserve(&e, "acme", Some(300)).await.expect("room");
    clock.advance_millis(10_000);
    e.sweep().await;
    assert_eq!(e.holds_kept(), 0, "dropped at its hold timeout");
    let expired = e
        .leaser
        .metrics
        .holds_expired
        .with_label_values(&["budget"]);
    assert_eq!(expired.get(), 1);
    // A settle after that finds nothing: its usage is charged in full, on top of the estimate.
    settle(&e, "acme", token, 50).await;
    let refill = 1000.0 * 10.0 / 3600.0;
    let now_left = left(&e, &store, "acme").await;
    assert!(
        (now_left - (1000.0_f64 - 350.0 + refill).min(1000.0)).abs() < 1e-6,
        "{now_left}"
    );
}

/// Random reservations, settles (of real, settled and made-up tokens) and plain reports on one
/// key, the clock frozen and the budget large enough that nothing is denied: once every
/// reservation is settled, the bucket was charged exactly what was reported.
#[test]
fn reservations_conserve_charged_equals_reported() {
    use proptest::prelude::*;
    // Each with or without a caller `limit` override (it never changes a post-paid budget:
    // before, an overridden acquire reserved nothing and an overridden settle charged nothing).
    type Override = Option<u64>;
    #[derive(Debug, Clone)]
    enum Op {
        Reserve(Option<u64>, Override),
        Settle(usize, u64, Override),
        Stray(u64, Override),
    }
    let limit = || proptest::option::of(0..2_000u64);
    let op = prop_oneof![
        3 => (proptest::option::of(0..2_000u64), limit()).prop_map(|(n, o)| Op::Reserve(n, o)),
        3 => (any::<usize>(), 0..1_000u64, limit()).prop_map(|(i, u, o)| Op::Settle(i, u, o)),
        1 => (0..1_000u64, limit()).prop_map(|(u, o)| Op::Stray(u, o)),
    ];
    let overridden = |o: Override| {
        o.map(|requests_per_unit| sluice_core::descriptor::LimitOverride {
            requests_per_unit,
            unit: sluice_core::Unit::Minute,
        })
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    const BIG: &str = r#"
domains:
  - domain: d
    descriptors:
      - key: budget
        rate_limit: {unit: hour, requests_per_unit: 1000000, charge: post_paid, reserve: {default: 100, max: 500}, name: budget}
"#;
    proptest!(ProptestConfig::with_cases(64), |(ops in proptest::collection::vec(op, 1..60))| {
        runtime.block_on(async {
            let clock = ManualClock::at(1);
            let store = MemoryStore::new(clock.clone());
            let e = Engine::new(
                parse_config(BIG).expect("config").rules,
                store.clone(),
                Arc::new(clock.clone()),
                EngineSettings::default(),
                EngineMetrics::unregistered(),
            );
            let mut open = Vec::new();
            let mut reported = 0u64;
            for op in ops {
                match op {
                    Op::Reserve(estimate, o) => {
                        let token = reserve_with(&e, "t", estimate, overridden(o)).await;
                        prop_assert!(token.is_some(), "never denied here");
                        open.push(token.unwrap_or(0));
                    }
                    Op::Settle(i, used, o) if !open.is_empty() => {
                        let token = open.remove(i % open.len());
                        let done = settle_with(&e, "t", token, used, overridden(o)).await;
                        prop_assert_eq!(done.released, 1, "found, with or without an override");
                        reported += used;
                    }
                    Op::Settle(..) => {}
                    Op::Stray(used, o) => {
                        settle_with(&e, "t", 0, used, overridden(o)).await;
                        reported += used;
                    }
                }
            }
            for token in open {
                settle(&e, "t", token, 7).await;
                reported += 7;
            }
            prop_assert_eq!(left(&e, &store, "t").await, 1_000_000.0 - reported as f64);
            Ok(())
        })?;
    });
}
