//! Random operation sequences, with extreme values, against real Redis and the in-memory store:
//! the Lua scripts must answer exactly as the Rust bucket math does. The engine's invariants are
//! property-tested over the in-memory store (`crates/engine/tests/ledger.rs`); this suite is what
//! carries them over to Redis and Redis Cluster.

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use sluice_core::bucket::{Algorithm, Rate};
use sluice_core::config::{HumanDuration, RedisSettings};
use sluice_core::{ManualClock, Unit};
use sluice_engine::{GlobalStore, LeaseAsk, LeaseGrant, MemoryStore, ReserveAsk};
use sluice_redis::{RedisMetrics, RedisStore};

#[derive(Debug, Clone, Copy)]
enum Op {
    Lease(u64),
    /// A lease of which only `least` may come from below half the burst, with a turn
    /// `turn_gap` after the last one if it grants fewer than `starved_below` (or than `least`
    /// while turns are to come), the first of a queue that has run out when the bucket holds
    /// what it lacks (no more than `next_needs`).
    LeaseAsking(LeaseAsk),
    Release(u64),
    Peek,
    /// Usage after the fact: (tokens, max_debt).
    Charge(u64, u64),
    /// Close the window of the last grant (a counted denial).
    Close,
}

#[derive(Debug, Clone)]
struct Case {
    rate: Rate,
    /// (microseconds since the previous operation, operation)
    ops: Vec<(u64, Op)>,
}

/// Amounts from nothing to `u64::MAX`, with the burst's neighbourhood well covered.
fn amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..4,
        0u64..100,
        Just(u64::from(u32::MAX)),
        Just(u64::MAX / 2 + 1),
        Just(u64::MAX),
    ]
}

/// A lease of rate asked with a lease, or none: one of three holders (instances), any amount,
/// a ttl that lapses within the sequence or never does.
fn reservation() -> impl Strategy<Value = Option<ReserveAsk>> {
    prop_oneof![
        1 => Just(None),
        2 => (
            1u64..4,
            prop_oneof![amount(), 1u64..50_000_000],
            prop_oneof![Just(0u64), 1u64..5_000_000, Just(u64::MAX)],
            prop_oneof![Just(0u64), amount()],
        )
            .prop_map(|(holder, per_mille, ttl_micros, give_back_milli)| Some(ReserveAsk {
                holder,
                per_mille,
                ttl_micros,
                give_back_milli,
            })),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let rate = (
        prop_oneof![
            Just(0u64),
            1u64..20,
            1u64..1_000_000,
            Just(u64::from(u32::MAX))
        ],
        prop::sample::select(Unit::ALL.to_vec()),
        prop_oneof![Just(1u32), 2u32..100, Just(u32::MAX)],
        prop_oneof![
            Just(0u64),
            1u64..10,
            1u64..100_000,
            Just(u64::from(u32::MAX))
        ],
        prop::sample::select(vec![
            Algorithm::TokenBucket,
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
        ]),
    )
        .prop_map(
            |(requests_per_unit, unit, unit_multiplier, burst, algorithm)| Rate {
                requests_per_unit,
                unit,
                // Periods up to the longest a config accepts (100 years).
                unit_multiplier: unit_multiplier.min(
                    u32::try_from(sluice_core::bucket::MAX_PERIOD_SECS / unit.seconds())
                        .unwrap_or(u32::MAX),
                ),
                burst,
                algorithm,
            },
        );
    let op = prop_oneof![
        4 => amount().prop_map(Op::Lease),
        // Gaps up to 1 000 s (the engine's are at most a second; far below 2^53 µs).
        2 => lease_asking(
            amount(),
            amount(),
            prop_oneof![Just(0u64), 1u64..1_000_000, Just(1_000_000_000)],
            amount(),
            reservation(),
            amount(),
            amount(),
        ),
        2 => amount().prop_map(Op::Release),
        1 => Just(Op::Peek),
        1 => Just(Op::Close),
        2 => (amount(), prop_oneof![
            0u64..4,
            0u64..100_000,
            Just(u64::from(u32::MAX)),
            Just(1u64 << 53)
        ]).prop_map(|(n, debt)| Op::Charge(n, debt)),
    ];
    let step = prop_oneof![
        Just(0u64),
        0u64..1_000,
        0u64..5_000_000,
        Just(86_400_000_000)
    ];
    (rate, prop::collection::vec((step, op), 1..25)).prop_map(|(rate, ops)| Case { rate, ops })
}

/// Starved callers of a token bucket that refills within their turn gaps: the key's queue
/// (`next_turn`, `ready_in`), which `case`'s rates and units seldom reach.
fn queue_case() -> impl Strategy<Value = Case> {
    let rate = (1u64..2_000, 1u64..20).prop_map(|(limit, burst)| Rate {
        burst,
        ..Rate::per_unit(limit, Unit::Second)
    });
    let op = lease_asking(
        0u64..4,
        0u64..4,
        1u64..200_000,
        0u64..6,
        Just(None),
        0u64..6,
        prop_oneof![Just(u64::MAX), 0u64..6],
    );
    (rate, prop::collection::vec((0u64..20_000, op), 1..25))
        .prop_map(|(rate, ops)| Case { rate, ops })
}

/// Leases of rate at every level of the bucket: three holders asking on `L`'s scale (their
/// asks crossing 1.5 `L`, where a starved key may reserve all of its reservable part), between
/// leases that drain the bucket through a quarter and three quarters of its burst, between
/// which what may be reserved is in proportion (`sluice_core::reserve::reservable`): `case`'s
/// amounts seldom land there.
fn reservation_case() -> impl Strategy<Value = Case> {
    (1u64..200, 4u64..200)
        .prop_flat_map(|(limit, burst)| {
            let rate = Rate {
                burst,
                ..Rate::per_unit(limit, Unit::Second)
            };
            let reserve = (
                1u64..4,
                0u64..=limit * 1_000,
                prop_oneof![1u64..5_000_000, Just(u64::MAX)],
                prop_oneof![Just(0u64), 0u64..burst * 1_000],
            )
                .prop_map(
                    |(holder, per_mille, ttl_micros, give_back_milli)| ReserveAsk {
                        holder,
                        per_mille,
                        ttl_micros,
                        give_back_milli,
                    },
                );
            let op = prop_oneof![
                3 => (0u64..=burst / 2, reserve).prop_map(|(want, r)| {
                    Op::LeaseAsking(LeaseAsk {
                        reserve: Some(r),
                        ..LeaseAsk::exactly(want)
                    })
                }),
                1 => (0u64..=burst).prop_map(Op::Lease),
            ];
            (
                Just(rate),
                prop::collection::vec((0u64..300_000, op), 1..25),
            )
        })
        .prop_map(|(rate, ops)| Case { rate, ops })
}

/// An `Op::LeaseAsking` drawn field by field (`LeaseAsk`'s fields, in its order).
fn lease_asking(
    want: impl Strategy<Value = u64>,
    least: impl Strategy<Value = u64>,
    turn_gap: impl Strategy<Value = u64>,
    starved_below: impl Strategy<Value = u64>,
    reserve: impl Strategy<Value = Option<ReserveAsk>>,
    queue_below: impl Strategy<Value = u64>,
    next_needs: impl Strategy<Value = u64>,
) -> impl Strategy<Value = Op> {
    let fields = (
        want,
        least,
        turn_gap,
        starved_below,
        reserve,
        queue_below,
        next_needs,
    );
    fields.prop_map(|(want, least, turn_gap, starved, reserve, queue, next)| {
        Op::LeaseAsking(LeaseAsk {
            want,
            least,
            turn_gap,
            starved_below: starved,
            reserve,
            queue_below: queue,
            next_needs: next,
        })
    })
}

/// What a grant shows, with its remaining tokens as `milli` thousandths.
fn seen_grant(g: &LeaseGrant, milli: i64) -> Seen {
    (
        g.granted,
        milli,
        g.window,
        g.ends_in,
        g.turn_in,
        g.reserved,
        g.reserved_all,
        g.reserved_ends_in,
    )
}

const START: u64 = 1_700_000_000_000_000;

/// What each operation saw: (granted, remaining millitokens, the grant's window and its end,
/// the caller's turn, its reservation, every reservation of the bucket and when the last of
/// them lapses at the latest).
type Seen = (
    u64,
    i64,
    u64,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    u64,
    u64,
);

/// What each operation saw on the in-memory store. Releases name the window of the last grant.
async fn on_memory(c: &Case) -> Vec<Seen> {
    let clock = ManualClock::at(START);
    let store = MemoryStore::new(clock.clone());
    let mut seen = Vec::new();
    let mut window = 0;
    for &(step, op) in &c.ops {
        clock.advance_micros(step);
        let milli = |t: f64| (t * 1000.0).floor() as i64;
        seen.push(match op {
            Op::Lease(want) => {
                let g = store.lease("k", c.rate, want).await.expect("lease");
                window = g.window;
                seen_grant(&g, milli(g.remaining))
            }
            Op::LeaseAsking(ask) => {
                let g = store.lease_asking("k", c.rate, ask).await.expect("lease");
                window = g.window;
                seen_grant(&g, milli(g.remaining))
            }
            Op::Release(n) => {
                store
                    .release("k", c.rate, n, window)
                    .await
                    .expect("release");
                let left = store.peek("k", c.rate).await.expect("peek");
                (0, milli(left), 0, None, None, None, 0, 0)
            }
            Op::Peek => {
                let left = store.peek("k", c.rate).await.expect("peek");
                (0, milli(left), 0, None, None, None, 0, 0)
            }
            Op::Close => {
                store
                    .close_window("k", c.rate, window)
                    .await
                    .expect("close");
                let left = store.peek("k", c.rate).await.expect("peek");
                (0, milli(left), 0, None, None, None, 0, 0)
            }
            Op::Charge(n, debt) => {
                let g = store.charge("k", c.rate, n, debt).await.expect("charge");
                seen_grant(&g, milli(g.remaining))
            }
        });
    }
    seen
}

async fn on_redis(store: &RedisStore, key: &str, c: &Case) -> Vec<Seen> {
    let mut now = START;
    let mut seen = Vec::new();
    let mut window = 0;
    for &(step, op) in &c.ops {
        now += step;
        let milli = |t: f64| (t * 1000.0).round() as i64;
        seen.push(match op {
            Op::Lease(want) => {
                let g = store
                    .lease_at(key, c.rate, want, Some(now))
                    .await
                    .expect("lease");
                window = g.window;
                seen_grant(&g, milli(g.remaining))
            }
            Op::LeaseAsking(ask) => {
                let holder = ask.reserve.map_or(0, |r| r.holder);
                let g = store
                    .lease_as_at(key, c.rate, ask, holder, Some(now))
                    .await
                    .expect("lease");
                window = g.window;
                seen_grant(&g, milli(g.remaining))
            }
            Op::Release(n) => {
                let left = store
                    .release_at(key, c.rate, n, window, Some(now))
                    .await
                    .expect("release");
                (0, milli(left), 0, None, None, None, 0, 0)
            }
            Op::Peek => {
                let left = store.peek_at(key, c.rate, Some(now)).await.expect("peek");
                (0, milli(left), 0, None, None, None, 0, 0)
            }
            Op::Close => {
                let left = store
                    .close_at(key, c.rate, window, Some(now))
                    .await
                    .expect("close");
                (0, milli(left), 0, None, None, None, 0, 0)
            }
            Op::Charge(n, debt) => {
                let g = store
                    .charge_at(key, c.rate, n, debt, Some(now))
                    .await
                    .expect("charge");
                seen_grant(&g, milli(g.remaining))
            }
        });
    }
    seen
}

/// Runs the cases of every strategy (`case`, `queue_case`, `reservation_case`; each with a
/// fixed seed, then a random one) against `store`.
fn agree(rt: &tokio::runtime::Runtime, store: &RedisStore, prefix: &str) {
    let n = std::sync::atomic::AtomicU64::new(0);
    let seeds = [RngSeed::Fixed(0x5eed), RngSeed::Random];
    for (seed, cases) in seeds.into_iter().flat_map(|seed| {
        [
            (seed, case().boxed()),
            (seed, queue_case().boxed()),
            (seed, reservation_case().boxed()),
        ]
    }) {
        let mut runner = TestRunner::new(Config {
            cases: 64,
            rng_seed: seed,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&cases, |c| {
                let i = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let key = format!("sluice:{{{prefix}:{i}}}");
                let (memory, redis) =
                    rt.block_on(async { (on_memory(&c).await, on_redis(store, &key, &c).await) });
                prop_assert_eq!(redis, memory, "Redis (left) and memory (right) disagree");
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{prefix}: {e}"));
    }
}

/// An error must fail its own case, not open the breaker and fail every later one.
fn never_open(settings: RedisSettings) -> RedisSettings {
    RedisSettings {
        breaker_failures: u32::MAX,
        timeout: HumanDuration(std::time::Duration::from_secs(2)),
        ..settings
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn random_sequences_agree_on_standalone_redis() {
    let rt = runtime();
    // Containers stop from their Drop, which needs the runtime: the guard outlives them.
    let _context = rt.enter();
    let redis = rt.block_on(common::Standalone::start());
    let store = rt.block_on(async {
        RedisStore::start(
            never_open(common::standalone_settings(&redis.url())),
            RedisMetrics::unregistered(),
        )
        .expect("store")
    });
    agree(&rt, &store, "props");
}

#[test]
fn random_sequences_agree_on_a_redis_cluster() {
    let rt = runtime();
    let _context = rt.enter();
    let cluster = rt.block_on(common::Cluster::start());
    let store = rt.block_on(async {
        let store = RedisStore::start(
            never_open(common::cluster_settings(cluster.nodes())),
            RedisMetrics::unregistered(),
        )
        .expect("store");
        common::wait_connected(&store).await;
        store
    });
    agree(&rt, &store, "props");
}
