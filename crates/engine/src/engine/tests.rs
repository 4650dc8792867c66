use super::*;
use crate::key;
use crate::memory::MemoryStore;
use crate::testing::{Call, Forwarding, Mode};
use sluice_core::Descriptor;
use sluice_core::ManualClock;
use sluice_core::bucket::Rate;
use sluice_core::config::parse_config;

const CONFIG: &str = r#"
domains:
  - domain: d
    descriptors:
      - key: ip
        rate_limit: {unit: second, requests_per_unit: 10, name: per_ip}
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
      - key: shadow
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1, name: shadowed}
      - key: local
        rate_limit: {unit: second, requests_per_unit: 3, mode: local, name: local}
      - key: exact
        rate_limit: {unit: second, requests_per_unit: 3, mode: exact, name: exact}
      - key: old
        rate_limit: {unit: second, requests_per_unit: 1, name: old}
      - key: new
        rate_limit: {unit: second, requests_per_unit: 100, name: new, replaces: [{name: old}]}
      - key: allow_when_down
        rate_limit: {unit: second, requests_per_unit: 1, fallback: allow}
      - key: deny_when_down
        rate_limit: {unit: second, requests_per_unit: 1, fallback: deny}
      - key: tokens
        rate_limit: {unit: second, requests_per_unit: 10, charge: post_paid}
      - key: local_tokens
        rate_limit: {unit: second, requests_per_unit: 10, mode: local, charge: post_paid}
      - key: budget
        rate_limit: {unit: minute, requests_per_unit: 1000, charge: post_paid}
"#;

fn rules() -> RuleSet {
    parse_config(CONFIG).expect("config").rules
}

fn engine_on(store: Arc<dyn GlobalStore>, clock: &ManualClock, settings: EngineSettings) -> Engine {
    Engine::new(
        rules(),
        store,
        Arc::new(clock.clone()),
        settings,
        EngineMetrics::unregistered(),
    )
}

/// `n` engines ("sidecars") with the rules of `config` and `settings` on one `store` and
/// `clock`.
fn fleet_with(
    config: &str,
    store: &Arc<Forwarding>,
    clock: &ManualClock,
    n: usize,
    settings: &EngineSettings,
) -> Vec<Engine> {
    (0..n)
        .map(|_| {
            Engine::new(
                parse_config(config).expect("config").rules,
                store.clone(),
                Arc::new(clock.clone()),
                settings.clone(),
                EngineMetrics::unregistered(),
            )
        })
        .collect()
}

/// How many cases a property draws: `ci`, or `PROPTEST_CASES` for a search (a config's own
/// `cases` wins over the variable, so the properties with fewer than proptest's 256 read it
/// here).
fn cases(ci: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ci)
}

/// Token leases only (`engine.rate_lease_ttl: off`), every other setting a default: the
/// policy before leases of rate, still one setting away, tested beside them.
fn token_leases() -> EngineSettings {
    EngineSettings {
        rate_lease_ttl: None,
        ..EngineSettings::default()
    }
}

/// Leases of rate on (`engine.rate_lease_ttl: 10s`, the default), every other setting a
/// default.
fn rate_leases() -> EngineSettings {
    EngineSettings {
        rate_lease_ttl: Some(std::time::Duration::from_secs(10)),
        ..EngineSettings::default()
    }
}

/// Runs `run` to its end on a runtime of its own (a property test's case is a plain function).
fn on_own_runtime<T>(run: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(run)
}

fn engine(clock: &ManualClock) -> (Engine, Arc<MemoryStore<ManualClock>>) {
    let store = MemoryStore::new(clock.clone());
    (
        engine_on(store.clone(), clock, EngineSettings::default()),
        store,
    )
}

fn d(pairs: &[(&str, &str)]) -> Descriptor {
    Descriptor::of(pairs.iter().copied())
}

async fn ask(e: &Engine, ds: &[Descriptor]) -> Decision {
    e.decide(&RateLimitRequest {
        domain: "d",
        descriptors: ds,
        hits_addend: 0,
    })
    .await
}

/// The store key and lease of the only key `e` tracks.
fn only_key(e: &Engine) -> (String, u64) {
    let mut found = Vec::new();
    e.table
        .for_each(|k, b| found.push((key::store_key_of(b.identity, k), b.lock().lease)));
    assert_eq!(found.len(), 1, "one key tracked");
    found.remove(0)
}

async fn admitted(e: &Engine, ds: &[Descriptor], n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(ask(e, ds).await.overall == Code::Ok);
    }
    ok
}

#[tokio::test]
async fn admits_the_burst_then_refills_at_the_rate() {
    let clock = ManualClock::at(1);
    let (e, _) = engine(&clock);
    let ip = [d(&[("ip", "1.2.3.4")])];
    assert_eq!(admitted(&e, &ip, 25).await, 10);
    let denied = ask(&e, &ip).await;
    let o = denied.outcomes[0];
    assert_eq!((o.code, o.remaining), (Code::OverLimit, 0));
    assert_eq!(o.retry_after, Some(Duration::from_millis(100)));
    assert_eq!(o.until_full, Duration::from_secs(1));
    clock.advance_millis(100);
    assert_eq!(admitted(&e, &ip, 5).await, 1, "one token per 100 ms");
    clock.advance_millis(5_000);
    assert_eq!(admitted(&e, &ip, 25).await, 10, "never more than the burst");
    assert_eq!(
        admitted(&e, &[d(&[("ip", "other")])], 11).await,
        10,
        "keys are independent"
    );
}

#[tokio::test]
async fn all_or_nothing_across_descriptors() {
    let clock = ManualClock::at(1);
    let (e, _) = engine(&clock);
    let user = d(&[("user", "u")]);
    let ip = d(&[("ip", "i")]);
    assert_eq!(admitted(&e, std::slice::from_ref(&user), 2).await, 2);
    let both = ask(&e, &[ip.clone(), user.clone()]).await;
    assert_eq!(both.overall, Code::OverLimit);
    assert_eq!(both.outcomes[0].code, Code::Ok, "the ip bucket could pay");
    assert_eq!(both.outcomes[1].code, Code::OverLimit);
    assert_eq!(
        admitted(&e, &[ip], 20).await,
        10,
        "the denied request charged nothing"
    );
}

#[tokio::test]
async fn hits_addend_charges_several_and_zero_peeks() {
    let clock = ManualClock::at(1);
    let (e, _) = engine(&clock);
    let ip = vec![d(&[("ip", "x")])];
    let five = e
        .decide(&RateLimitRequest {
            domain: "d",
            descriptors: &ip,
            hits_addend: 5,
        })
        .await;
    assert_eq!((five.overall, five.outcomes[0].remaining), (Code::Ok, 5));
    let mut peek = ip.clone();
    peek[0].hits_addend = Some(0);
    for _ in 0..3 {
        let p = ask(&e, &peek).await;
        assert_eq!(
            (p.overall, p.outcomes[0].remaining),
            (Code::Ok, 5),
            "peeks charge nothing"
        );
    }
    let six = e
        .decide(&RateLimitRequest {
            domain: "d",
            descriptors: &ip,
            hits_addend: 6,
        })
        .await;
    assert_eq!(
        six.overall,
        Code::OverLimit,
        "5 left, 6 asked: all or nothing"
    );
    assert_eq!(admitted(&e, &ip, 10).await, 5);
    assert_eq!(
        ask(&e, &peek).await.overall,
        Code::OverLimit,
        "a peek on an empty bucket says so"
    );
}

#[tokio::test]
async fn shadow_mode_reports_ok_but_flags_would_deny() {
    let clock = ManualClock::at(1);
    let (e, _) = engine(&clock);
    let s = [d(&[("shadow", "a")])];
    let first = ask(&e, &s).await;
    assert!(first.overall == Code::Ok && !first.outcomes[0].shadow_over_limit);
    let second = ask(&e, &s).await;
    assert_eq!(second.overall, Code::Ok);
    assert!(second.outcomes[0].shadow_over_limit);
}

#[tokio::test]
async fn replaced_rules_do_not_apply() {
    let clock = ManualClock::at(1);
    let (e, _) = engine(&clock);
    let both = [d(&[("old", "a")]), d(&[("new", "a")])];
    assert_eq!(
        admitted(&e, &both, 5).await,
        5,
        "`old` (1/s) is replaced by `new`"
    );
    assert_eq!(
        admitted(&e, &[d(&[("old", "a")])], 5).await,
        1,
        "alone, `old` applies"
    );
}

#[tokio::test]
async fn unknown_domains_and_unmatched_descriptors_are_ok() {
    let clock = ManualClock::at(1);
    let (e, store) = engine(&clock);
    let ds = [d(&[("nothing", "here")])];
    let unknown = e
        .decide(&RateLimitRequest {
            domain: "zzz",
            descriptors: &ds,
            hits_addend: 0,
        })
        .await;
    assert!(
        unknown.unknown_domain
            && unknown.overall == Code::Ok
            && unknown.outcomes[0].limit.is_none()
    );
    let unmatched = ask(&e, &ds).await;
    assert!(!unmatched.unknown_domain && unmatched.outcomes[0].limit.is_none());
    assert_eq!((e.tracked_keys(), store.len()), (0, 0));
}

fn overridden(pairs: &[(&str, &str)]) -> Vec<Descriptor> {
    let mut ds = vec![d(pairs)];
    ds[0].limit_override = Some(sluice_core::descriptor::LimitOverride {
        requests_per_unit: 3,
        unit: sluice_core::Unit::Hour,
    });
    ds
}

/// Envoy's per-descriptor `limit` replaces a matched rule's limit; on a descriptor that matches
/// no rule it applies only with `limit_overrides: any` (10 such requests could create a year's
/// worth of store keys for descriptors the config does not know).
#[tokio::test]
async fn limit_overrides_from_the_caller_apply_to_configured_rules() {
    let clock = ManualClock::at(1);
    let (e, store) = engine(&clock);
    let matched = overridden(&[("ip", "o")]);
    assert_eq!(admitted(&e, &matched, 5).await, 3, "3 per hour, not 10/s");
    assert_eq!(
        ask(&e, &matched).await.outcomes[0].limit.map(|l| l.rule),
        Some(None)
    );
    let unmatched = overridden(&[("anything", "v")]);
    let keys = (e.tracked_keys(), store.len());
    assert_eq!(admitted(&e, &unmatched, 5).await, 5, "ignored");
    assert_eq!(ask(&e, &unmatched).await.outcomes[0].limit, None);
    assert_eq!((e.tracked_keys(), store.len()), keys, "no key made for it");

    let any = sluice_core::config::parse_config(&format!(
        "limit_overrides: any\ndomains:\n  - {}",
        "{domain: d, descriptors: [{key: ip, rate_limit: {unit: second, requests_per_unit: 10}}]}"
    ))
    .expect("config")
    .rules;
    e.swap_rules(any);
    assert_eq!(
        admitted(&e, &unmatched, 5).await,
        3,
        "with `any`, it applies"
    );
    let ignore = sluice_core::config::parse_config(
        "limit_overrides: ignore\ndomains:\n  - {domain: d, descriptors: [{key: ip, rate_limit: {unit: second, requests_per_unit: 10}}]}",
    )
    .expect("config")
    .rules;
    e.swap_rules(ignore);
    assert_eq!(
        admitted(&e, &overridden(&[("ip", "fresh")]), 12).await,
        10,
        "with `ignore`, the rule's own 10/s"
    );
}

#[tokio::test]
async fn local_mode_never_touches_the_store() {
    let clock = ManualClock::at(1);
    let (e, store) = engine(&clock);
    assert_eq!(admitted(&e, &[d(&[("local", "a")])], 5).await, 3);
    assert_eq!(store.len(), 0);
}

#[tokio::test]
async fn exact_mode_takes_from_the_store_per_decision() {
    let clock = ManualClock::at(1);
    let (e, store) = engine(&clock);
    let ds = [d(&[("exact", "a")])];
    assert_eq!(admitted(&e, &ds, 5).await, 3);
    let (key, _) = only_key(&e);
    let global = store
        .peek(&key, Rate::per_unit(3, sluice_core::Unit::Second))
        .await
        .expect("peek");
    assert_eq!(global, 0.0, "exact mode leases exactly what it spends");
}

/// Two engines on one store (two sidecars on one backend) never admit more than `B + L·t`.
#[tokio::test]
async fn instances_sharing_a_store_never_exceed_the_global_limit() {
    let clock = ManualClock::at(1);
    let store = MemoryStore::new(clock.clone());
    let a = engine_on(store.clone(), &clock, EngineSettings::default());
    let b = engine_on(store.clone(), &clock, EngineSettings::default());
    let ip = [d(&[("ip", "shared")])];
    let mut total = 0usize;
    for step in 0..2_000u64 {
        clock.advance_micros(1_000 + (step * 7_919) % 3_000);
        total += admitted(&a, &ip, 3).await + admitted(&b, &ip, 3).await;
        if step % 97 == 0 {
            a.sweep().await;
        }
        let elapsed = (clock.now_micros() - 1) as f64 / 1e6;
        assert!(
            total as f64 <= 10.0 + 10.0 * elapsed + 1e-9,
            "admitted {total} after {elapsed}s"
        );
    }
    let elapsed = (clock.now_micros() - 1) as f64 / 1e6;
    assert!(
        total as f64 >= 0.95 * (10.0 + 10.0 * elapsed),
        "admitted only {total} of {}",
        10.0 + 10.0 * elapsed
    );
}

#[tokio::test]
async fn unspent_leases_go_back_after_lease_ttl_and_idle_keys_are_evicted() {
    let clock = ManualClock::at(1);
    let store = MemoryStore::new(clock.clone());
    let settings = EngineSettings {
        max_lease_fraction: 0.5,
        lease_horizon: std::time::Duration::from_millis(500),
        ..EngineSettings::default()
    };
    let e = engine_on(store.clone(), &clock, settings);
    let ip = [d(&[("ip", "lease")])];
    // Eight requests in 8 ms: the demand estimate (weighted by time) reads several a second,
    // over a token in a lease horizon of half a second, and the lease grows past the request's
    // own token.
    for _ in 0..8 {
        clock.advance_millis(1);
        ask(&e, &ip).await;
    }
    let (key, held) = only_key(&e);
    let rate = Rate::per_unit(10, sluice_core::Unit::Second);
    assert!(held > 0, "demand grew the lease");
    let before = store.peek(&key, rate).await.expect("peek");
    clock.advance_millis(1_001);
    e.sweep().await;
    let after = store.peek(&key, rate).await.expect("peek");
    assert!(after > before, "returned tokens: {before} -> {after}");
    assert_eq!(only_key(&e).1, 0, "the sidecar holds none of them any more");
    clock.advance_micros(EngineSettings::default().idle_timeout.as_micros() as u64 + 1);
    e.sweep().await;
    assert_eq!(e.tracked_keys(), 0);
}

#[tokio::test]
async fn max_keys_bounds_memory() {
    let clock = ManualClock::at(1);
    let store = MemoryStore::new(clock.clone());
    let e = engine_on(
        store,
        &clock,
        EngineSettings {
            max_keys: 1_000,
            ..EngineSettings::default()
        },
    );
    for i in 0..10_000 {
        clock.advance_micros(10);
        ask(&e, &[d(&[("ip", &i.to_string())])]).await;
        assert!(e.tracked_keys() <= 1_000);
    }
    assert!(
        e.tracked_keys() >= 800,
        "evicts only what it must: {}",
        e.tracked_keys()
    );
}

#[tokio::test]
async fn fallbacks_apply_while_the_store_is_down() {
    let clock = ManualClock::at(1);
    let e = engine_on(
        Forwarding::new(&clock, Mode::Down, 2),
        &clock,
        EngineSettings::default(),
    );
    let share = [d(&[("ip", "z")])];
    assert_eq!(
        admitted(&e, &share, 20).await,
        5,
        "local_share: 10 / 2 instances"
    );
    assert!(ask(&e, &share).await.outcomes[0].fallback);
    assert_eq!(
        admitted(&e, &[d(&[("allow_when_down", "z")])], 20).await,
        20
    );
    assert_eq!(admitted(&e, &[d(&[("deny_when_down", "z")])], 20).await, 0);
    assert!(
        e.leaser
            .metrics
            .store_calls
            .with_label_values(&["lease", "unavailable"])
            .get()
            > 0
    );
}

/// Across an outage a key stays within `B + L·t`: the fallback's bucket starts empty at each
/// grant (the global one held the burst) and what the fallback spent is taken from the global
/// bucket once the store is back. Before, this admitted 40 by 2.3 s against a bound of 33 (a
/// burst from the fallback's full bucket, another from the global bucket refilled meanwhile).
#[tokio::test]
async fn an_outage_adds_no_burst_and_the_fallback_pays_for_what_it_spent() {
    let clock = ManualClock::at(1);
    let store = Forwarding::new(&clock, Mode::Up, 1);
    let e = engine_on(store.clone(), &clock, EngineSettings::default());
    let key = [d(&[("ip", "o")])];
    let mut total = admitted(&e, &key, 30).await;
    assert_eq!(total, 10, "the burst");
    // Past the starved key's retry time, the store goes away.
    clock.advance_millis(300);
    store.set(Mode::Down);
    total += admitted(&e, &key, 30).await;
    clock.advance_millis(2_000);
    let during = admitted(&e, &key, 30).await;
    assert!(during > 0, "the fallback admits during the outage");
    total += during;
    store.set(Mode::Up);
    total += admitted(&e, &key, 30).await;
    assert!(
        total <= 10 + 23,
        "admitted {total} by t = 2.3 s; the bound is 33"
    );
    // No lockout: a second later the key admits its rate again, its debt paid.
    clock.advance_millis(1_000);
    assert!(admitted(&e, &key, 30).await >= 9);
    let mut owed = Vec::new();
    e.table
        .for_each(|_, b| owed.push(b.lock().rare().owed.is_owing()));
    assert_eq!(owed, [false], "paid back");
}

/// A store whose leases take 20 ms (a remote store's round trip), reporting `timeout` as its
/// bound on waiting.
fn slow_store(clock: &ManualClock, timeout: Option<Duration>) -> Arc<Forwarding> {
    let store = Forwarding::up(clock);
    store.delay(Call::Lease, Duration::from_millis(20));
    store.set_timeout(timeout);
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_a_new_key_shares_few_store_calls_and_never_goes_over() {
    let clock = ManualClock::at(1);
    let store = slow_store(&clock, None);
    let e = Arc::new(engine_on(store.clone(), &clock, EngineSettings::default()));
    // 20 requests on each of two new keys, all at once, while each store call takes 20 ms.
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let e = Arc::clone(&e);
            tokio::spawn(async move {
                let value = if i % 2 == 0 { "a" } else { "b" };
                e.decide(&RateLimitRequest {
                    domain: "d",
                    descriptors: &[d(&[("new", value)])],
                    hits_addend: 1,
                })
                .await
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.expect("task").overall == Code::Ok);
    }
    // Single flight: the others wait for the call in flight instead of calling too, then spend
    // from the lease it brought (leases grow with demand, up to 5% of the burst of 100): about
    // a dozen calls here, never one per request (40).
    assert_eq!(store.most_in_flight_per_key(Call::Lease), 1);
    let calls = store.tally(Call::Lease).calls;
    assert!(calls <= 20, "{calls} lease calls for 40 requests on 2 keys");
    // `new` allows 100 per second: all 40 fit, so all 40 pass, also when a token a request saw
    // in the lease went to a concurrent request before it charged (it leases again).
    assert_eq!(admitted, 40);
}

/// Shutdown waits for a background refill still in flight before it hands the leases back: a
/// refill landing after the last return would strand its tokens in a bucket nobody reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_the_tokens_of_refills_still_in_flight() {
    let clock = ManualClock::at(1);
    let store = slow_store(&clock, None);
    let e = Arc::new(engine_on(store.clone(), &clock, EngineSettings::default()));
    let ds = [d(&[("new", "x")])];
    // A cold lease of 50 (the key is far from its limit: half the burst of 100, one instance),
    // then background refills of 5 (5% of the burst) each time the lease is down to half of
    // the last ask: the fourth call, 20 ms long, is a refill in flight.
    let mut spent = 0;
    while store.tally(Call::Lease).calls < 4 {
        assert_eq!(ask(&e, &ds).await.overall, Code::Ok);
        spent += 1;
        // Let a background refill start (it counts its call, then waits 20 ms).
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(spent < 100, "no background refill started");
    }
    assert_eq!(
        store.most_in_flight_per_key(Call::Lease),
        1,
        "the refill is in flight"
    );
    Arc::clone(&e).maintain_until(std::future::ready(())).await;
    // Whatever was still running has landed by now.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (key, held) = only_key(&e);
    assert_eq!(held, 0, "no lease left in the engine");
    let rate = Rate::per_unit(100, sluice_core::Unit::Second);
    let global = store.inner.peek(&key, rate).await.expect("peek");
    assert_eq!(
        global,
        (100 - spent) as f64,
        "every token not spent is back in the store"
    );
}

/// A key far from its limit gets a cold lease (half the burst of 100 with one instance): its next
/// requests make no store call, the lease outlives `lease_ttl`, and what is left goes back after
/// `cold_lease_ttl`.
#[tokio::test]
async fn a_cold_key_leases_ahead_and_keeps_the_lease_for_cold_lease_ttl() {
    let clock = ManualClock::at(1);
    let store = slow_store(&clock, None);
    let e = engine_on(store.clone(), &clock, EngineSettings::default());
    let ds = [d(&[("new", "x")])];
    let calls = || store.tally(Call::Lease).calls;
    for _ in 0..11 {
        assert_eq!(ask(&e, &ds).await.overall, Code::Ok);
    }
    assert_eq!(
        calls(),
        1,
        "one lease call, then decisions on the cold lease"
    );
    assert_eq!(only_key(&e).1, 50 - 11);
    clock.advance_millis(2_000);
    e.sweep().await;
    assert_eq!(only_key(&e).1, 39, "kept past lease_ttl (1 s)");
    clock.advance_millis(30_000);
    e.sweep().await;
    assert_eq!(only_key(&e).1, 0, "handed back after cold_lease_ttl (30 s)");
}

/// Operator reads (GetQuota, WatchQuota) can never crowd decisions out of the store: at most a
/// few run at once, the rest are refused at once, every one is counted, decisions go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_reads_are_bounded_and_counted() {
    let clock = ManualClock::at(1);
    let store = Forwarding::up(&clock);
    store.delay(Call::Peek, Duration::from_millis(50));
    let e = Arc::new(engine_on(store.clone(), &clock, EngineSettings::default()));
    let reads: Vec<_> = (0..100)
        .map(|i| {
            let e = Arc::clone(&e);
            tokio::spawn(async move {
                e.quota("d", &[sluice_core::Entry::new("ip", i.to_string())])
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        ask(&e, &[d(&[("ip", "decided")])]).await.overall,
        Code::Ok,
        "a decision goes through while the reads are in flight"
    );
    let mut answered = 0;
    for r in reads {
        let view = r.await.expect("task");
        answered += usize::from(view.global_remaining.is_some());
    }
    let most = store.tally(Call::Peek).most_in_flight;
    assert!(most <= crate::lease::QUOTA_READS, "{most} reads at once");
    assert!((1..100).contains(&answered), "{answered} of 100 answered");
    let counted = e
        .leaser
        .metrics
        .store_calls
        .with_label_values(&["peek", "ok"])
        .get();
    assert_eq!(
        counted, answered as u64,
        "every read of the store is counted"
    );
}

/// A decision never waits for the store longer than its timeout, however many requests queue
/// behind one key's store call or lease again: past it, the rule's fallback decides.
#[tokio::test(start_paused = true)]
async fn no_decision_waits_longer_than_the_store_timeout() {
    let clock = ManualClock::at(1);
    let store = slow_store(&clock, Some(Duration::from_millis(30)));
    let e = Arc::new(engine_on(store.clone(), &clock, EngineSettings::default()));
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let e = Arc::clone(&e);
            tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                let d = ask(&e, &[d(&[("ip", "queued")])]).await;
                (started.elapsed(), d.outcomes[0])
            })
        })
        .collect();
    let (mut fell_back, mut waited_most) = (0, Duration::ZERO);
    for t in tasks {
        let (waited, outcome) = t.await.expect("task");
        waited_most = waited_most.max(waited);
        fell_back += usize::from(outcome.fallback);
    }
    assert!(
        waited_most <= Duration::from_millis(31),
        "waited {waited_most:?}"
    );
    assert!(fell_back > 0, "some queued long enough to use the fallback");
}

mod fleet;
mod holds;
mod last_denial;
mod logs;
mod outage;
mod overrides;
mod post_paid;
mod pushed;
mod reservations;
mod schema;
mod top;
