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
    /// What the last phase saw alone.
    last: Spell,
}

/// What one phase saw.
#[derive(Debug, Default, Clone, Copy)]
struct Spell {
    admitted: u64,
    denied: u64,
    /// Every store call: leases, returns, reads.
    store_calls: u64,
    secs: f64,
}

/// Runs `phases` on `n` engines sharing one store (remote as far as they can tell), which says
/// `counted` instances are live (a fleet that starts together counts itself as it registers:
/// each sidecar may believe it is alone until its next heartbeat). Requests are evenly spaced and go round-robin over the active engines; every
/// engine sweeps as its maintenance loop would (every 250 ms). Checks `B + L·t` at every request.
/// The default settings: leases of rate (`run_fleet_with` on `token_leases()` for the other).
async fn run_fleet(n: usize, counted: u64, phases: &[Phase]) -> Result<Seen, String> {
    run_fleet_with(n, counted, phases, &EngineSettings::default()).await
}

/// [`run_fleet`] on engines with `settings`.
async fn run_fleet_with(
    n: usize,
    counted: u64,
    phases: &[Phase],
    settings: &EngineSettings,
) -> Result<Seen, String> {
    let clock = ManualClock::at(1_000_000);
    let store = Forwarding::new(&clock, Mode::Up, counted);
    let engines = fleet_with(FLEET_CONFIG, &store, &clock, n, settings);
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
    let store_calls = || -> u64 {
        [Call::Lease, Call::Release, Call::Peek]
            .iter()
            .map(|&op| store.tally(op).calls)
            .sum()
    };
    for phase in phases {
        let (admitted_before, denied_before, calls_before) = (admitted, seen.denied, store_calls());
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
        seen.last = Spell {
            admitted: admitted - admitted_before,
            denied: seen.denied - denied_before,
            store_calls: store_calls() - calls_before,
            secs: (steps * gap) as f64 / 1e6,
        };
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

/// A key starved at 4× its limit, at any fleet size up to 128: its sidecars take turns, so the
/// key costs the store about `starved_calls_per_sec` (10) calls a second up to 32 sidecars (at
/// most twice that; at 128, see below), and it admits at least 98% of `L` once the fleet has settled (the first 20 s: the
/// first spell, then a queue of up to `n / 10` seconds forms; meanwhile leases fill with the
/// tokens each sidecar spends until its next turn, which they hold from then on). Never over
/// `B + L·t`. Before, each starved sidecar asked again every lease horizon: about `5·n` calls a
/// second (`n / 0.2 s`).
#[tokio::test]
async fn a_starved_key_costs_the_same_calls_a_second_whatever_the_fleet_size() {
    for n in [2, 8, 32, 128] {
        let spell = |millis| Phase {
            rps: 400,
            active: n,
            millis,
        };
        let seen = run_fleet(n, n as u64, &[spell(20_000), spell(30_000)])
            .await
            .expect("bound");
        let Spell {
            admitted,
            store_calls,
            secs,
            ..
        } = seen.last;
        let per_sec = store_calls as f64 / secs;
        let share = admitted as f64 / (100.0 * secs);
        println!(
            "{n} engines, settled: {per_sec:.1} store calls/s, {:.1}% of L admitted",
            100.0 * share
        );
        assert!(share >= 0.98, "{n} engines admitted {admitted} in {secs} s");
        // The turns (10 a second), plus sidecars that got all they asked for (what missed turns
        // left in the bucket) asking again when that runs out. Beyond 10 sidecars on a burst of
        // 100 a cold lease is no longer 5 tokens but the sidecar's share of half the burst (0:
        // what the request needs), which ended the false denials under the limit at 128 and
        // 1 000 sidecars (crates/fleetsim) and costs a starved key here up to a call per
        // admitted request (110 a second measured at 128; 12.7 before): at most one call per
        // three decisions. Leases of rate are to bring it back to 20 (issue 42).
        let most = if n <= 32 { 20.0 } else { 400.0 / 3.0 };
        assert!(
            per_sec <= most,
            "{n} engines: {per_sec:.1} store calls a second"
        );
    }
}

/// Up to `most_engines` engines and 1–5 spells of `rps` requests a second, each 0.5 s to
/// `most_millis`, on a random part of the fleet.
fn phases(
    most_engines: usize,
    rps: std::ops::RangeInclusive<u64>,
    most_millis: u64,
) -> impl proptest::strategy::Strategy<Value = (usize, Vec<Phase>)> {
    (1usize..=most_engines).prop_flat_map(move |n| {
        let phase =
            (rps.clone(), 1usize..=n, 500u64..=most_millis).prop_map(|(rps, active, millis)| {
                Phase {
                    rps,
                    active,
                    millis,
                }
            });
        (
            proptest::strategy::Just(n),
            prop::collection::vec(phase, 1..6),
        )
    })
}

/// [`run_fleet`] on a runtime of its own (for a property test), every engine counting the
/// fleet; a broken bound fails the case.
fn run_fleet_blocking(
    n: usize,
    phases: &[Phase],
) -> Result<Seen, proptest::test_runner::TestCaseError> {
    on_own_runtime(run_fleet(n, n as u64, phases))
        .map_err(proptest::test_runner::TestCaseError::fail)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]
    /// Random demand below the limit, shifting between spells, with sidecars joining and leaving
    /// (the active set grows and shrinks), each sidecar counting the fleet (after a heartbeat):
    /// never over `B + L·t`, and never a denial.
    #[test]
    fn a_fleet_under_the_limit_keeps_the_bound_and_denies_nothing(
        (n, phases) in phases(48, 5..=85, 4_000)
    ) {
        let seen = run_fleet_blocking(n, &phases)?;
        prop_assert!(seen.denied == 0, "{} of {} denied under the limit", seen.denied, seen.sent);
    }
}

/// The over-and-under property's case: `phases`, then 80% of the limit on every sidecar for as
/// long as the fleet may take to settle, then 5 s more in which nothing may be denied.
fn over_and_under(
    n: usize,
    phases: &mut Vec<Phase>,
    settings: &EngineSettings,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let longest_wait_ms = (2 * n as u64 * 100).max(1_000);
    let refill_ms = 100 * 1_000 / (100 - 80);
    phases.push(Phase {
        rps: 80,
        active: n,
        millis: refill_ms + longest_wait_ms + 1_000,
    });
    phases.push(Phase {
        rps: 80,
        active: n,
        millis: 5_000,
    });
    let seen = on_own_runtime(run_fleet_with(n, n as u64, phases, settings))
        .map_err(proptest::test_runner::TestCaseError::fail)?;
    prop_assert!(
        seen.last.denied == 0,
        "{} of {} denied under the limit after the fleet settled",
        seen.last.denied,
        seen.last.admitted + seen.last.denied
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(16), ..ProptestConfig::default() })]
    /// Demand shifting above and below the limit (up to 6× it), sidecars joining and leaving:
    /// never over `B + L·t`, and no lockout. Once demand falls to 80% of the limit, the bucket
    /// an over-limit spell emptied refills at the 20% left over, up to `B / 0.2·L` (5 s); until
    /// it holds what the sidecars ask, they still come up short and take turns, and a sidecar
    /// waiting for its turn may deny until then (at most twice the queue the fleet makes,
    /// `2·n / starved_calls_per_sec` seconds: the price of the fleet's starved calls not
    /// growing with it). From then on nothing is denied. (Settling was `2·n/10 + 1` s until a
    /// case at 58 sidecars denied 1 of 400 after it: a turn given 2.5 s after the fall, while
    /// the bucket refilled. Leases of rate, issue 42, are to end the wait altogether.)
    #[test]
    fn a_fleet_over_and_under_the_limit_keeps_the_bound_and_recovers(
        (n, mut phases) in phases(64, 5..=600, 6_000)
    ) {
        over_and_under(n, &mut phases, &token_leases())?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(8), ..ProptestConfig::default() })]
    /// The property above with leases of rate on.
    #[test]
    fn with_leases_of_rate_a_fleet_over_and_under_the_limit_recovers(
        (n, mut phases) in phases(64, 5..=600, 6_000)
    ) {
        over_and_under(n, &mut phases, &rate_leases())?;
    }
}

/// Leases of rate: a reservation granted while a key was starved follows its demand down. One
/// sidecar of four at 2.9× the limit is reserved all 80% of `L`; then two share 104 a second,
/// then all four 80. The starved sidecar's stock paid its requests, so it made no call, and a
/// key waiting for its turn (`queued`) was not renewed ahead: it kept 80 a second for its 20
/// until the ttl lapsed while the other three shared the 20 left (281 of 560 requests denied
/// in the first 7 s at 80%, 39 of 400 in the 5 s after; the fleet property above, with leases
/// of rate on, found it). A renewal now goes ahead while queued.
#[tokio::test]
async fn with_leases_of_rate_a_reservation_follows_demand_down() {
    let at_80 = |millis| Phase {
        rps: 80,
        active: 4,
        millis,
    };
    let phases = [
        Phase {
            rps: 286,
            active: 1,
            millis: 787,
        },
        Phase {
            rps: 104,
            active: 2,
            millis: 2385,
        },
        at_80(7_000),
        at_80(5_000),
    ];
    let seen = run_fleet_with(4, 4, &phases, &rate_leases())
        .await
        .expect("bound");
    assert_eq!(
        seen.last.denied,
        0,
        "{} of {} denied at 80% of the limit",
        seen.last.denied,
        seen.last.admitted + seen.last.denied
    );
}

/// Leases of rate: idle sidecars give their reservations back, busy ones keep theirs. Four
/// sidecars share 58 a second, then one takes 79 a second alone: the three idle ones' stocks
/// (22 a second each) stood to their ttl, and the one still asking, on the 34 a second left,
/// was denied a request the exact limiter admits (the fleet property above drew it once leases
/// of rate were the default); the sweep now ends them (`LeaseState::rate_lease_unused`). Two
/// sidecars at 20 a second each for 12 s keep theirs: a few calls in the last 6 s, where a
/// reservation ended at every sweep would cost several a second.
#[tokio::test]
async fn with_leases_of_rate_idle_sidecars_give_their_reservations_back() {
    let phases = [
        Phase {
            rps: 58,
            active: 4,
            millis: 1_294,
        },
        Phase {
            rps: 79,
            active: 1,
            millis: 3_621,
        },
    ];
    let seen = run_fleet_with(4, 4, &phases, &rate_leases())
        .await
        .expect("bound");
    assert_eq!(seen.denied, 0, "{} of {} denied", seen.denied, seen.sent);

    let busy = |millis| Phase {
        rps: 40,
        active: 2,
        millis,
    };
    let seen = run_fleet_with(2, 2, &[busy(6_000), busy(6_000)], &rate_leases())
        .await
        .expect("bound");
    assert_eq!(seen.denied, 0);
    assert!(
        seen.last.store_calls <= 6,
        "{} store calls in the last 6 s",
        seen.last.store_calls
    );
}
