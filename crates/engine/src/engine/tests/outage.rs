//! A key across a store outage (issue 41, item 8): what the `local_share` fallback admitted is
//! charged when the store answers again so that the key keeps `B + L·t`, and nothing is denied
//! afterwards that one exact bucket, fed the same requests, would admit.
//!
//! Before the fix every token a fallback spent was owed in full (up to the sidecar's share of
//! the burst), although the global bucket had refilled to the burst during the outage: two
//! sidecars at 20% of the limit emptied it on their first lease calls and denied requests an
//! exact limiter admits.

use proptest::prelude::{ProptestConfig, prop_assert, prop_assert_eq, proptest};
use proptest::strategy::Strategy as _;

use super::*;

/// One key, 100/s, burst 100 (the fleet tests' key).
const OUTAGE_CONFIG: &str = "domains:\n  - domain: o\n    descriptors:\n      - key: k\n        rate_limit: {unit: second, requests_per_unit: 100, burst: 100}\n";

/// The key's limit and burst.
const L: f64 = 100.0;
const B: f64 = 100.0;

/// `rps` requests a second (over all engines) for `millis`.
#[derive(Debug, Clone, Copy)]
struct Spell {
    rps: u64,
    millis: u64,
}

/// Demand before, during and after an outage of the store; `flushed`: the store comes back
/// empty (a restarted Redis without persistence: the key's bucket starts full again), else as
/// it was, refilled (a paused Redis); `stalled`: its calls time out (a paused Redis: whether
/// a call was applied is unknown), else fail at once (connection refused).
#[derive(Debug, Clone, Copy)]
struct Outage {
    before: Spell,
    during: Spell,
    after: Spell,
    flushed: bool,
    stalled: bool,
}

/// What a run saw.
#[derive(Debug, Default)]
struct Seen {
    /// Requests after the store answered again that the exact bucket admits and the engines
    /// denied.
    denied_after: u64,
    /// Requests after the store answered again.
    sent_after: u64,
    /// Requests admitted while the store was out (by leases, stocks and the fallback).
    admitted_during: u64,
    /// The most admitted over any window beyond `B + L·t` plus the tokens leases held at its
    /// start (negative: under it).
    worst_excess: f64,
    /// The slack the bound is stated with (see [`run`]), over the whole run.
    slack: f64,
    /// The most any window's excess went beyond the slack known when the window ended: the
    /// bound holds if this is not above 0 (a window is not excused by a term the run came to
    /// only later, such as a flushed store's, or leases raced after the store returned).
    worst_beyond: f64,
}

/// The global bucket's key as the store knows it, and every engine's last reading of it.
fn readings(engines: &[Engine]) -> (Option<String>, Vec<f64>) {
    let mut key = None;
    let readings = engines
        .iter()
        .map(|e| {
            let mut reading = 0.0;
            e.table.for_each(|k, b| {
                key = Some(key::store_key_of(b.identity, k));
                let state = b.lock();
                if state.global_known() {
                    reading = state.global_remaining;
                }
            });
            reading
        })
        .collect();
    (key, readings)
}

/// Whether `e` still owes the global bucket for what its fallback spent.
fn owes(e: &Engine) -> bool {
    let mut owes = false;
    e.table
        .for_each(|_, b| owes |= b.lock().rare().owed.is_owing());
    owes
}

/// What the engines hold of the key at `now` that the store no longer has: tokens in leases
/// and, with leases of rate, what each stock filled up to `now` beyond them (the fraction of a
/// token not yet whole, and whole tokens kept aside to give back). A stock fills from the
/// store's rate, so what it filled before a window is the window's as leased tokens are: one
/// sidecar with leases of rate gave a stock's 0.84 of a token back to the store after an
/// outage (`RateLease::sending`), and a window was 0.014 over when only leases were counted.
fn leased(engines: &[Engine], now: u64) -> f64 {
    let mut held = 0.0;
    for e in engines {
        e.table.for_each(|_, b| {
            let state = b.lock();
            let mut lease = state.lease;
            if let Some(mut stock) = state.rare().rate_lease.clone() {
                stock.fill(&b.rate, &mut lease, now);
                held += stock.carry + stock.dropped as f64;
            }
            held += lease as f64;
        });
    }
    held
}

/// What the engines' fallbacks may admit through an outage beginning at `now` beyond the
/// store's refill because the store reserves more on the key (`reserved`, thousandths of a
/// token per second) than each engine's last lease answer showed it
/// (`LeaseState::store_reserved`): reservations granted to others since. An engine's fallback
/// shares, and is charged against, the refill it knew of (`L` less what it saw reserved, over
/// `n`), from its local bucket's last start (its last grant, at most its share of the burst
/// before the outage) on; the store refilled less. What no engine can know, as a reading above
/// the bucket's level is. Returns the part before the outage (tokens) and the rate the rest
/// accrues at through it (tokens a second): a window is excused only by the outage's time
/// before it ends.
fn reserved_since(engines: &[Engine], reserved: u64, now: u64, n: usize) -> (f64, f64) {
    let (mut before_outage, mut per_sec) = (0.0, 0.0);
    for e in engines {
        e.table.for_each(|_, b| {
            let state = b.lock();
            let unknown =
                reserved.saturating_sub(state.store_reserved(now)) as f64 / 1e3 / n as f64;
            // Before the outage, no more than the local bucket holds (its share of the burst).
            let before = now.saturating_sub(state.local.updated_micros) as f64 / 1e6;
            before_outage += (unknown * before).min(B / n as f64);
            per_sec += unknown;
        });
    }
    (before_outage, per_sec)
}

/// What the engines' stocks of rate may still fill after `now` (their reservations, each to
/// its end): a store that comes back empty forgot those reservations and refills at `L`, while
/// each stock fills at its share until its next call or its ttl, whichever comes first (a
/// sidecar learns of the loss only from a call). With leases of rate, the bound's slack for a
/// flushed store (0 without them).
fn reserved_ahead(engines: &[Engine], rate: &Rate, now: u64) -> f64 {
    let mut ahead = 0.0;
    for e in engines {
        e.table.for_each(|_, b| {
            if let Some(r) = b.lock().rare().rate_lease.as_ref() {
                let left = r.until.saturating_sub(now);
                ahead += sluice_core::reserve::filled(rate, r.per_mille, left);
            }
        });
    }
    ahead
}

/// Runs `outage` on `n` engines with token leases only (`run_with` on `rate_leases()` is the
/// default policy) sharing one store that counts `n` live instances. Requests are
/// evenly spaced and go round-robin over the engines; every engine sweeps every 250 ms.
///
/// The bound is checked over every window `(s, t]` of request times: admitted in it ≤
/// `B + L·(t − s)` + the tokens leased at `s` (leased tokens were taken from the global bucket
/// before `s`; that is how leases hold `B + L·t` over `[first use, now]`, not over every window:
/// docs/architecture.md) + the slack `ledger::Owed` states, each term measured here: how far
/// the engines' last readings of the global bucket were above its true level when the outage
/// began (`Σ max(0, reading − level) / n`), for a flushed store the tokens it came back with
/// above what it held (`B − level at the end`), and what was leased after the store returned
/// while another engine had not yet charged its debt. Each window against the slack known when
/// it ends ([`Seen::worst_beyond`]).
async fn run(n: usize, outage: Outage) -> Seen {
    run_with(n, outage, &token_leases()).await
}

/// [`run`] on engines with `settings`.
async fn run_with(n: usize, outage: Outage, settings: &EngineSettings) -> Seen {
    let clock = ManualClock::at(1_000_000);
    let store = Forwarding::new(&clock, Mode::Up, n as u64);
    let engines = fleet_with(OUTAGE_CONFIG, &store, &clock, n, settings);
    let rate = Rate::per_unit(100, sluice_core::unit::Unit::Second);
    let descriptors = [d(&[("k", "v")])];
    let request = RateLimitRequest {
        domain: "o",
        descriptors: &descriptors,
        hits_addend: 1,
    };
    let start = clock.now_micros();
    let secs = |at: u64| (at - start) as f64 / 1e6;
    let mut seen = Seen {
        worst_excess: f64::MIN,
        worst_beyond: f64::MIN,
        ..Seen::default()
    };
    // The exact limiter: one bucket fed every request.
    let mut exact = B;
    let mut exact_at = start;
    let mut admitted = 0u64;
    // min over window starts s of admitted(s) − L·s + leased(s).
    let mut lowest_start = f64::MAX;
    let mut next_sweep = start + 250_000;
    let mut turn = 0usize;
    // Reservations granted since each engine's last answer, tokens a second over the fleet
    // (`reserved_since`): the slack they add accrues through the outage.
    let mut unknown_per_sec = 0.0;
    for (phase, spell) in [outage.before, outage.during, outage.after]
        .into_iter()
        .enumerate()
    {
        match phase {
            1 => {
                let (key, readings) = readings(&engines);
                let level = match &key {
                    Some(key) => store.inner.peek(key, rate).await.expect("peek"),
                    None => B,
                };
                seen.slack += readings.iter().map(|r| (r - level).max(0.0)).sum::<f64>() / n as f64;
                if let Some(key) = &key {
                    let reserved = store.inner.reserved_all(key);
                    let before;
                    (before, unknown_per_sec) =
                        reserved_since(&engines, reserved, clock.now_micros(), n);
                    seen.slack += before;
                }
                store.set(if outage.stalled {
                    Mode::TimedOut
                } else {
                    Mode::Down
                });
            }
            2 => {
                if let (true, (Some(key), _)) = (outage.flushed, readings(&engines)) {
                    let level = store.inner.peek(&key, rate).await.expect("peek");
                    seen.slack += B - level + reserved_ahead(&engines, &rate, clock.now_micros());
                    store.inner.reset(&key, b"").await.expect("flush");
                }
                store.set(Mode::Up);
            }
            _ => {}
        }
        let gap = 1_000_000 / spell.rps.max(1);
        for _ in 0..spell.millis * 1_000 / gap {
            clock.advance_micros(gap);
            let now = clock.now_micros();
            if phase == 1 {
                seen.slack += unknown_per_sec * gap as f64 / 1e6;
            }
            if now >= next_sweep {
                for e in &engines {
                    e.sweep().await;
                }
                next_sweep += 250_000;
            }
            exact = (exact + (now - exact_at) as f64 * L / 1e6).min(B);
            exact_at = now;
            let exact_admits = exact >= 1.0;
            if exact_admits {
                exact -= 1.0;
            }
            lowest_start =
                lowest_start.min(admitted as f64 - L * secs(now) + leased(&engines, now));
            turn = (turn + 1) % n;
            // Another sidecar has not charged its debt yet: what this step leases is refill
            // that debt would have taken first.
            let racing = phase == 2
                && engines
                    .iter()
                    .enumerate()
                    .any(|(i, e)| i != turn && owes(e));
            let granted = store.tally(Call::Lease).granted;
            let ok = engines[turn].decide(&request).await.overall == Code::Ok;
            admitted += u64::from(ok);
            if phase == 1 {
                seen.admitted_during += u64::from(ok);
            }
            if phase == 2 {
                seen.sent_after += 1;
                seen.denied_after += u64::from(exact_admits && !ok);
            }
            // Background refills run.
            tokio::task::yield_now().await;
            if racing {
                seen.slack += (store.tally(Call::Lease).granted - granted) as f64;
            }
            let excess = admitted as f64 - L * secs(now) - lowest_start - B;
            seen.worst_excess = seen.worst_excess.max(excess);
            seen.worst_beyond = seen.worst_beyond.max(excess - seen.slack);
        }
    }
    seen
}

/// The case, compressed: two sidecars, a hot key at 20% of its limit (10/s each on
/// 100/s), the store gone for 8 s and back, paused or restarted empty. Each sidecar spends its
/// cold lease (25 tokens) first, then its fallback admits 55, more than its share of the burst
/// (50). Before, all 50 were owed by each, although the global bucket had refilled to the burst
/// meanwhile: emptied on the first lease calls, it denied 2 of 60 requests an exact limiter
/// admits.
#[tokio::test]
async fn a_key_at_a_fifth_of_its_limit_is_not_denied_after_an_outage() {
    for flushed in [false, true] {
        let seen = run(
            2,
            Outage {
                before: Spell {
                    rps: 20,
                    millis: 3_000,
                },
                during: Spell {
                    rps: 20,
                    millis: 8_000,
                },
                after: Spell {
                    rps: 20,
                    millis: 3_000,
                },
                flushed,
                stalled: false,
            },
        )
        .await;
        assert_eq!(
            seen.denied_after, 0,
            "flushed: {flushed}: {} of {} denied after the store returned",
            seen.denied_after, seen.sent_after
        );
        assert!(seen.worst_beyond <= 1e-6, "flushed: {flushed}: {seen:?}");
    }
}

/// Demand before, during and after an outage of 0.1–8 s, each spell's rate in `rps`, its calls
/// refused or timing out.
fn outages(
    rps: std::ops::RangeInclusive<u64>,
) -> impl proptest::strategy::Strategy<Value = (usize, Outage)> {
    let spell = move |millis: std::ops::RangeInclusive<u64>| {
        (rps.clone(), millis).prop_map(|(rps, millis)| Spell { rps, millis })
    };
    (
        1usize..=3,
        spell(500..=4_000),
        spell(100..=8_000),
        spell(1_000..=4_000),
        proptest::bool::ANY,
        proptest::bool::ANY,
    )
        .prop_map(|(n, before, during, after, flushed, stalled)| {
            (
                n,
                Outage {
                    before,
                    during,
                    after,
                    flushed,
                    stalled,
                },
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(32), ..ProptestConfig::default() })]
    /// A key under its limit (5–85% of it, shifting at the outage's edges) on 1–3 sidecars,
    /// the store gone for 0.1–8 s, paused or restarted empty: after it returns, nothing is
    /// denied that the exact bucket admits, and `B + L·t` holds over every window (with the
    /// stated slack).
    #[test]
    fn under_its_limit_an_outage_denies_nothing_after_and_keeps_the_bound(
        (n, outage) in outages(5..=85)
    ) {
        let seen = on_own_runtime(run(n, outage));
        prop_assert_eq!(seen.denied_after, 0, "{} of {} denied after: {:?}", seen.denied_after, seen.sent_after, seen);
        prop_assert!(seen.worst_beyond <= 1e-6, "{:?}", seen);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(32), ..ProptestConfig::default() })]
    /// Demand up to 6× the limit before, during and after an outage of 0.1–8 s on 1–3
    /// sidecars, paused or restarted empty: `B + L·t` holds over every window (with the stated
    /// slack).
    #[test]
    fn over_its_limit_an_outage_keeps_the_bound(
        (n, outage) in outages(5..=600)
    ) {
        let seen = on_own_runtime(run(n, outage));
        prop_assert!(seen.worst_beyond <= 1e-6, "{:?}", seen);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(16), ..ProptestConfig::default() })]
    /// The two properties above with leases of rate on: under the limit, nothing denied after
    /// the outage that the exact bucket admits; over it, the bound (a flushed store's slack
    /// names the reservations it forgot, and each sidecar's, the reservations granted since
    /// its last answer: `reserved_since`).
    #[test]
    fn with_leases_of_rate_an_outage_denies_nothing_after_and_keeps_the_bound(
        (n, outage) in outages(5..=85)
    ) {
        let seen = on_own_runtime(run_with(n, outage, &rate_leases()));
        prop_assert_eq!(seen.denied_after, 0, "{} of {} denied after: {:?}", seen.denied_after, seen.sent_after, seen);
        prop_assert!(seen.worst_beyond <= 1e-6, "{:?}", seen);
    }

    /// Over the limit, each window against the slack known when it ends. Before each fallback
    /// started from at most its share of its last reading (`Terms::catch_up_fallback`), this
    /// drew starved fleets beyond the slack: 0.9 to 2.9 tokens against the whole run's slack
    /// (4 in 4 800 cases), 4.4 as each window ends (token leases' twin above: 4.6), their
    /// fallbacks banking the refill since their sidecar's last grant that the other
    /// sidecars' turns had leased. With it, 5 000 cases of each passed (2026-11-30).
    #[test]
    fn with_leases_of_rate_an_outage_keeps_the_bound_over_the_limit(
        (n, outage) in outages(5..=600)
    ) {
        let seen = on_own_runtime(run_with(n, outage, &rate_leases()));
        prop_assert!(seen.worst_beyond <= 1e-6, "{:?}", seen);
    }
}

/// A fleet the property above drew once in CI (stop 52, a random seed; 6 runs of the property
/// here did not draw it again): two sidecars, 217/s before, 104/s during a 7.7 s outage, 538/s
/// after. After the store returns, the window ending at the 18th request admitted from a lease
/// granted while the other sidecar still owed was 0.0015 of a token beyond the stated slack:
/// 18.0015 over `B + L·w` plus the leases at the window's start, with 18 tokens of slack. Kept
/// ignored as unexplained until stop 65 found it within the slack (on 69dcd15; which change
/// did it was not traced): a regression case now.
#[test]
fn a_fleet_the_property_found_stays_within_the_slack() {
    stays_within_the_slack((217, 2_240), (104, 7_741), (538, 1_000));
}

/// A second fleet the property drew (2026-11-28; it fails on 0490d27 too, before the small-burst
/// wait bound): two sidecars, 156/s before, 374/s during a 4.8 s outage, 5/s after. After the
/// store returns, a window was 0.49 of a token beyond the stated slack (5.49 against 5.0).
/// Within it since, like the one above (found at stop 65, not traced): a regression case.
#[test]
fn a_second_fleet_the_property_found_stays_within_the_slack() {
    stays_within_the_slack((156, 2_513), (374, 4_796), (5, 1_000));
}

/// Two sidecars through an outage of a paused store, each spell `(rps, millis)`: the bound
/// holds with the stated slack.
fn stays_within_the_slack(before: (u64, u64), during: (u64, u64), after: (u64, u64)) {
    let spell = |(rps, millis)| Spell { rps, millis };
    let outage = Outage {
        before: spell(before),
        during: spell(during),
        after: spell(after),
        flushed: false,
        stalled: false,
    };
    let seen = on_own_runtime(run(2, outage));
    assert!(seen.worst_beyond <= 1e-6, "{seen:?}");
}

/// Leases of rate through an outage: one sidecar at 3× the limit, 80% of it reserved, the
/// store gone for 3 s and back. The fallback's local bucket refilled at all of `L` from the
/// last grant while the stock paid the requests since at its 80%, so the outage's first
/// quarter second admitted 34, not 25, and a window was 6.4 tokens over `B + L·w` (token
/// leases: within, on the same arrivals). Now the fallback shares `L − R` and the stock pays
/// the rest, on through the outage. The second case is the one the outage property drew with leases of rate on (174 a second,
/// then 2.2 s of outage at 104): 0.02 of a token over. The third is another it drew (11 a
/// second, a 0.1 s outage, then 144), over by 0.014 while the test counted only whole leased
/// tokens as held at a window's start, not what a stock had filled (`leased`). In each, the
/// sidecar still admits its share (`L`: its stock and its fallback) through the outage: the
/// bound is not kept by denying.
#[test]
fn with_leases_of_rate_an_outage_keeps_the_bound() {
    let spell = |(rps, millis)| Spell { rps, millis };
    for (before, during, after) in [
        ((300, 3_000), (300, 3_000), (300, 2_000)),
        ((174, 1_225), (104, 2_212), (5, 1_000)),
        ((11, 2_364), (5, 100), (144, 2_438)),
    ] {
        let outage = Outage {
            before: spell(before),
            during: spell(during),
            after: spell(after),
            flushed: false,
            stalled: false,
        };
        let seen = on_own_runtime(run_with(1, outage, &rate_leases()));
        assert!(seen.worst_beyond <= 1e-6, "{outage:?}: {seen:?}");
        let share = (outage.during.rps as f64).min(L) * outage.during.millis as f64 / 1e3;
        assert!(
            seen.admitted_during as f64 >= (0.95 * share).floor(),
            "{outage:?}: {} admitted in the outage, of {share} the fallback may",
            seen.admitted_during
        );
    }
}

/// Leases of rate under the limit through an outage, its calls refused or timing out: one
/// sidecar, 26 a second, then 81 through a 6.8 s outage, then 5. Its own stock stopped at its
/// first failed call while the store kept its reservation from the bucket's refill, so its
/// fallback (sharing `L − R`) was short and its debt, charged against `L − R`, emptied the
/// bucket: a request the exact bucket admits was denied after the store returned. Now the
/// stock fills on through a failed call (`RateLease::failed`), a timed-out one too.
#[test]
fn with_leases_of_rate_a_sidecar_under_its_limit_is_not_denied_after_an_outage() {
    for stalled in [false, true] {
        let outage = Outage {
            before: Spell {
                rps: 26,
                millis: 2_000,
            },
            during: Spell {
                rps: 81,
                millis: 6_778,
            },
            after: Spell {
                rps: 5,
                millis: 1_000,
            },
            flushed: false,
            stalled,
        };
        let seen = on_own_runtime(run_with(1, outage, &rate_leases()));
        assert_eq!(seen.denied_after, 0, "stalled: {stalled}: {seen:?}");
        assert!(seen.worst_beyond <= 1e-6, "stalled: {stalled}: {seen:?}");
        assert!(
            seen.admitted_during as f64 >= (0.95 * 81.0 * 6.778f64).floor(),
            "stalled: {stalled}: {} admitted in the outage of 549 sent",
            seen.admitted_during
        );
    }
}

/// Leases of rate and a store that comes back empty (a restarted Redis without persistence):
/// it forgets every reservation and refills at `L`, while each sidecar's stock fills at its
/// share until its next call or its ttl (up to 10 s of 80% of `L`): a sidecar learns of the
/// loss only from a call. The bound's slack names that fill ([`reserved_ahead`]); with only
/// the burst a flushed store comes back with, two sidecars at 48 a second, a 0.1 s outage,
/// then 173 a second were 0.11 of a token beyond it.
#[test]
fn with_leases_of_rate_a_flushed_store_keeps_the_bound() {
    let outage = Outage {
        before: Spell {
            rps: 48,
            millis: 2_417,
        },
        during: Spell {
            rps: 29,
            millis: 100,
        },
        after: Spell {
            rps: 173,
            millis: 1_850,
        },
        flushed: true,
        stalled: false,
    };
    let seen = on_own_runtime(run_with(2, outage, &rate_leases()));
    assert!(seen.worst_beyond <= 1e-6, "{seen:?}");
}

/// The over-limit outage property with leases of rate on, the store paused, drew these:
/// three sidecars, 248 a second, a 0.45 s outage at 236, then 190: a window 0.0007 of a token
/// beyond the stated slack; and two sidecars, 292 a second, a 1.3 s outage at 15, then 206:
/// 0.097 of a token over `B + L·t` from the start. Traced (the second): one sidecar's stock paid
/// it through the outage while the other's fallback admitted its share of all of `L`, and was
/// charged after as if the store had refilled at `L`, not `L − R`. Within since the fallback
/// shares `L − R` and is charged against it, and a stock fills on through a failed call the
/// store never applied (`RateLease::failed`).
#[test]
fn with_leases_of_rate_fleets_the_property_found_stay_within_the_slack() {
    let spell = |(rps, millis)| Spell { rps, millis };
    for (n, before, during, after) in [
        (3, (248, 1_150), (236, 450), (190, 1_000)),
        (2, (292, 1_110), (15, 1_267), (206, 1_117)),
    ] {
        let outage = Outage {
            before: spell(before),
            during: spell(during),
            after: spell(after),
            flushed: false,
            stalled: false,
        };
        let seen = on_own_runtime(run_with(n, outage, &rate_leases()));
        assert!(seen.worst_beyond <= 1e-6, "{outage:?}: {seen:?}");
    }
}

/// A lease call cut off at the decision's deadline (a stalled store: the call's future is
/// dropped, no error comes back) leaves the stock filling to its reservation's end, as a
/// refused or timed-out call does (`RateLease::failed`); before, the stock stopped at the
/// call's send time and the reservation the store kept went unused. One sidecar at 3× the
/// limit (its stock 80 a second), then lease calls that take 1 s against a 20 ms deadline.
#[tokio::test]
async fn with_leases_of_rate_a_call_cut_off_at_the_deadline_leaves_the_stock_filling() {
    let clock = ManualClock::at(1_000_000);
    let store = Forwarding::new(&clock, Mode::Up, 1);
    let engines = fleet_with(OUTAGE_CONFIG, &store, &clock, 1, &rate_leases());
    let descriptors = [d(&[("k", "v")])];
    let request = RateLimitRequest {
        domain: "o",
        descriptors: &descriptors,
        hits_addend: 1,
    };
    let live = |now| {
        let mut live = false;
        engines[0]
            .table
            .for_each(|_, b| live |= b.lock().rate_leased(now));
        live
    };
    for _ in 0..900 {
        clock.advance_micros(3_333);
        engines[0].decide(&request).await;
    }
    assert!(
        live(clock.now_micros()),
        "reserved after 3 s at 3× the limit"
    );
    store.delay(Call::Lease, std::time::Duration::from_secs(1));
    store.set_timeout(Some(std::time::Duration::from_millis(20)));
    // Until the first lease call (checked right after it: a renewal the failure makes due
    // would be sent by a later decision, in the background, and answered a second later).
    let before = store.tally(Call::Lease);
    for _ in 0..60 {
        clock.advance_micros(3_333);
        engines[0].decide(&request).await;
        if store.tally(Call::Lease).calls > before.calls {
            break;
        }
    }
    let after = store.tally(Call::Lease);
    assert!(after.calls > before.calls, "a lease call was sent");
    assert_eq!(after.granted, before.granted, "and cut off, unanswered");
    let mut cut = None;
    engines[0].table.for_each(|_, b| {
        let state = b.lock();
        cut = state
            .rare()
            .rate_lease
            .as_ref()
            .map(|r| (r.outage, r.until == r.ends));
    });
    assert_eq!(cut, Some((true, true)), "(outage, filling to its end)");
    assert!(
        live(clock.now_micros()),
        "the stock fills on after a call cut off at the deadline"
    );
}
