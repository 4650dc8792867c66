//! Leases of rate on a real Redis (issue 42): a bucket with a live reservation refills more
//! slowly, so Redis must not forget it as "full" (an absent bucket is full and reserves
//! nothing) before the reservation lapses and the bucket has refilled; and a reservation given
//! back frees its rate at once. The arithmetic itself is the Lua = Rust suite's
//! (`conformance_props.rs`).

mod common;

use sluice_core::Unit;
use sluice_core::bucket::Rate;
use sluice_engine::{LeaseAsk, ReserveAsk};
use sluice_redis::{RedisMetrics, RedisStore};

const KEY: &str = "sluice:{r|user=alice}";

async fn pttl(url: &str, key: &str) -> i64 {
    let client = redis::Client::open(url).expect("client");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut c)
        .await
        .expect("PTTL")
}

fn reserving(want: u64, per_mille: u64, ttl_micros: u64) -> LeaseAsk {
    LeaseAsk {
        reserve: Some(ReserveAsk {
            holder: 7,
            per_mille,
            ttl_micros,
            give_back_milli: 0,
        }),
        ..LeaseAsk::exactly(want)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_bucket_outlives_its_reservation_and_a_release_frees_the_rate() {
    let redis = common::Standalone::start().await;
    let url = redis.url();
    let store = RedisStore::start(
        common::standalone_settings(&url),
        RedisMetrics::unregistered(),
    )
    .expect("store");
    common::wait_connected(&store).await;
    let rate = Rate::per_unit(100, Unit::Second);

    // Full, with 50 of the 100 a second reserved for 30 s: kept at least that long.
    let g = store
        .lease_as_at(KEY, rate, reserving(0, 50_000, 30_000_000), 7, None)
        .await
        .expect("reserve");
    assert_eq!(g.reserved, Some(50_000));
    let ttl = pttl(&url, KEY).await;
    assert!(
        ttl >= 30_000,
        "a full bucket with a reservation expires in {ttl} ms"
    );

    // Emptied by a lease that does not renew it: it refills at 50 a second while the
    // reservation lasts. (A renewal in the same call would find the bucket drained and be
    // granted nothing: Redis reserves from slack only, `sluice_core::reserve::reservable`.)
    let g = store
        .lease_as_at(KEY, rate, LeaseAsk::exactly(100), 7, None)
        .await
        .expect("lease");
    assert_eq!(g.granted, 100);
    let emptied = std::time::Instant::now();
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let refilled = store.peek_at(KEY, rate, None).await.expect("peek");
    let per_sec = refilled / emptied.elapsed().as_secs_f64();
    assert!(
        (35.0..=65.0).contains(&per_sec),
        "refills at 50 a second, not 100: {per_sec:.1}"
    );

    // Given back (an ask of 0): the bucket refills at all of L again.
    store
        .lease_as_at(KEY, rate, reserving(0, 0, 0), 7, None)
        .await
        .expect("release");
    let before = store.peek_at(KEY, rate, None).await.expect("peek");
    let from = std::time::Instant::now();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let after = store.peek_at(KEY, rate, None).await.expect("peek");
    let per_sec = (after - before) / from.elapsed().as_secs_f64();
    assert!(
        per_sec >= 80.0 || after >= 100.0,
        "refills at 100 a second once given back: {per_sec:.1}"
    );

    // Drained again, a reservation asked for under 1.5 L is granted nothing, and one that
    // marks the key starved (150 of 100 a second asked) the reservable 80.
    let g = store
        .lease_as_at(KEY, rate, reserving(100, 50_000, 30_000_000), 7, None)
        .await
        .expect("lease");
    assert_eq!(g.reserved, Some(0), "drained: {g:?}");
    let g = store
        .lease_as_at(KEY, rate, reserving(0, 150_000, 30_000_000), 7, None)
        .await
        .expect("lease");
    assert_eq!(g.reserved, Some(80_000), "starved: {g:?}");
}
