//! Post-paid rules (`charge: post_paid`): reports go into bounded debt, checks wait it out.

use super::*;

/// `key=value` with an explicit per-descriptor hits_addend (Envoy's post-paid entries).
fn with_hits(key: &str, value: &str, hits: u64) -> Descriptor {
    let mut d = d(&[(key, value)]);
    d.hits_addend = Some(hits);
    d
}

async fn ask_with(e: &Engine, ds: &[Descriptor], hits_addend: u64) -> Decision {
    e.decide(&RateLimitRequest {
        domain: "d",
        descriptors: ds,
        hits_addend,
    })
    .await
}

fn usage(e: &Engine, outcome: &str) -> f64 {
    e.leaser
        .metrics
        .usage_tokens
        .with_label_values(&[outcome])
        .get()
}

/// A caller's `limit` override never moves usage off a post-paid budget: before, a report
/// carrying one was decided as a prepaid request at the override's rate, so 2 000 tokens of
/// usage on a budget of 1 000 a minute were denied as a cost above its burst and charged
/// nothing (and a smaller report was charged at the override's refill).
#[tokio::test]
async fn an_override_never_moves_usage_off_a_post_paid_budget() {
    let clock = ManualClock::at(1);
    let (e, _store) = engine(&clock);
    let mut report = with_hits("budget", "b", 2_000);
    report.limit_override = Some(sluice_core::descriptor::LimitOverride {
        requests_per_unit: 1_000,
        unit: sluice_core::Unit::Minute,
    });
    assert_eq!(
        ask(&e, &[report]).await.overall,
        Code::Ok,
        "a report is never denied"
    );
    let check = ask(&e, &[with_hits("budget", "b", 0)]).await.outcomes[0];
    assert_eq!(
        (check.code, check.debt),
        (Code::OverLimit, 1_000),
        "charged to the budget, into debt (clamped at its burst)"
    );
}

/// Post-paid: a report (explicit hits) is charged in full beyond what is left and answered OK; a
/// check (explicit 0) is denied while the bucket is empty or in debt and passes once it is
/// repaid; an absurd report is clamped at the debt bound (default: the burst), so the key is
/// back within `(B + max_debt) / L`. Leased (on the store) and local alike.
#[tokio::test]
async fn post_paid_usage_goes_into_debt_and_checks_wait_until_it_is_repaid() {
    for key in ["tokens", "local_tokens"] {
        let clock = ManualClock::at(1);
        let (e, _store) = engine(&clock);
        let check = [with_hits(key, "t", 0)];
        let code = |dec: Decision| dec.overall;
        assert_eq!(code(ask(&e, &check).await), Code::Ok, "{key}: full");
        assert_eq!(
            code(ask(&e, &[with_hits(key, "t", 15)]).await),
            Code::Ok,
            "{key}: a report is never denied"
        );
        let denied = ask(&e, &check).await.outcomes[0];
        assert_eq!(denied.code, Code::OverLimit, "{key}: -5");
        assert_eq!((denied.remaining, denied.debt), (0, 5), "{key}");
        assert_eq!(
            denied.retry_after,
            Some(Duration::from_millis(600)),
            "{key}: 5 to repay and 1 to pass, at 10 a second"
        );
        assert_eq!(denied.until_full, Duration::from_millis(1_500), "{key}");
        clock.advance_millis(500);
        assert_eq!(code(ask(&e, &check).await), Code::OverLimit, "{key}: 0");
        clock.advance_millis(100);
        assert_eq!(code(ask(&e, &check).await), Code::Ok, "{key}: 1");
        assert_eq!(
            code(ask(&e, &[with_hits(key, "t", u64::MAX)]).await),
            Code::Ok,
            "{key}"
        );
        clock.advance_millis(1_000);
        assert_eq!(
            code(ask(&e, &check).await),
            Code::OverLimit,
            "{key}: clamped at -10, 0 a second later"
        );
        clock.advance_millis(100);
        assert_eq!(code(ask(&e, &check).await), Code::Ok, "{key}: repaid");
        assert_eq!(usage(&e, "reported"), 15.0 + u64::MAX as f64, "{key}");
        let clamped = usage(&e, "clamped");
        assert!(
            clamped >= u64::MAX as f64 - 20.0 && clamped <= u64::MAX as f64,
            "{key}: what went past the bound is counted: {clamped}"
        );
        // Many absurd reports: still bounded, the counter does not wrap.
        for _ in 0..3 {
            ask(&e, &[with_hits(key, "t", u64::MAX)]).await;
        }
        assert!(usage(&e, "clamped") > 3.0 * u64::MAX as f64, "{key}");
        let after = ask(&e, &check).await.outcomes[0];
        assert_eq!(after.debt, 10, "{key}: the bound holds");
    }
}

/// On a post-paid rule a request never pays before: no count (ext_authz, or a route-level entry
/// Envoy sends without one) is a check, and a request-wide count is usage reported.
#[tokio::test]
async fn on_a_post_paid_rule_no_count_is_a_check_and_a_request_wide_count_is_a_report() {
    for key in ["tokens", "local_tokens"] {
        let clock = ManualClock::at(1);
        let (e, _store) = engine(&clock);
        let plain = [d(&[(key, "t")])];
        for _ in 0..20 {
            let o = ask(&e, &plain).await.outcomes[0];
            assert_eq!(
                (o.code, o.remaining),
                (Code::Ok, 10),
                "{key}: checks charge nothing"
            );
        }
        let reported = ask_with(&e, &plain, 12).await;
        assert_eq!(
            reported.overall,
            Code::Ok,
            "{key}: a report is never denied"
        );
        let o = ask(&e, &plain).await.outcomes[0];
        assert_eq!((o.code, o.debt), (Code::OverLimit, 2), "{key}");
    }
}

/// One request reports several budgets (input and output tokens, per tenant and per model) and
/// checks a prepaid limit: every report is charged, also when the prepaid limit denies.
#[tokio::test]
async fn one_request_charges_every_budget_it_reports() {
    let clock = ManualClock::at(1);
    let (e, _store) = engine(&clock);
    let request = |input, output| {
        [
            with_hits("tokens", "input", input),
            with_hits("tokens", "output", output),
            with_hits("local_tokens", "output", output),
            d(&[("user", "u")]),
        ]
    };
    let first = ask(&e, &request(3, 4)).await;
    assert_eq!(first.overall, Code::Ok);
    let left: Vec<u64> = first.outcomes.iter().map(|o| o.remaining).collect();
    assert_eq!(left, [7, 6, 6, 1], "each budget charged its own usage");
    assert_eq!(ask(&e, &request(1, 1)).await.overall, Code::Ok);
    let denied = ask(&e, &request(9, 9)).await;
    assert_eq!(denied.overall, Code::OverLimit, "per_user: 2 a minute");
    let state: Vec<(u64, u64)> = denied.outcomes[..3]
        .iter()
        .map(|o| (o.remaining, o.debt))
        .collect();
    assert_eq!(
        state,
        [(0, 3), (0, 4), (0, 4)],
        "the usage happened: charged although the request is denied"
    );
}

fn charge_calls(e: &Engine) -> u64 {
    e.leaser
        .metrics
        .store_calls
        .with_label_values(&["charge", "ok"])
        .get()
}

/// The global bucket of the only key `e` tracks, read from the store.
async fn global(e: &Engine) -> f64 {
    let (store_key, _) = only_key(e);
    e.leaser
        .store
        .peek(&store_key, Rate::per_unit(1000, sluice_core::Unit::Minute))
        .await
        .expect("peek")
}

/// Small reports go to the store in batches (5% of the burst, or a lease horizon old), so Redis
/// sees far fewer calls than reports; this instance's checks count them at once; none is lost,
/// whether sent by the next report, the periodic flush, a retry after an outage, or shutdown.
#[tokio::test]
async fn small_reports_are_sent_in_batches_and_none_is_lost() {
    let clock = ManualClock::at(1);
    let store = Forwarding::new(&clock, Mode::Up, 1);
    let e = engine_on(store.clone(), &clock, EngineSettings::default());
    let report = |n| [with_hits("budget", "t", n)];
    for _ in 0..16 {
        assert_eq!(ask(&e, &report(3)).await.overall, Code::Ok);
    }
    assert_eq!(charge_calls(&e), 0, "48 tokens: below a batch of 50");
    let seen = ask(&e, &[with_hits("budget", "t", 0)]).await.outcomes[0];
    assert_eq!(
        seen.remaining, 952,
        "this instance counts its own usage at once"
    );
    ask(&e, &report(3)).await;
    assert_eq!(charge_calls(&e), 1, "51 tokens: one call");
    assert!((global(&e).await - 949.0).abs() < 1e-9);
    // A lease horizon later the periodic flush sends what is left.
    ask(&e, &report(4)).await;
    clock.advance_millis(200);
    e.leaser.flush_queued_debts(e.now(), false).await;
    assert_eq!(charge_calls(&e), 2);
    let refilled = 1000.0 / 60.0 * 0.2;
    assert!((global(&e).await - (949.0 + refilled - 4.0)).abs() < 1e-6);
    // Refused while the store is down: kept, queued, and sent once it is back.
    ask(&e, &report(60)).await;
    store.set(Mode::Down);
    ask(&e, &report(60)).await;
    store.set(Mode::Up);
    let before = global(&e).await;
    clock.advance_millis(200);
    e.leaser.flush_queued_debts(e.now(), false).await;
    let after = global(&e).await;
    assert!(
        (before + refilled - 60.0 - after).abs() < 1e-6,
        "the refused 60 arrived: {before} → {after}"
    );
    // A key with usage pending is not evicted; shutdown sends it.
    ask(&e, &report(2)).await;
    clock.advance_millis(60_000 * 10);
    e.sweep().await;
    assert!(!only_key(&e).0.is_empty(), "still tracked");
    let before = global(&e).await;
    e.return_all_leases().await;
    assert!((global(&e).await - (before - 2.0)).abs() < 1e-6);
    assert_eq!(usage(&e, "reported"), 48.0 + 3.0 + 4.0 + 60.0 + 60.0 + 2.0);
}

/// A descriptor whose `rate_limits` mix a prepaid request budget and a post-paid token budget:
/// a request pays the request budget and checks the tokens; a count reported after it charges
/// the tokens only, however large, and never the request budget (nor is it denied by it).
#[tokio::test]
async fn a_report_on_mixed_limits_charges_the_post_paid_ones_only() {
    let clock = ManualClock::at(1);
    let config = r#"
domains:
  - domain: d
    descriptors:
      - key: tenant
        rate_limits:
          - {name: requests, unit: minute, requests_per_unit: 3}
          - {name: tokens, unit: minute, requests_per_unit: 1000000, charge: post_paid}
"#;
    let e = engine_on(
        MemoryStore::new(clock.clone()),
        &clock,
        EngineSettings::default(),
    );
    e.swap_rules(parse_config(config).expect("config").rules);
    let request = [d(&[("tenant", "acme")])];
    assert_eq!(ask(&e, &request).await.overall, Code::Ok, "request 1 of 3");
    let mut charged = 0;
    for tokens in [10, 400, 5_000] {
        let report = ask(&e, &[with_hits("tenant", "acme", tokens)]).await;
        assert_eq!(report.overall, Code::Ok, "a report is never denied");
        charged += tokens;
        let tokens_left = report.outcomes[0].remaining;
        assert_eq!(tokens_left, 1_000_000 - charged, "charged to the tokens");
    }
    // The request budget still has 2 of its 3.
    assert_eq!(ask(&e, &request).await.overall, Code::Ok, "request 2 of 3");
    assert_eq!(ask(&e, &request).await.overall, Code::Ok, "request 3 of 3");
    assert_eq!(
        ask(&e, &request).await.overall,
        Code::OverLimit,
        "request 4 of 3"
    );
}

/// A report sent after its decision waited on the store is read at the time it was sent: read
/// at the request's time instead, the store's answer had the refill of the wait counted on top
/// of it, and the next check's `remaining` overstated what the key holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_sent_after_a_slow_lease_is_read_when_it_was_sent() {
    let clock = ManualClock::at(1);
    let store = Forwarding::up(&clock);
    store.delay(Call::Lease, Duration::from_millis(100));
    let e = Arc::new(engine_on(store.clone(), &clock, EngineSettings::default()));
    // One request: a prepaid limit on a new key (a lease call) and a report (a batch: sent
    // after the decision).
    let request = [with_hits("new", "n", 1), with_hits("tokens", "t", 6)];
    let report = {
        let e = Arc::clone(&e);
        tokio::spawn(async move { ask(&e, &request).await })
    };
    // 150 ms (1.5 tokens of the key's refill) pass while the lease is on its way.
    for _ in 0..1_000 {
        if store.tally(Call::Lease).in_flight == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        store.tally(Call::Lease).in_flight,
        1,
        "the lease is on its way"
    );
    clock.advance_millis(150);
    assert_eq!(report.await.expect("task").overall, Code::Ok);
    assert_eq!(charge_calls(&e), 1, "the report went to the store");
    let check = ask(&e, &[with_hits("tokens", "t", 0)]).await.outcomes[0];
    let tokens = Rate::per_unit(10, sluice_core::Unit::Second);
    let mut held = Vec::new();
    e.table.for_each(|k, b| {
        if b.rate == tokens {
            held.push((key::store_key_of(b.identity, k), b.lock().lease));
        }
    });
    let [(ref store_key, lease)] = held[..] else {
        panic!("one key of 10 a second: {held:?}")
    };
    let global = e.leaser.store.peek(store_key, tokens).await.expect("peek");
    assert_eq!(
        check.remaining as f64,
        (lease as f64 + global).floor(),
        "what this instance holds and the store has: {lease} + {global}"
    );
}
