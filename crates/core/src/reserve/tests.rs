use proptest::prelude::*;

use super::*;
use crate::unit::Unit;

/// One step of a random history: time passes, then a holder reserves or the bucket is leased.
#[derive(Debug, Clone)]
enum Op {
    /// `holder` asks for `asked` thousandths for `ttl` µs; its call was sent `sent_ago` µs
    /// before the store's now and its answer arrives `back_in` µs after.
    Reserve {
        holder: u64,
        asked: u64,
        ttl: u64,
        sent_ago: u64,
        back_in: u64,
    },
    /// Tokens leased from the bucket itself.
    Take(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..6, prop_oneof![Just(0u64), 0u64..200_000, Just(u64::MAX)],
              prop_oneof![Just(0u64), 1u64..20_000_000, Just(u64::MAX)], 0u64..50_000, 0u64..50_000)
            .prop_map(|(holder, asked, ttl, sent_ago, back_in)| Op::Reserve {
                holder, asked, ttl, sent_ago, back_in,
            }),
        2 => prop_oneof![0u64..5, 0u64..1_000].prop_map(Op::Take),
    ]
}

/// A holder's stock as the engine fills it: from the answer's arrival to its send time plus
/// the ttl, ended early at the send time of its next call.
#[derive(Debug, Clone, Copy)]
struct Filling {
    granted: u64,
    from: u64,
    until: u64,
}

/// What holders' stocks filled up to `t`.
fn filled_by(rate: &Rate, fillings: &[Filling], t: u64) -> f64 {
    fillings
        .iter()
        .map(|f| {
            let end = f.until.min(t);
            filled(rate, f.granted, end.saturating_sub(f.from))
        })
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Conservation: whatever holders ask, however late their answers arrive and however they
    /// renew, tokens leased from the bucket plus what every stock filled never pass `B + L·t`
    /// at any time; `R` never passes `L`; and once every reservation lapsed the bucket refills
    /// at `L` again (no rate is lost for good).
    #[test]
    fn reservations_and_leases_together_keep_the_bound(
        limit in prop_oneof![1u64..10, 1u64..100_000],
        burst in prop_oneof![0u64..5, 1u64..1_000],
        steps in prop::collection::vec((0u64..3_000_000, op()), 1..40),
    ) {
        let rate = Rate { burst, ..Rate::per_unit(limit, Unit::Second) };
        let start = 1_000_000u64;
        let mut bucket = BucketState::full(&rate, start);
        let mut held = Reservations::default();
        let mut now = start;
        let mut taken = 0u64;
        let mut fillings: Vec<Filling> = Vec::new();
        // Each holder's filling in progress (an index into `fillings`), and when its last
        // answer arrived (its next call is sent no earlier: one call per key at a time).
        let mut current: [Option<usize>; 6] = [None; 6];
        let mut answered = [0u64; 6];
        let bound = |t: u64| burst as f64 + limit as f64 * (t - start) as f64 / 1e6;
        for (step, op) in steps {
            now += step;
            held.advance(&mut bucket, &rate, now);
            match op {
                Op::Take(n) => {
                    taken += bucket.take_up_to(&rate, now, n);
                }
                Op::Reserve { holder, asked, ttl, sent_ago, back_in } => {
                    let h = holder as usize;
                    let sent = now.saturating_sub(sent_ago).max(answered[h]).min(now);
                    if let Some(i) = current[h] {
                        fillings[i].until = fillings[i].until.min(sent);
                    }
                    let granted = held.reserve(&rate, holder, asked, ttl, now);
                    prop_assert!(granted <= asked);
                    prop_assert!(held.granted() <= limit * RESERVABLE_PER_MILLE);
                    let arrives = now + back_in;
                    answered[h] = arrives;
                    fillings.push(Filling {
                        granted,
                        from: arrives,
                        until: sent.saturating_add(ttl.min(MAX_TTL_MICROS)),
                    });
                    current[h] = Some(fillings.len() - 1);
                }
            }
            let admitted = taken as f64 + filled_by(&rate, &fillings, now);
            prop_assert!(
                admitted <= bound(now) + 1e-6,
                "admitted {admitted} > B + L·t = {} at {now}", bound(now)
            );
        }
        // Far past every expiry: every stock has stopped, and the bucket is full again.
        let later = fillings.iter().map(|f| f.until).max().unwrap_or(now).max(now)
            + MAX_TTL_MICROS + 3_600_000_000;
        held.advance(&mut bucket, &rate, later);
        prop_assert!(held.is_empty());
        let admitted = taken as f64 + filled_by(&rate, &fillings, later);
        prop_assert!(admitted <= bound(later) + 1e-6);
        prop_assert_eq!(bucket.available(&rate), burst as f64);
    }
}

/// The store refills at `L − R` while a reservation lasts and at `L` after it lapses, and the
/// holder's stock fills at `R`: together exactly `L`.
#[test]
fn a_reservation_takes_its_rate_from_the_refill() {
    let rate = Rate::per_unit(100, Unit::Second);
    let mut bucket = BucketState::full(&rate, 0);
    let mut held = Reservations::default();
    bucket.take_up_to(&rate, 0, 100);
    // 40 a second for 2 s (of the 80 that may be reserved).
    assert_eq!(held.reserve(&rate, 7, 40_000, 2_000_000, 0), 40_000);
    held.advance(&mut bucket, &rate, 1_000_000);
    assert!((bucket.tokens - 60.0).abs() < 1e-9, "{}", bucket.tokens);
    assert!((filled(&rate, 40_000, 1_000_000) - 40.0).abs() < 1e-9);
    // At 3 s: 2 s at 60 a second, then 1 s at 100, capped at the burst.
    held.advance(&mut bucket, &rate, 1_500_000);
    assert!((bucket.tokens - 90.0).abs() < 1e-9, "{}", bucket.tokens);
    held.advance(&mut bucket, &rate, 2_050_000);
    assert!(held.is_empty());
    assert!((bucket.tokens - 100.0).abs() < 1e-9, "{}", bucket.tokens);
}

/// Asks beyond the reservable part of `L` (80%) are shared by demand once every holder has
/// renewed; the first to ask never keeps more than its share past its renewal, and an ask of 0
/// gives the reservation back.
#[test]
fn oversubscribed_asks_share_by_demand() {
    let rate = Rate::per_unit(100, Unit::Second);
    let mut held = Reservations::default();
    let ttl = 10_000_000;
    // At most 80 of the 100 a second.
    assert_eq!(held.reserve(&rate, 1, 90_000, ttl, 0), 80_000);
    // Nothing is left while the first holds it all.
    assert_eq!(held.reserve(&rate, 2, 60_000, ttl, 1), 0);
    // The first renews: its share by demand (80 of 140 asked, of 80).
    assert_eq!(held.reserve(&rate, 1, 80_000, ttl, 2), 45_714);
    assert_eq!(held.reserve(&rate, 2, 60_000, ttl, 3), 34_285);
    assert_eq!(held.granted(), 79_999);
    assert_eq!(held.reserve(&rate, 1, 0, ttl, 4), 0);
    assert_eq!(held.granted(), 34_285);
    assert!(held.held_by(1).is_none());
    // Windows and rates too large for exact Lua numbers are not reserved.
    let window = Rate {
        algorithm: Algorithm::FixedWindow,
        ..rate
    };
    assert_eq!(held.reserve(&window, 3, 1_000, ttl, 5), 0);
    let huge = Rate::per_unit(u64::MAX / 2, Unit::Second);
    assert_eq!(held.reserve(&huge, 3, 1_000, ttl, 5), 0);
}
