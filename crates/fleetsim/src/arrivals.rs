//! The requests of a run, as (time, sidecar): drawn once from the seed, before the run, so
//! sluice and the exact limiter see the very same arrivals.

use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{RngExt as _, SeedableRng as _};

use crate::scenario::{Arrivals, Case};

/// One request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Microseconds from the start.
    pub at_us: u64,
    /// The sidecar (slot) it arrives at.
    pub sidecar: usize,
}

/// Every request of `case`, in time order (ties in sidecar order, or shuffled for
/// [`Arrivals::StepAnyOrder`]).
pub fn draw(case: &Case) -> Vec<Arrival> {
    let mut rng = StdRng::seed_from_u64(case.seed ^ 0xa7c4_1f3b_9e25_6d01);
    let end_us = case.seconds * 1_000_000;
    let rate = case.offered_per_sec();
    let n = case.sidecars;
    let mut out = Vec::new();
    match case.arrivals {
        Arrivals::Step | Arrivals::StepAnyOrder => {
            // Each step is one request on every sidecar, at the same microsecond.
            let period_us = (n as f64 / rate * 1e6).max(1.0);
            let mut k = 0u64;
            loop {
                let at_us = ((k as f64 + 0.5) * period_us) as u64;
                if at_us >= end_us {
                    break;
                }
                let step = out.len();
                out.extend((0..n).map(|sidecar| Arrival { at_us, sidecar }));
                if case.arrivals == Arrivals::StepAnyOrder {
                    out[step..].shuffle(&mut rng);
                }
                k += 1;
            }
        }
        Arrivals::Poisson | Arrivals::Hot | Arrivals::Churn => {
            let mut t = 0.0f64;
            loop {
                // Exponential gaps: -ln(U) / rate, with U in (0, 1].
                let u: f64 = 1.0 - rng.random::<f64>();
                t += -u.ln() / rate * 1e6;
                let at_us = t as u64;
                if at_us >= end_us {
                    break;
                }
                let sidecar = if case.arrivals == Arrivals::Hot && rng.random::<bool>() {
                    0
                } else {
                    rng.random_range(0..n)
                };
                out.push(Arrival { at_us, sidecar });
            }
        }
    }
    out
}

/// For [`Arrivals::Churn`]: at each of these times (microseconds from the start) the sidecars
/// in the range leave and as many new ones take their slots.
pub fn churn(case: &Case) -> Vec<(u64, std::ops::Range<usize>)> {
    if case.arrivals != Arrivals::Churn {
        return Vec::new();
    }
    let n = case.sidecars;
    let quarter = n.div_ceil(4);
    (1..)
        .map(|k: u64| k * 10_000_000)
        .take_while(|&at| at < case.seconds * 1_000_000)
        .enumerate()
        .map(|(i, at)| {
            let from = (i * quarter) % n;
            (at, from..(from + quarter).min(n))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::parse;

    fn case(arrivals: &str, n: usize, demand: f64) -> Case {
        let text = format!(
            "scenarios:\n  - {{name: t, sidecars: [{n}], demand: [{demand}], arrivals: [{arrivals}], burst: [100], limit: 100, seconds: 60, seed: 7}}\n"
        );
        parse(&text).expect("scenario").scenarios[0]
            .cases()
            .remove(0)
    }

    #[test]
    fn poisson_offers_the_rate_and_is_the_same_for_a_seed() {
        let c = case("poisson", 32, 0.8);
        let a = draw(&c);
        // 80/s for 60 s: 4 800 expected, a Poisson count's sd is ~69.
        assert!((4_500..5_100).contains(&a.len()), "{}", a.len());
        assert!(a.windows(2).all(|w| w[0].at_us <= w[1].at_us));
        assert_eq!(a, draw(&c));
        let mut other = c.clone();
        other.seed += 1;
        assert_ne!(a, draw(&other));
    }

    #[test]
    fn steps_send_on_every_sidecar_at_once() {
        let a = draw(&case("step", 32, 0.8));
        // 80/s in steps of 32: one step every 0.4 s, 150 steps.
        assert_eq!(a.len(), 150 * 32);
        assert!(
            a.chunks(32)
                .all(|s| s.iter().all(|x| x.at_us == s[0].at_us))
        );
        assert_eq!(a[0].at_us, 200_000);
    }

    #[test]
    fn steps_in_any_order_shuffle_each_step_and_only_its_order() {
        let c = case("step_any_order", 32, 0.8);
        let a = draw(&c);
        let ordered = draw(&case("step", 32, 0.8));
        assert_eq!(a.len(), ordered.len());
        let mut orders = std::collections::HashSet::new();
        for (step, same) in a.chunks(32).zip(ordered.chunks(32)) {
            assert!(step.iter().all(|x| x.at_us == same[0].at_us));
            let mut sidecars: Vec<usize> = step.iter().map(|x| x.sidecar).collect();
            orders.insert(sidecars.clone());
            sidecars.sort_unstable();
            assert_eq!(
                sidecars,
                (0..32).collect::<Vec<_>>(),
                "every sidecar once a step"
            );
        }
        assert!(
            orders.len() > 140,
            "a new order each step: {}",
            orders.len()
        );
        assert_eq!(a, draw(&c), "the same for a seed");
    }

    #[test]
    fn a_hot_pod_gets_half() {
        let a = draw(&case("hot", 32, 4.0));
        let hot = a.iter().filter(|x| x.sidecar == 0).count() as f64;
        let share = hot / a.len() as f64;
        assert!((0.48..0.54).contains(&share), "{share}");
    }

    #[test]
    fn churn_replaces_a_quarter_every_ten_seconds() {
        let c = case("churn", 10, 0.8);
        let ch = churn(&c);
        assert_eq!(ch.len(), 5);
        assert_eq!(ch[0], (10_000_000, 0..3));
        assert_eq!(ch[1], (20_000_000, 3..6));
        assert_eq!(ch[3], (40_000_000, 9..10));
        assert!(churn(&case("poisson", 10, 0.8)).is_empty());
    }
}
