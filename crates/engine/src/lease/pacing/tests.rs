use std::sync::Arc;

use sluice_core::bucket::{Algorithm, Rate};
use sluice_core::config::parse_config;
use sluice_core::{Descriptor, ManualClock, Unit};

use super::*;
use crate::testing::{Call, Forwarding, Mode};
use crate::{Code, Engine, EngineMetrics, EngineSettings, RateLimitRequest};

const HORIZON: u64 = 200_000;

fn per_sec(rps: u64, burst: u64) -> Rate {
    Rate {
        burst,
        ..Rate::per_unit(rps, Unit::Second)
    }
}

#[test]
fn an_interval_moves_by_at_most_a_factor_of_two_per_call_within_its_bounds() {
    let rate = per_sec(100, 100);
    // Nothing found: many calls; at most twice the last interval.
    assert_eq!(interval(&rate, 0.0, 1_000_000, HORIZON), 2_000_000);
    // The first contended call starts from a horizon.
    assert_eq!(interval(&rate, 0.0, 0, HORIZON), 2 * HORIZON);
    // A full bucket found: few calls; half the last interval, and not paced once that is a
    // horizon or less.
    assert_eq!(interval(&rate, 100.0, 1_000_000, HORIZON), 500_000);
    assert_eq!(interval(&rate, 100.0, 2 * HORIZON, HORIZON), 0);
    assert_eq!(interval(&rate, 100.0, 0, HORIZON), 0);
    // At the budget (10 calls a second find 10 tokens each): unchanged.
    assert_eq!(interval(&rate, 10.0, 3_000_000, HORIZON), 3_000_000);
    // Never past the cap, whatever it finds or waited.
    assert_eq!(interval(&rate, 0.0, u64::MAX, HORIZON), MAX_STARVED_WAIT);
    assert_eq!(
        interval(&rate, f64::NAN, MAX_STARVED_WAIT, 1),
        MAX_STARVED_WAIT
    );
    assert_eq!(
        interval(&rate, 0.0, 0, u64::MAX),
        MAX_STARVED_WAIT,
        "a horizon past the cap"
    );
}

#[test]
fn a_small_burst_buys_more_calls_so_the_bucket_never_spills() {
    assert_eq!(fleet_budget(&per_sec(100, 100)), FLEET_CALLS_PER_SEC);
    // B / L = 10 ms: four calls per 10 ms.
    assert_eq!(fleet_budget(&per_sec(1_000, 10)), 400.0);
    assert_eq!(fleet_budget(&per_sec(0, 0)), FLEET_CALLS_PER_SEC);
    let hourly = Rate::per_unit(3, Unit::Hour);
    assert_eq!(fleet_budget(&hourly), FLEET_CALLS_PER_SEC);
}

#[test]
fn a_paced_want_covers_the_interval_and_empties_the_bucket_up_to_the_burst() {
    let rate = per_sec(100, 100);
    assert_eq!(want(&rate, 3.0, 4_000_000), 24);
    // A call is expected to find L / 10 tokens: twice that at least.
    assert_eq!(want(&rate, 0.1, 2_000_000), 20);
    assert_eq!(want(&rate, 300.0, 2_000_000), 100);
    assert_eq!(want(&rate, 3.0, 0), 0, "not paced");
    assert_eq!(want(&rate, f32::MAX.into(), u64::MAX), 100);
    assert_eq!(
        want(&rate, f64::NAN, 1),
        20,
        "no demand known: what a call should find"
    );
}

#[test]
fn only_token_buckets_on_a_remote_store_are_paced() {
    let rate = per_sec(100, 100);
    assert!(applies(&rate, false));
    assert!(!applies(&rate, true));
    let window = Rate {
        algorithm: Algorithm::FixedWindow,
        ..rate
    };
    assert!(!applies(&window, false));
}

/// A fleet of `n` engines on one remote store, one key (100/s, burst 100) offered 400 requests a
/// second spread at random over the fleet, for `seconds` of a manual clock. Returns the store
/// calls per second and the share of `L` admitted, both over the second half of the run (after
/// the waits settled), and checks the bound at every request.
async fn starved_fleet(n: usize, seconds: u64) -> (f64, f64) {
    const CONFIG: &str = "domains:\n  - domain: f\n    descriptors:\n      - key: k\n        rate_limit: {unit: second, requests_per_unit: 100, burst: 100}\n";
    let clock = ManualClock::at(1_000_000);
    let store = Forwarding::new(&clock, Mode::Up, n as u64);
    let engines: Vec<Engine> = (0..n)
        .map(|_| {
            Engine::new(
                parse_config(CONFIG).expect("config").rules,
                store.clone(),
                Arc::new(clock.clone()),
                EngineSettings::default(),
                EngineMetrics::unregistered(),
            )
        })
        .collect();
    let descriptors = [Descriptor::of([("k", "v")])];
    let request = RateLimitRequest {
        domain: "f",
        descriptors: &descriptors,
        hits_addend: 1,
    };
    let mut seed = 0x2545_f491_4f6c_dd1d_u64 ^ n as u64;
    let (mut admitted, mut admitted_late, mut calls_at_half) = (0u64, 0u64, 0u64);
    let steps = seconds * 400;
    for step in 0..steps {
        clock.advance_micros(2_500);
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let e = &engines[(seed % n as u64) as usize];
        if e.decide(&request).await.overall == Code::Ok {
            admitted += 1;
            admitted_late += u64::from(step >= steps / 2);
        }
        // Background refills run.
        tokio::task::yield_now().await;
        let elapsed = (step + 1) as f64 * 0.0025;
        assert!(
            admitted as f64 <= 100.0 + 100.0 * elapsed + 1e-9,
            "{n} engines admitted {admitted} > B + L·t after {elapsed} s"
        );
        if step + 1 == steps / 2 {
            calls_at_half = store.tally(Call::Lease).calls;
        }
    }
    let half = seconds as f64 / 2.0;
    let calls = (store.tally(Call::Lease).calls - calls_at_half) as f64 / half;
    (calls, admitted_late as f64 / (100.0 * half))
}

#[tokio::test]
async fn a_starved_key_costs_about_its_budget_whatever_the_fleet_size() {
    for n in [4, 16, 64, 256] {
        // Without pacing (a call per engine per horizon): 32, 76, 209 and 313 calls a second;
        // with it 8.0, 9.5, 9.4 and 10.9 (and 98–100% of L either way).
        let (calls, used) = starved_fleet(n, 120).await;
        assert!(
            calls <= 1.5 * FLEET_CALLS_PER_SEC,
            "{n} engines: {calls:.1} store calls a second"
        );
        assert!(
            used >= 0.97,
            "{n} engines: {:.1}% of L admitted",
            used * 100.0
        );
    }
}
