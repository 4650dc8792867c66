//! The whole RLQS share state machine against models of Envoy 1.40's filter: several Envoys on
//! one bucket, random demand, a store that fails or has no room at random, several limits on
//! the descriptor. Whatever happens, what all the Envoys could admit stays within every limit's
//! `B + L·t`.

use std::sync::Arc;

use proptest::prelude::{ProptestConfig, prop, prop_assert, proptest};
use proptest::strategy::Strategy as _;
use sluice_core::Clock as _;
use sluice_core::ManualClock;
use sluice_core::bucket::Rate;
use sluice_core::config::Fallback;

use super::super::tests::EnvoyModel;
use super::*;
use crate::testing::{Forwarding, Mode};
use crate::{Engine, EngineMetrics, EngineSettings, MemoryStore, Payee};

const SEC: u64 = 1_000_000;
const TICK_MICROS: u64 = TICK.as_micros() as u64;
/// Envoy 1.40 reports every 5 s.
const TICKS_PER_REPORT: usize = (5 * SEC / TICK_MICROS) as usize;

/// One tick's events for each Envoy: requests it reports (allowed, denied), and what the store
/// does during the tick.
type Tick = (Vec<(u16, u16)>, u8);

fn ticks() -> impl proptest::strategy::Strategy<Value = (usize, u64, u64, Vec<Tick>)> {
    (1usize..4, 5u64..200, 1u64..400).prop_flat_map(|(envoys, rate, minute)| {
        let tick = (
            prop::collection::vec((0u16..300, 0u16..300), envoys),
            prop::sample::select(vec![0u8, 0, 0, 0, 1, 2]),
        );
        (
            proptest::strategy::Just(envoys),
            proptest::strategy::Just(rate),
            proptest::strategy::Just(minute),
            prop::collection::vec(tick, 10..80),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn envoys_never_admit_more_than_any_limit_allows((envoys, rate, minute, ticks) in ticks()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async {
            let clock = ManualClock::at(1);
            let store = Forwarding::new(&clock, Mode::Up, 1);
            let engine = Arc::new(Engine::new(
                sluice_core::RuleSet::default(),
                store.clone(),
                Arc::new(clock.clone()),
                EngineSettings::default(),
                EngineMetrics::unregistered(),
            ));
            let per_second = Rate::per_unit(rate, sluice_core::Unit::Second);
            let per_minute = Rate::per_unit(minute, sluice_core::Unit::Minute);
            let entries = [Entry::new("tenant", "t")];
            let funds = Funds {
                engine: Arc::clone(&engine),
                payee: Payee::new(1, &entries, per_second, sluice_core::config::Mode::Strict),
                // The store-down fallback is the rule's: `deny` assigns nothing unpaid.
                fallback: Fallback::Deny,
                further: vec![Payee::new(2, &entries, per_minute, sluice_core::config::Mode::Strict)],
            };
            let id: Arc<[Entry]> = entries.to_vec().into();
            let mut shares: Vec<Share> = (0..envoys)
                .map(|i| Share::new(Arc::clone(&id), "r".into(), funds.clone(), i as u64, clock.now_micros()))
                .collect();
            let mut models: Vec<EnvoyModel> = (0..envoys).map(|_| EnvoyModel::default()).collect();
            let start = clock.now_micros();
            for (i, (reports, mode)) in ticks.iter().enumerate() {
                store.set([Mode::Up, Mode::Down, Mode::Full][usize::from(*mode)]);
                let now = clock.now_micros();
                for (k, share) in shares.iter_mut().enumerate() {
                    let (allowed, denied) = reports[k];
                    // Envoy 1.40: a first report of 0 s, then one every 5 s.
                    let elapsed = if i == 0 { 0 } else { 5 };
                    if i % TICKS_PER_REPORT == 0 {
                        share.report(u64::from(allowed), u64::from(denied), elapsed, now);
                    }
                    if let Step::Send(strategy, ttl) = share.next(now, envoys as u64).await {
                        // Delivered within the margin the prices allow for.
                        models[k].receive(strategy, ttl, now + super::super::MARGIN_MICROS / 2);
                    }
                }
                clock.advance_micros(TICK_MICROS);
            }
            let end = clock.now_micros();
            let admitted: f64 = models.into_iter().map(EnvoyModel::finish).sum();
            let t = (end - start) as f64 / 1e6;
            for (r, name) in [(per_second, "per second"), (per_minute, "per minute")] {
                let bound = r.burst as f64 + r.requests_per_unit as f64 * t / r.unit.seconds() as f64;
                prop_assert!(
                    admitted <= bound + 1e-6,
                    "{envoys} Envoys could admit {admitted:.1} > {name} B + L·t = {bound:.1}"
                );
            }
            Ok(())
        })?;
    }
}

/// Two Envoys, each offered four times the rule's rate, on a new tenant of a 1 000/s rule:
/// each reaches its fair share within one of Envoy's report intervals and keeps it, and over a
/// minute they admit at least 95% of `B + L·t`, never more (`loadtest/rlqs.sh` measures the
/// same with real Envoys).
#[test]
fn contended_shares_reach_their_fair_share_within_a_report_and_admit_95_percent() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let clock = ManualClock::at(1);
        let store = MemoryStore::new(clock.clone());
        let engine = Arc::new(Engine::new(
            sluice_core::RuleSet::default(),
            store,
            Arc::new(clock.clone()),
            EngineSettings::default(),
            EngineMetrics::unregistered(),
        ));
        let rate = Rate::per_unit(1000, sluice_core::Unit::Second);
        let entries = [Entry::new("tenant", "acme")];
        let funds = Funds {
            engine: Arc::clone(&engine),
            payee: Payee::new(1, &entries, rate, sluice_core::config::Mode::Strict),
            fallback: Fallback::Deny,
            further: vec![],
        };
        let id: Arc<[Entry]> = entries.to_vec().into();
        let start = clock.now_micros();
        let mut shares: Vec<Share> = (0..2)
            .map(|i| Share::new(Arc::clone(&id), "r".into(), funds.clone(), i, start))
            .collect();
        let mut models = [EnvoyModel::default(), EnvoyModel::default()];
        let fair = 1000.0 * 0.99 / 2.0;
        for i in 0..120 {
            let now = clock.now_micros();
            for (k, share) in shares.iter_mut().enumerate() {
                if i % TICKS_PER_REPORT == 0 {
                    let elapsed = if i == 0 { 0 } else { 5 };
                    // Envoy admitted what it could and denied the rest of 4 000/s.
                    let allowed = (share.assigned_rate() * 5.0) as u64;
                    share.report(allowed, 20_000 - allowed, elapsed, now);
                }
                if let Step::Send(strategy, ttl) = share.next(now, 2).await {
                    models[k].receive(strategy, ttl, now + super::super::MARGIN_MICROS / 2);
                }
                if now - start >= 5 * SEC {
                    let r = share.assigned_rate();
                    assert!(
                        r >= 0.95 * fair && r <= 1.03 * fair,
                        "Envoy {k} at {:.1} s: {r:.0}/s, fair {fair:.0}/s",
                        (now - start) as f64 / 1e6
                    );
                }
            }
            clock.advance_micros(TICK_MICROS);
        }
        let end = clock.now_micros();
        let admitted: f64 = models.iter().map(|m| m.admitted_by(end)).sum();
        let bound = 1000.0 + 1000.0 * (end - start) as f64 / 1e6;
        assert!(
            admitted <= bound + 1e-6,
            "{admitted:.0} > B + L·t = {bound:.0}"
        );
        assert!(
            admitted >= 0.95 * bound,
            "{admitted:.0} admitted: {:.1}% of B + L·t = {bound:.0}",
            100.0 * admitted / bound
        );
    });
}
