//! One suite of bucket cases, with explicit times, run against the in-memory store and real Redis:
//! the Lua scripts and the Rust math must agree on every grant and every remaining token.

mod common;

use sluice_core::bucket::Rate;
use sluice_core::{Clock, ManualClock, Unit};
use sluice_engine::{GlobalStore, MemoryStore};
use sluice_redis::{RedisMetrics, RedisStore};

#[derive(Debug, Clone, Copy)]
enum Op {
    Lease { at: u64, want: u64 },
    Release { at: u64, tokens: u64 },
    Peek { at: u64 },
}

/// What an operation observed: (granted, remaining in millitokens).
type Seen = (u64, i64);

struct Case {
    name: &'static str,
    rate: Rate,
    ops: Vec<Op>,
}

const START: u64 = 1_700_000_000_000_000;

fn cases() -> Vec<Case> {
    use Op::*;
    let s = 1_000_000;
    vec![
        Case {
            name: "burst then refill per second",
            rate: Rate::per_unit(10, Unit::Second),
            ops: vec![
                Lease { at: START, want: 4 },
                Lease {
                    at: START,
                    want: 10,
                },
                Lease {
                    at: START + 50_000,
                    want: 1,
                },
                Lease {
                    at: START + 100_000,
                    want: 1,
                },
                Peek {
                    at: START + 150_000,
                },
                Lease {
                    at: START + 10 * s,
                    want: 100,
                },
            ],
        },
        Case {
            name: "fractional refill, odd rate",
            rate: Rate {
                requests_per_unit: 7,
                unit: Unit::Minute,
                unit_multiplier: 1,
                burst: 3,
                algorithm: sluice_core::bucket::Algorithm::TokenBucket,
            },
            ops: vec![
                Lease { at: START, want: 3 },
                Lease {
                    at: START + 8_571_428,
                    want: 1,
                },
                Lease {
                    at: START + 8_571_429,
                    want: 1,
                },
                Peek {
                    at: START + 9_000_000,
                },
                Lease {
                    at: START + 30 * s,
                    want: 5,
                },
            ],
        },
        Case {
            name: "release is capped at the burst",
            rate: Rate::per_unit(100, Unit::Hour),
            ops: vec![
                Lease {
                    at: START,
                    want: 60,
                },
                Release {
                    at: START + 1,
                    tokens: 10,
                },
                Peek { at: START + 2 },
                Release {
                    at: START + 3,
                    tokens: 500,
                },
                Lease {
                    at: START + 4,
                    want: 1_000,
                },
            ],
        },
        Case {
            name: "clock going backwards adds nothing",
            rate: Rate::per_unit(5, Unit::Second),
            ops: vec![
                Lease {
                    at: START + 5 * s,
                    want: 5,
                },
                Lease {
                    at: START + 4 * s,
                    want: 1,
                },
                Peek {
                    at: START + 5 * s + 200_000,
                },
                Lease {
                    at: START + 5 * s + 200_000,
                    want: 2,
                },
            ],
        },
        Case {
            name: "zero rate never refills",
            rate: Rate {
                requests_per_unit: 0,
                unit: Unit::Day,
                unit_multiplier: 1,
                burst: 2,
                algorithm: sluice_core::bucket::Algorithm::TokenBucket,
            },
            ops: vec![
                Lease { at: START, want: 1 },
                Lease {
                    at: START + 3_600 * s,
                    want: 5,
                },
                Peek {
                    at: START + 7_200 * s,
                },
            ],
        },
        Case {
            name: "large burst, per-year unit",
            rate: Rate {
                requests_per_unit: 1_000_000,
                unit: Unit::Year,
                unit_multiplier: 1,
                burst: 4_000_000_000,
                algorithm: sluice_core::bucket::Algorithm::TokenBucket,
            },
            ops: vec![
                Lease {
                    at: START,
                    want: 3_999_999_999,
                },
                Lease {
                    at: START + 31_536 * s,
                    want: 2_000,
                },
                Release {
                    at: START + 31_537 * s,
                    tokens: 7,
                },
                Peek {
                    at: START + 31_538 * s,
                },
            ],
        },
    ]
}

async fn on_memory(case: &Case) -> Vec<Seen> {
    let clock = ManualClock::at(START);
    let store = MemoryStore::new(clock.clone());
    let key = format!("mem:{}", case.name);
    let mut seen = Vec::new();
    let set = |at: u64| {
        let now = clock.now_micros();
        if at >= now {
            clock.advance_micros(at - now);
        }
        at >= now
    };
    for op in &case.ops {
        match *op {
            Op::Lease { at, want } => {
                assert!(set(at) || at < clock.now_micros());
                // The memory store reads its own clock; a case that goes backwards runs at the later time,
                // which the bucket treats the same (no refill for a clock that went back).
                let g = store.lease(&key, case.rate, want).await.expect("lease");
                seen.push((g.granted, (g.remaining * 1000.0).floor() as i64));
            }
            Op::Release { at, tokens } => {
                set(at);
                store
                    .release(&key, case.rate, tokens, 0)
                    .await
                    .expect("release");
                let left = store.peek(&key, case.rate).await.expect("peek");
                seen.push((0, (left * 1000.0).floor() as i64));
            }
            Op::Peek { at } => {
                set(at);
                let left = store.peek(&key, case.rate).await.expect("peek");
                seen.push((0, (left * 1000.0).floor() as i64));
            }
        }
    }
    seen
}

async fn on_redis(store: &RedisStore, prefix: &str, case: &Case) -> Vec<Seen> {
    let key = format!("sluice:{{{prefix}:{}}}", case.name);
    let mut seen = Vec::new();
    for op in &case.ops {
        match *op {
            Op::Lease { at, want } => {
                let g = store
                    .lease_at(&key, case.rate, want, Some(at))
                    .await
                    .expect("lease");
                seen.push((g.granted, (g.remaining * 1000.0).round() as i64));
            }
            Op::Release { at, tokens } => {
                let left = store
                    .release_at(&key, case.rate, tokens, 0, Some(at))
                    .await
                    .expect("release");
                seen.push((0, (left * 1000.0).round() as i64));
            }
            Op::Peek { at } => {
                let left = store
                    .peek_at(&key, case.rate, Some(at))
                    .await
                    .expect("peek");
                seen.push((0, (left * 1000.0).round() as i64));
            }
        }
    }
    seen
}

async fn conformance(store: &RedisStore, prefix: &str) {
    for case in cases() {
        if case.name.contains("backwards") {
            // The memory store's clock cannot go back; check Redis against the bucket rule directly:
            // the lease at the earlier time gets nothing, and the refill counts from the later time.
            let seen = on_redis(store, prefix, &case).await;
            assert_eq!(seen[0].0, 5, "{}", case.name);
            assert_eq!(seen[1].0, 0, "{}: an earlier `now` adds nothing", case.name);
            assert_eq!(
                seen[2],
                (0, 1_000),
                "{}: 200 ms at 5/s from the latest time",
                case.name
            );
            assert_eq!(seen[3].0, 1, "{}", case.name);
            continue;
        }
        let memory = on_memory(&case).await;
        let redis = on_redis(store, prefix, &case).await;
        assert_eq!(
            redis, memory,
            "case '{}': Redis (left) and memory (right) disagree",
            case.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_and_rust_agree_on_standalone_redis() {
    let redis = common::Standalone::start().await;
    let store = RedisStore::start(
        common::standalone_settings(&redis.url()),
        RedisMetrics::unregistered(),
    )
    .expect("store");
    conformance(&store, "standalone").await;
    expiry_follows_time_to_full(&store, &redis.url()).await;
}

/// A bucket expires once it would be full again (full and absent are the same), and never if it
/// never refills: expiring a drained zero-rate bucket would refill it.
async fn expiry_follows_time_to_full(store: &RedisStore, url: &str) {
    let mut conn = redis::Client::open(url)
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut pttl = async |key: &str| -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("PTTL")
    };
    let cases = [
        (
            "sluice:{ttl:fast}",
            Rate::per_unit(10, Unit::Second),
            5,
            1_000..=1_600,
        ),
        (
            "sluice:{ttl:zero}",
            Rate {
                requests_per_unit: 0,
                unit: Unit::Second,
                unit_multiplier: 1,
                burst: 5,
                algorithm: sluice_core::bucket::Algorithm::TokenBucket,
            },
            5,
            -1..=-1,
        ),
        // 4 294 967 295 tokens at one a day: longer than any expiry Redis takes; kept.
        (
            "sluice:{ttl:slow}",
            Rate {
                requests_per_unit: 1,
                unit: Unit::Day,
                unit_multiplier: 1,
                burst: u64::from(u32::MAX),
                algorithm: sluice_core::bucket::Algorithm::TokenBucket,
            },
            u64::from(u32::MAX),
            -1..=-1,
        ),
    ];
    for (key, rate, take, expected) in cases {
        let grant = store.lease(key, rate, take).await.expect("lease");
        assert_eq!(grant.granted, take, "{key}");
        let ttl = pttl(key).await;
        assert!(
            expected.contains(&ttl),
            "{key}: PTTL {ttl}, expected {expected:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_and_rust_agree_on_a_redis_cluster() {
    let cluster = common::Cluster::start().await;
    let store = RedisStore::start(
        common::cluster_settings(cluster.nodes()),
        RedisMetrics::unregistered(),
    )
    .expect("store");
    common::wait_connected(&store).await;
    conformance(&store, "cluster").await;
}
