//! Log lines a fault can repeat (issue 41, item 9): at most one a second, counting the rest.

use super::*;

/// A store that refuses every return (issue 41, item 9): a sidecar of the soak wrote 1 890
/// `could not return leased tokens` lines in a 5 s outage. 20 sweeps 250 ms apart, returning
/// 95 leases each to a store that is down: 5 lines (one a second, the first at once), each
/// after the first saying how many it held back since the one before.
#[tokio::test]
async fn returns_a_store_refuses_write_a_line_a_second_with_what_they_held_back() {
    let clock = ManualClock::at(1);
    let store = Forwarding::new(&clock, Mode::Down, 1);
    let e = engine_on(store.clone(), &clock, EngineSettings::default());
    let lines = crate::testing::LogLines::default();
    let _logging = tracing::subscriber::set_default(lines.clone());
    let rate = Rate::per_unit(10, sluice_core::unit::Unit::Second);
    for sweep in 0..20u64 {
        let returns = (0..95)
            .map(|i| crate::table::Return {
                store_key: format!("sluice:{{k}}:{i}"),
                rate,
                tokens: 3,
                window: 0,
                renews: None,
                at: 1 + sweep * 250_000,
                ends_reservation: false,
            })
            .collect();
        e.leaser.return_tokens(returns).await;
    }
    assert_eq!(store.tally(Call::Release).calls, 1_900);
    // 94 of the first sweep's and 3 more sweeps' since each line.
    assert_eq!(
        lines.starting_with("could not return leased tokens"),
        [0, 379, 379, 379, 379]
    );
}
