//! The live-instance count on a real Redis (`heartbeat.lua`): every instance of a fleet counts
//! all of them, a large fleet's heartbeats stay within `FLEET_HEARTBEATS_PER_SEC` (20 a second)
//! whatever its size, and an instance that leaves is no longer counted.

mod common;

use std::sync::Arc;
use std::time::Duration;

use sluice_engine::GlobalStore;
use sluice_redis::RedisStore;

async fn wait_for(stores: &[Arc<RedisStore>], live: u64, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    while stores.iter().any(|s| s.live_instances() != live) {
        assert!(
            std::time::Instant::now() < deadline,
            "not every instance counts {live} live after {within:?}: {:?}",
            stores
                .iter()
                .map(|s| s.live_instances())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_fleet_beats_within_the_budget_and_counts_itself() {
    let redis = common::Standalone::start().await;
    // 60 instances configured to beat every 200 ms would send 300 heartbeats a second.
    let stores = common::stores(&common::standalone_settings(&redis.url()), 60);
    // The first beats are at the configured interval; by 3 s each was told 60/20 = 3 s.
    wait_for(&stores, 60, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = common::script_calls(&redis.url()).await;
    // Every instance keeps counting all 60 while it beats only every 3 s.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let counts: Vec<u64> = stores.iter().map(|s| s.live_instances()).collect();
        assert!(counts.iter().all(|&n| n == 60), "{counts:?}");
    }
    let beats = common::script_calls(&redis.url()).await - before;
    // 6 s at 20 a second is 120; at the configured interval it would be 1 800.
    assert!(
        (60..=180).contains(&beats),
        "{beats} heartbeats in 6 s from 60 instances (budget: 20 a second)"
    );

    // Half the fleet leaves: the rest count 30 after their next heartbeat (every 3 s, then
    // 30/20 = 1.5 s), and nobody still beating is dropped meanwhile.
    let (gone, rest) = stores.split_at(30);
    for s in gone {
        s.shutdown().await;
    }
    wait_for(rest, 30, Duration::from_secs(5)).await;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let counts: Vec<u64> = rest.iter().map(|s| s.live_instances()).collect();
        assert!(counts.iter().all(|&n| n == 30), "{counts:?}");
    }
    for s in rest {
        s.shutdown().await;
    }
}

/// A fleet that starts together counts itself at once, not a heartbeat interval later: the
/// first instance read 1 live, and without its quick first beats it kept sizing its share of
/// every burst for a fleet of 1 for the whole interval (5 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_starting_together_counts_itself_within_its_quick_first_beats() {
    let redis = common::Standalone::start().await;
    let settings = sluice_core::config::RedisSettings {
        heartbeat_interval: sluice_core::config::HumanDuration(Duration::from_secs(5)),
        ..common::standalone_settings(&redis.url())
    };
    let mut stores = Vec::new();
    for _ in 0..10 {
        stores.extend(common::stores(&settings, 1));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // Beats at 0.1, 0.3, 0.7, 1.5 and 3.1 s after each start: every instance has counted the
    // last one by about 1.5 s after it started; at the interval it would take 5 s.
    wait_for(&stores, 10, Duration::from_millis(2_500)).await;
    for s in stores {
        s.shutdown().await;
    }
}
