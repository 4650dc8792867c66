use proptest::prelude::*;

use super::*;
use crate::unit::Unit;

/// One step of a random history: time passes, then a holder reserves or the bucket is leased.
#[derive(Debug, Clone)]
enum Op {
    /// `holder` asks for `asked` thousandths for `ttl` µs; its call was sent `sent_ago` µs
    /// before the store's now and its answer arrives `back_in` µs after; its old stock had
    /// filled `filled_late` µs past its start (other decisions filled it while this one
    /// waited), up to the store's now.
    Reserve {
        holder: u64,
        asked: u64,
        ttl: u64,
        sent_ago: u64,
        back_in: u64,
        filled_late: u64,
    },
    /// Tokens leased from the bucket itself.
    Take(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..6, prop_oneof![Just(0u64), 0u64..200_000, Just(u64::MAX)],
              prop_oneof![Just(0u64), 1u64..20_000_000, Just(u64::MAX)], 0u64..50_000, 0u64..50_000,
              prop_oneof![Just(0u64), 0u64..100_000])
            .prop_map(|(holder, asked, ttl, sent_ago, back_in, filled_late)| Op::Reserve {
                holder, asked, ttl, sent_ago, back_in, filled_late,
            }),
        2 => prop_oneof![0u64..5, 0u64..1_000].prop_map(Op::Take),
    ]
}

/// The tokens a bucket of these tests' rate (100 a second, burst 100) holds when a call
/// reserves, where a test is about the arithmetic of a grant, not about what may be reserved:
/// full, so the whole reservable part may ([`reservable`]).
const FULL: f64 = 100.0;

/// A holder's stock as the engine fills it: from the answer's arrival to its send time plus
/// the ttl, ended early at the send time of its next call; and, when a call renews a live
/// reservation, its round trip at the lesser of the two rates, up to where either ends
/// (`RateLease::granted` in the engine).
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
        // Each holder's filling in progress (an index into `fillings`). A call's send time is
        // its decision's start, which can be before the previous call's answer (the decision
        // waited for that call, one per key at a time): the engine's case.
        let mut current: [Option<usize>; 6] = [None; 6];
        let bound = |t: u64| burst as f64 + limit as f64 * (t - start) as f64 / 1e6;
        for (step, op) in steps {
            now += step;
            held.advance(&mut bucket, &rate, now);
            match op {
                Op::Take(n) => {
                    taken += bucket.take_up_to(&rate, now, n);
                }
                Op::Reserve { holder, asked, ttl, sent_ago, back_in, filled_late } => {
                    let h = holder as usize;
                    let sent = now.saturating_sub(sent_ago);
                    // The old reservation: its rate, where its stock has filled to (never
                    // before the send, never past the store's now) and where it ends. The stock
                    // stops there: what filled stays filled.
                    let old = current[h].map(|i| {
                        let f = fillings[i];
                        let filled_to = f.from.saturating_add(filled_late).min(now).max(sent);
                        fillings[i].until = f.until.min(filled_to);
                        (f.granted, filled_to, f.until)
                    });
                    let granted = held.reserve(
                        &rate, holder, asked, ttl, now, bucket.tokens,
                    );
                    prop_assert!(granted <= asked);
                    prop_assert!(held.granted() <= limit * RESERVABLE_PER_MILLE);
                    let arrives = now + back_in;
                    if let Some((was, filled_to, ends)) = old {
                        // The round trip, from where the old stock has filled to.
                        let from = filled_to;
                        let gap_end = arrives
                            .min(ends)
                            .min(sent.saturating_add(ttl.min(MAX_TTL_MICROS)));
                        if was > 0 && granted > 0 && gap_end > from {
                            fillings.push(Filling { granted: was.min(granted), from, until: gap_end });
                        }
                    }
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
    assert_eq!(held.reserve(&rate, 7, 40_000, 2_000_000, 0, FULL), 40_000);
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

/// A renewal's round trip: the store ends the old reservation and starts the new one when the
/// call reaches it, somewhere between the holder's send and its answer, so the holder may fill
/// that stretch at the lesser of the two rates, never the greater. Drained at 0, 80 a second
/// reserved for 10 s, renewed at 10 a second by a call sent at 1 s, taken by the store at
/// 1.025 s and answered at 1.05 s: what can have been admitted by 1.05 s is 203.25 of the
/// bound's 205 at the lesser rate, 206.75 at the greater.
#[test]
fn a_renewal_fills_its_round_trip_at_the_lesser_rate() {
    let rate = Rate::per_unit(100, Unit::Second);
    let mut bucket = BucketState::full(&rate, 0);
    let mut held = Reservations::default();
    let taken = bucket.take_up_to(&rate, 0, 100) as f64;
    assert_eq!(held.reserve(&rate, 7, 80_000, 10_000_000, 0, FULL), 80_000);
    held.advance(&mut bucket, &rate, 1_025_000);
    assert_eq!(
        held.reserve(&rate, 7, 10_000, 10_000_000, 1_025_000, FULL),
        10_000
    );
    held.advance(&mut bucket, &rate, 1_050_000);
    let stock_to_send = filled(&rate, 80_000, 1_000_000);
    let could_admit =
        |gap_rate: u64| taken + bucket.tokens + stock_to_send + filled(&rate, gap_rate, 50_000);
    let bound = 100.0 + 100.0 * 1.05;
    assert!(
        (could_admit(10_000) - 203.25).abs() < 1e-9,
        "{}",
        could_admit(10_000)
    );
    assert!(could_admit(10_000) <= bound);
    assert!(
        could_admit(80_000) > bound,
        "the greater rate would pass the bound"
    );
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
    assert_eq!(held.reserve(&rate, 1, 90_000, ttl, 0, FULL), 80_000);
    // Nothing is left while the first holds it all.
    assert_eq!(held.reserve(&rate, 2, 60_000, ttl, 1, FULL), 0);
    // The first renews: its share by demand (80 of 140 asked, of 80).
    assert_eq!(held.reserve(&rate, 1, 80_000, ttl, 2, FULL), 45_714);
    assert_eq!(held.reserve(&rate, 2, 60_000, ttl, 3, FULL), 34_285);
    assert_eq!(held.granted(), 79_999);
    assert_eq!(held.reserve(&rate, 1, 0, ttl, 4, FULL), 0);
    assert_eq!(held.granted(), 34_285);
    assert!(held.held_by(1).is_none());
    // Windows and rates too large for exact Lua numbers are not reserved.
    let window = Rate {
        algorithm: Algorithm::FixedWindow,
        ..rate
    };
    assert_eq!(held.reserve(&window, 3, 1_000, ttl, 5, FULL), 0);
    let huge = Rate::per_unit(u64::MAX / 2, Unit::Second);
    assert_eq!(held.reserve(&huge, 3, 1_000, ttl, 5, FULL), 0);
}

/// What may be reserved follows the bucket's slack: all of the reservable part (80 of 100 a
/// second) from three quarters of the burst up, none below a quarter, in proportion between;
/// and all of it, whatever the bucket holds, once the asks reach one and a half times `L` (a
/// starved key, whose stocks are spent as they fill).
#[test]
fn what_may_be_reserved_follows_the_slack_unless_the_key_is_starved() {
    let rate = Rate::per_unit(100, Unit::Second);
    let under = 90_000.0;
    assert_eq!(reservable(&rate, 100.0, under), 80_000);
    assert_eq!(reservable(&rate, 75.0, under), 80_000);
    assert_eq!(reservable(&rate, 50.0, under), 40_000);
    assert_eq!(reservable(&rate, 37.5, under), 20_000);
    assert_eq!(reservable(&rate, 25.0, under), 0);
    assert_eq!(reservable(&rate, 0.0, under), 0);
    assert_eq!(reservable(&rate, 0.0, 149_999.0), 0);
    assert_eq!(reservable(&rate, 0.0, 150_000.0), 80_000);
    let no_burst = Rate { burst: 0, ..rate };
    assert_eq!(reservable(&no_burst, 0.0, under), 0);
    assert_eq!(reservable(&no_burst, 0.0, 150_000.0), 80_000);

    // Through `reserve`: a drained bucket grants a fleet under the limit nothing (the ask is
    // still counted), half a burst half the reservable part shared by demand, and asks that
    // reach 1.5 L all of it, however drained.
    let ttl = 10_000_000;
    let mut held = Reservations::default();
    assert_eq!(held.reserve(&rate, 1, 60_000, ttl, 0, 10.0), 0);
    // 40 a second may be reserved, 90 are asked: 30 of 90 of it.
    assert_eq!(held.reserve(&rate, 2, 30_000, ttl, 1, 50.0), 13_333);
    assert_eq!(held.reserve(&rate, 1, 60_000, ttl, 2, 50.0), 26_666);
    // 150 a second asked: 80 may be reserved, 60 of 150 of it for the third.
    assert_eq!(held.reserve(&rate, 3, 60_000, ttl, 3, 0.0), 32_000);
    assert_eq!(held.granted(), 71_999);
    // One holder asking for more than may be reserved (150 of 100 a second) is starved alone:
    // its ask counts as asked, not as the 80 it is capped at.
    let mut alone = Reservations::default();
    assert_eq!(alone.reserve(&rate, 1, 150_000, ttl, 0, 0.0), 80_000);
    let mut capped = Reservations::default();
    assert_eq!(capped.reserve(&rate, 1, 149_999, ttl, 0, 0.0), 0);
}

/// A lease answer tells when every reservation has lapsed at the latest (`bucket.lua`'s `z`):
/// the latest end granted since the reservations were last empty, kept when a renewal ends
/// earlier (the Lua never reads every holder to answer it), forgotten once none is left.
#[test]
fn the_reservations_end_is_the_latest_granted_until_none_is_left() {
    let rate = Rate::per_unit(100, Unit::Second);
    let mut bucket = BucketState::full(&rate, 0);
    let mut held = Reservations::default();
    assert_eq!(held.ends_in(0), 0, "none reserved");
    held.reserve(&rate, 1, 10_000, 5_000_000, 0, FULL);
    held.reserve(&rate, 2, 10_000, 2_000_000, 0, FULL);
    assert_eq!(held.ends_in(1_000_000), 4_000_000);
    // Holder 1 renews to end at 3 s: the bound stays at 5 s.
    held.reserve(&rate, 1, 10_000, 2_000_000, 1_000_000, FULL);
    assert_eq!(held.ends_in(1_000_000), 4_000_000);
    held.advance(&mut bucket, &rate, 3_500_000);
    assert!(held.is_empty());
    assert_eq!(held.ends_in(3_500_000), 0, "all lapsed");
    // A new reservation starts the bound afresh.
    held.reserve(&rate, 3, 10_000, 1_000_000, 4_000_000, FULL);
    assert_eq!(held.ends_in(4_000_000), 1_000_000);
    // Given back, none is left: forgotten at once.
    held.reserve(&rate, 3, 0, 1_000_000, 4_100_000, FULL);
    assert_eq!(held.ends_in(4_100_000), 0);
    held.reserve(&rate, 4, 10_000, 500_000, 4_100_000, FULL);
    assert_eq!(held.ends_in(4_100_000), 500_000);
}
