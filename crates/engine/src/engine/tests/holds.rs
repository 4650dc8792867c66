//! Concurrency limits (`rate_limit.concurrency`): holds acquired at a request's start, given
//! back by its release or its hold timeout; hostile releases change nothing.

use super::*;
use sluice_core::bucket::Algorithm;
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
      - key: job
        rate_limits:
          - {concurrency: 2, hold_timeout: 10s, name: jobs_in_flight}
          - {unit: second, requests_per_unit: 5, name: jobs_per_second}
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

/// `d` with Envoy's per-descriptor `limit` override of `requests_per_unit` per `unit`.
fn with_override(mut d: Descriptor, requests_per_unit: u64, unit: sluice_core::Unit) -> Descriptor {
    d.limit_override = Some(sluice_core::descriptor::LimitOverride {
        requests_per_unit,
        unit,
    });
    d
}

/// Found by a security review: with `concurrency: 3`, six acquires carrying an override of
/// 1000/SECOND (Envoy sends one whenever a `rate_limits` entry reads `limit` from dynamic
/// metadata) were all admitted with no token, and three plain acquires passed too: 9 in flight.
/// An override changes a rate; a concurrency limit has none, and keeps its N.
#[tokio::test]
async fn an_override_never_turns_a_concurrency_limit_into_a_rate() {
    for key in ["tenant", "local_tenant"] {
        let clock = ManualClock::at(1);
        let e = holding_engine(&clock, EngineSettings::default());
        let overridden = with_override(acquire(key, "a"), 1000, sluice_core::Unit::Second);
        let mut tokens = Vec::new();
        for _ in 0..6 {
            let dec = ask(&e, std::slice::from_ref(&overridden)).await;
            assert_eq!(
                dec.overall == Code::Ok,
                dec.hold.is_some(),
                "{key}: a token iff admitted"
            );
            let limit = dec.outcomes[0].limit.expect("a limit");
            assert_eq!(
                (limit.rate.algorithm, limit.rate.burst),
                (Algorithm::Concurrency, 3),
                "{key}"
            );
            tokens.extend(dec.hold);
        }
        assert_eq!(
            tokens.len(),
            3,
            "{key}: 3 slots, whatever the override says"
        );
        for _ in 0..3 {
            assert!(
                take(&e, key, "a").await.is_none(),
                "{key}: plain acquires find it full"
            );
        }
        // A release finds its hold with or without the override.
        let release_overridden =
            with_override(release(key, "a", tokens[0]), 7, sluice_core::Unit::Minute);
        assert_eq!(ask(&e, &[release_overridden]).await.released, 1, "{key}");
        assert_eq!(give(&e, key, "a", tokens[1]).await, 1, "{key}");
        assert!(take(&e, key, "a").await.is_some(), "{key}");
        assert!(take(&e, key, "a").await.is_some(), "{key}");
        assert!(take(&e, key, "a").await.is_none(), "{key}: 3 again");
    }
}

/// On a descriptor with a concurrency limit and a rate, the override changes the rate (its
/// first limit that has one), and the acquire still takes a slot.
#[tokio::test]
async fn an_override_beside_a_concurrency_limit_changes_the_rate_only() {
    let clock = ManualClock::at(1);
    let e = holding_engine(&clock, EngineSettings::default());
    let hourly = with_override(acquire("job", "j"), 1, sluice_core::Unit::Hour);
    let first = ask(&e, std::slice::from_ref(&hourly)).await;
    assert!(first.hold.is_some(), "admitted, holding a slot");
    let second = ask(&e, &[hourly]).await;
    assert_eq!(
        (second.overall, second.hold),
        (Code::OverLimit, None),
        "1 an hour"
    );
    let rate = second.outcomes[0].limit.expect("the denying limit").rate;
    assert_eq!(
        (rate.requests_per_unit, rate.unit),
        (1, sluice_core::Unit::Hour)
    );
    // The override spent the rule's bucket (one bucket, whatever the rate); a second on, the
    // rule's own 5 a second refilled it.
    clock.advance_millis(1_000);
    assert!(take(&e, "job", "j").await.is_some(), "the rule's own rate");
    let full = ask(&e, &[acquire("job", "j")]).await;
    assert_eq!(full.hold, None, "2 in flight");
    let limit = full.outcomes[0].limit.expect("the denying limit");
    assert_eq!(limit.rate.algorithm, Algorithm::Concurrency);
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

mod props;
