//! Post-paid usage on a real Redis: reported usage goes into one global debt, whichever sidecar
//! saw it, and every sidecar's checks are denied within a lease horizon.

mod common;

use std::time::Duration;

use common::engine::{decide_hits, engine};
use sluice_engine::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_to_two_sidecars_make_one_global_debt() {
    let redis = common::Standalone::start().await;
    let stores = common::stores(&common::standalone_settings(&redis.url()), 2);
    for s in &stores {
        common::wait_connected(s).await;
    }
    let (a, b) = (engine(stores[0].clone()), engine(stores[1].clone()));
    // A budget of 1 000 tokens a minute. A sees 800 used, B 900: 1 700 in all.
    let started = std::time::Instant::now();
    assert_eq!(decide_hits(&a, "budget", "tenant", 0).await, Code::Ok);
    assert_eq!(decide_hits(&b, "budget", "tenant", 0).await, Code::Ok);
    assert_eq!(decide_hits(&a, "budget", "tenant", 800).await, Code::Ok);
    assert_eq!(
        decide_hits(&b, "budget", "tenant", 900).await,
        Code::Ok,
        "a report beyond what is left is charged, not refused"
    );
    // Both sidecars learn of the debt within a lease horizon (200 ms by default).
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(
        decide_hits(&a, "budget", "tenant", 0).await,
        Code::OverLimit
    );
    assert_eq!(
        decide_hits(&b, "budget", "tenant", 0).await,
        Code::OverLimit
    );
    // Nothing lost: the global bucket holds 1 000 - 1 700 plus what refilled meanwhile.
    let view = a
        .quota("t", &[sluice_core::Entry::new("budget", "tenant")])
        .await;
    let left = view.global_remaining.expect("read");
    let refilled = 1_000.0 / 60.0 * started.elapsed().as_secs_f64();
    assert!(
        left >= -700.0 && left <= -700.0 + refilled + 1.0,
        "global bucket at {left} (refilled at most {refilled:.1})"
    );
}
