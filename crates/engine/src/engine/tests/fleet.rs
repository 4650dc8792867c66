//! A fleet of engines on one remote store (issue 28): one key shared by `n` sidecars, each with
//! the live-instance count a heartbeat would give it. What a key under its limit must never see:
//! a denial because its tokens sit in other sidecars' leases.

use proptest::prelude::{ProptestConfig, prop, prop_assert, proptest};
use proptest::strategy::Strategy as _;

use super::*;

/// One key, 100/s, burst 100.
const FLEET_CONFIG: &str = "domains:\n  - domain: f\n    descriptors:\n      - key: k\n        rate_limit: {unit: second, requests_per_unit: 100, burst: 100}\n";

/// A spell of steady demand: `rps` requests a second, for `millis`, spread over the first
/// `active` engines (the others have left, or not yet joined).
#[derive(Debug, Clone)]
struct Phase {
    rps: u64,
    active: usize,
    millis: u64,
}

/// What a fleet run saw.
#[derive(Debug, Default)]
struct Seen {
    sent: u64,
    denied: u64,
    lease_calls: u64,
}

/// Runs `phases` on `n` engines sharing one store (remote as far as they can tell), which says
/// `counted` instances are live (a fleet that starts together counts itself as it registers:
/// each sidecar may believe it is alone until its next heartbeat). Requests are evenly spaced and go round-robin over the active engines; every
/// engine sweeps as its maintenance loop would (every 250 ms). Checks `B + L·t` at every request.
async fn run_fleet(n: usize, counted: u64, phases: &[Phase]) -> Result<Seen, String> {
    let clock = ManualClock::at(1_000_000);
    let store = Forwarding::new(&clock, Mode::Up, counted);
    let engines: Vec<Engine> = (0..n)
        .map(|_| {
            Engine::new(
                parse_config(FLEET_CONFIG).expect("config").rules,
                store.clone(),
                Arc::new(clock.clone()),
                EngineSettings::default(),
                EngineMetrics::unregistered(),
            )
        })
        .collect();
    let descriptors = [d(&[("k", "v")])];
    let request = RateLimitRequest {
        domain: "f",
        descriptors: &descriptors,
        hits_addend: 1,
    };
    let start = clock.now_micros();
    let mut seen = Seen::default();
    let mut admitted = 0u64;
    let mut next_sweep = start + 250_000;
    let mut turn = 0usize;
    for phase in phases {
        let gap = 1_000_000 / phase.rps.max(1);
        let steps = phase.millis * 1_000 / gap;
        for _ in 0..steps {
            clock.advance_micros(gap);
            if clock.now_micros() >= next_sweep {
                for e in &engines {
                    e.sweep().await;
                }
                next_sweep += 250_000;
            }
            turn = (turn + 1) % phase.active.clamp(1, n);
            seen.sent += 1;
            if engines[turn].decide(&request).await.overall == Code::Ok {
                admitted += 1;
            } else {
                seen.denied += 1;
            }
            // Background refills and returns run.
            tokio::task::yield_now().await;
            let elapsed = (clock.now_micros() - start) as f64 / 1e6;
            if admitted as f64 > 100.0 + 100.0 * elapsed + 1e-9 {
                return Err(format!(
                    "{n} engines admitted {admitted} > B + L·t after {elapsed} s"
                ));
            }
        }
    }
    seen.lease_calls = store.tally(Call::Lease).calls;
    Ok(seen)
}

/// 80% of the limit spread evenly over a fleet, whether the sidecars know how many they are or
/// each still counts itself alone: never a denial, at any fleet size. Before, a sidecar that
/// counted itself alone took a cold lease of half the burst, and every lease of the key looked
/// cold once its reading had refilled in the estimate, so leases sat unspent for
/// `cold_lease_ttl` and requests under the limit were denied (from 8 sidecars on).
#[tokio::test]
async fn a_key_under_its_limit_is_never_denied_whatever_the_fleet_size() {
    for (n, counted) in [2, 8, 32, 128]
        .into_iter()
        .flat_map(|n| [(n, n as u64), (n, 1)])
    {
        let seen = run_fleet(
            n,
            counted,
            &[Phase {
                rps: 80,
                active: n,
                millis: 20_000,
            }],
        )
        .await
        .expect("bound");
        assert_eq!(
            seen.denied, 0,
            "{n} engines counting {counted}: {} of {} denied under the limit ({} lease calls)",
            seen.denied, seen.sent, seen.lease_calls
        );
    }
}

fn phases() -> impl proptest::strategy::Strategy<Value = (usize, Vec<Phase>)> {
    (1usize..=48).prop_flat_map(|n| {
        let phase =
            (5u64..=85, 1usize..=n, 500u64..=4_000).prop_map(|(rps, active, millis)| Phase {
                rps,
                active,
                millis,
            });
        (
            proptest::strategy::Just(n),
            prop::collection::vec(phase, 1..6),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Random demand below the limit, shifting between spells, with sidecars joining and leaving
    /// (the active set grows and shrinks), each sidecar counting the fleet (after a heartbeat):
    /// never over `B + L·t`, and never a denial.
    #[test]
    fn a_fleet_under_the_limit_keeps_the_bound_and_denies_nothing((n, phases) in phases()) {
        let seen = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(run_fleet(n, n as u64, &phases));
        let seen = match seen {
            Ok(seen) => seen,
            Err(over) => return Err(proptest::test_runner::TestCaseError::fail(over)),
        };
        prop_assert!(seen.denied == 0, "{} of {} denied under the limit", seen.denied, seen.sent);
    }
}
