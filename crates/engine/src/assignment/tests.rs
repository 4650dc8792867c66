//! Conservation of RLQS assignments against a model of Envoy 1.40's filter: whatever Envoy could
//! admit under the responses sent is never more than what sluice paid for them.

use proptest::prelude::{Just, ProptestConfig, prop, prop_assert, prop_oneof, proptest};
use proptest::strategy::Strategy as _;

use super::*;

const SEC: u64 = 1_000_000;
/// The margin in seconds.
const M: f64 = MARGIN_MICROS as f64 / 1e6;

fn tb(max_tokens: u32, tokens_per_fill: u32, fill_interval_secs: u32) -> Strategy {
    Strategy::Bucket(TokenBucket {
        max_tokens,
        tokens_per_fill,
        fill_interval_secs,
    })
}

/// Envoy's side: the most a bucket could admit (a client taking every token as it appears).
#[derive(Default)]
pub(super) struct EnvoyModel {
    /// The token bucket in force: its strategy (rate at creation), creation and expiry time.
    current: Option<(TokenBucket, u64, u64)>,
    last_receipt: u64,
    admitted: f64,
}

impl EnvoyModel {
    fn close(&mut self, at: u64) {
        if let Some((b, created, expires)) = self.current.take() {
            self.admitted += b.rate() * span(created, at.min(expires));
        }
    }

    pub(super) fn receive(&mut self, strategy: Strategy, ttl_secs: u32, at: u64) {
        let at = at.max(self.last_receipt);
        self.last_receipt = at;
        if let Some((_, _, expires)) = self.current
            && expires <= at
        {
            // Expired: the fallback (DENY_ALL here) replaced the bucket.
            self.close(expires);
        }
        match strategy {
            Strategy::Bucket(new) => match &mut self.current {
                // Envoy keeps the existing bucket (and its rate) for an equal strategy.
                Some((old, _, expires)) if old.envoy_equal(&new) => {
                    *expires = at + u64::from(ttl_secs) * SEC;
                }
                _ => {
                    self.close(at);
                    self.admitted += f64::from(new.max_tokens);
                    self.current = Some((new, at, at + u64::from(ttl_secs) * SEC));
                }
            },
            Strategy::DenyAll | Strategy::AllowAll => self.close(at),
        }
    }

    /// What Envoy could have admitted by `at` (demand always above what it may admit).
    pub(super) fn admitted_by(&self, at: u64) -> f64 {
        self.admitted
            + self.current.map_or(0.0, |(b, created, expires)| {
                b.rate() * span(created, at.min(expires))
            })
    }

    pub(super) fn finish(mut self) -> f64 {
        self.close(u64::MAX);
        self.admitted
    }
}

fn strategy() -> impl proptest::strategy::Strategy<Value = Strategy> {
    prop_oneof![
        1 => Just(Strategy::DenyAll),
        6 => (prop::sample::select(vec![1u32, 5, 50]), prop::sample::select(vec![1u32, 10, 100]),
              prop::sample::select(vec![1u32, 2, 60]))
            .prop_map(|(m, t, i)| tb(m, t, i)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any sequence of responses, each applied up to `MARGIN` after it is sent (in order): what
    /// Envoy can admit is at most what was paid, net of credits.
    #[test]
    fn envoy_never_admits_more_than_was_paid(
        steps in prop::collection::vec(
            (0u64..8 * SEC, strategy(), 1u32..8, 0u64..=MARGIN_MICROS), 1..40),
    ) {
        let mut prepaid = Prepaid::default();
        let mut envoy = EnvoyModel::default();
        let (mut now, mut paid) = (0u64, 0.0f64);
        for (dt, s, ttl, delay) in steps {
            now += dt;
            let s = prepaid.distinct(s);
            let q = prepaid.quote(s, ttl, now);
            prop_assert!(q.cost >= 0.0 && q.credit >= 0.0);
            paid += q.cost - q.credit;
            prepaid.commit(s, ttl, now);
            envoy.receive(s, ttl, now + delay);
        }
        let admitted = envoy.finish();
        prop_assert!(admitted <= paid + 1e-6 * paid.max(1.0), "admitted {admitted} > paid {paid}");
    }
}

#[test]
fn renewing_every_second_costs_one_second_of_refill() {
    let s = tb(10, 10, 1);
    let mut p = Prepaid::default();
    let first = p.quote(s, 3, 0);
    // Full bucket plus refill through the TTL and the margin.
    assert!((first.cost - (10.0 + 10.0 * (3.0 + M))).abs() < 1e-9);
    p.commit(s, 3, 0);
    for k in 1..10u64 {
        let q = p.quote(s, 3, k * SEC);
        assert!(q.renewal, "second {k} is a renewal");
        assert!((q.cost - 10.0).abs() < 1e-9, "second {k} costs {}", q.cost);
        p.commit(s, 3, k * SEC);
    }
}

#[test]
fn a_longer_ttl_pays_the_extra_seconds_and_a_late_renewal_starts_over() {
    let s = tb(5, 5, 1);
    let mut p = Prepaid::default();
    p.commit(s, 3, 0);
    // One second later with a TTL one second longer: two seconds of refill.
    assert!((p.quote(s, 4, SEC).cost - 10.0).abs() < 1e-9);
    // Too late to be sure Envoy still holds it (TTL 3 s less the margin): a new full bucket.
    let late = p.quote(s, 3, 3 * SEC - MARGIN_MICROS);
    assert!(!late.renewal);
    assert!((late.cost - (5.0 + 5.0 * (3.0 + M))).abs() < 1e-9);
}

#[test]
fn replacing_a_strategy_credits_the_refill_paid_past_its_arrival() {
    let mut p = Prepaid::default();
    p.commit(tb(10, 10, 1), 6, 0); // paid until 6 s and the margin
    let q = p.quote(tb(20, 20, 1), 3, SEC);
    assert!(!q.renewal);
    // Surely replaced by 1 s and the margin: 5 s of 10/s back.
    assert!((q.credit - 50.0).abs() < 1e-9);
    assert!((q.cost - (20.0 + 20.0 * (3.0 + M))).abs() < 1e-9);
    let deny = p.quote(Strategy::DenyAll, 3, SEC);
    assert_eq!(deny.cost, 0.0);
    assert!((p.credit_on_abandon(SEC) - 50.0).abs() < 1e-9);
}

#[test]
fn a_strategy_envoy_would_confuse_with_the_last_is_made_distinct() {
    let mut p = Prepaid::default();
    p.commit(tb(10, 10, 1), 3, 0);
    // Same size and fill, another interval: Envoy would keep the 10/s bucket.
    assert_eq!(p.distinct(tb(10, 10, 60)), tb(11, 10, 60));
    assert_eq!(p.distinct(tb(10, 10, 1)), tb(10, 10, 1));
    assert_eq!(p.distinct(tb(10, 9, 60)), tb(10, 9, 60));
}

#[test]
fn shares_are_max_min_fair_and_never_sum_past_the_capacity() {
    // Every demand fits with headroom: each gets its demand, the headroom and half the rest
    // (100 - 36 = 64 spare).
    assert!((fair_share(100.0, 10.0, &[10.0, 20.0], 1.2) - 44.0).abs() < 1e-9);
    assert!((fair_share(100.0, 20.0, &[10.0, 20.0], 1.2) - 56.0).abs() < 1e-9);
    // Two equal demands over the capacity split it.
    assert!((fair_share(50.0, 150.0, &[150.0, 150.0], 1.2) - 25.0).abs() < 1e-9);
    // A small demand is met in full, with headroom; the large one gets the rest.
    assert!((fair_share(50.0, 5.0, &[5.0, 150.0], 1.2) - 6.0).abs() < 1e-9);
    assert!((fair_share(50.0, 150.0, &[5.0, 150.0], 1.2) - 44.0).abs() < 1e-9);
    // Alone: everything, with no headroom past the capacity.
    assert!((fair_share(50.0, 80.0, &[80.0], 1.2) - 50.0).abs() < 1e-9);
}

proptest! {
    #[test]
    fn fair_shares_never_sum_past_the_capacity(
        demands in prop::collection::vec(0.0f64..1000.0, 1..12),
        capacity in 1.0f64..2000.0,
    ) {
        let total: f64 = demands.iter().sum();
        let shares: Vec<f64> =
            demands.iter().map(|&d| fair_share(capacity, d, &demands, 1.2)).collect();
        let given: f64 = shares.iter().sum();
        prop_assert!(given <= capacity * (1.0 + 1e-9), "{given} > {capacity}");
        for (d, s) in demands.iter().zip(&shares) {
            if total * 1.2 > capacity {
                prop_assert!(*s <= d * 1.2 + 1e-9, "contended: share {s} above demand {d}");
            } else {
                prop_assert!(*s >= d * 1.2 - 1e-9, "uncontended: share {s} below demand {d}");
            }
        }
    }
}
