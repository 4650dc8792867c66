//! A key's demand estimate ([`LeaseState::demand_per_sec`](super::LeaseState)), which sizes its
//! leases: about a lease horizon of it per call.

/// How long a demand sample counts, µs: the time constant of [`decayed_demand`].
pub(super) const DEMAND_MEMORY_MICROS: f64 = 1_000_000.0;

/// The demand estimate (tokens a second) after `spent` tokens over the `elapsed` µs since the
/// last sample: an average weighted by time, `r ← r·e^(−Δ/τ) + (n/Δ)·(1 − e^(−Δ/τ))`
/// (`τ` = [`DEMAND_MEMORY_MICROS`]). A steady rate reads as itself however its samples fall,
/// and a sample over a microsecond weighs a microsecond: `n` tokens then add about `n/τ`.
///
/// It was the plain mean of the last estimate and `spent / elapsed`, and a refill ahead a round
/// trip after a request's own lease read that one request as thousands a second: thin slices
/// (a request or two a second per sidecar) leased 5% of the burst each, refills ahead took it
/// from the bottom half, and a request elsewhere found the store empty. The fleet property test
/// drew such fleets (43 sidecars at 72% of 97/s, burst 172, Poisson: 3 of 271 denied that an
/// exact limiter admits; 36 in step at 54% of 85/s, burst 181: 1 of 288). The price: a thin
/// slice's lease is now about its request's token, a call per request (simulated, 32 sidecars
/// at 80% of 100/s, Poisson: 26.6 → 76.7 calls a second, never more than one per decision).
pub(super) fn decayed_demand(estimate: f32, spent: u64, elapsed: u64) -> f32 {
    let spent = spent as f64;
    let (kept, added) = if elapsed == 0 {
        (1.0, spent * 1e6 / DEMAND_MEMORY_MICROS)
    } else {
        let elapsed = elapsed as f64;
        let weight = -(-elapsed / DEMAND_MEMORY_MICROS).exp_m1();
        (1.0 - weight, spent * 1e6 / elapsed * weight)
    };
    // Finite whatever the counts (an infinite estimate times a weight of 0 would be NaN).
    (f64::from(estimate) * kept + added).min(f64::from(f32::MAX)) as f32
}

#[cfg(test)]
mod tests {
    use super::{DEMAND_MEMORY_MICROS, decayed_demand};

    /// A steady rate reads as itself, however the samples fall: one request every 10 ms, ten
    /// every 100 ms or fifty every half second read 100 a second after a few seconds; one every
    /// 5 s reads 0.2.
    #[test]
    fn a_steady_rate_reads_as_itself() {
        for (spent, every) in [
            (1u64, 10_000u64),
            (10, 100_000),
            (50, 500_000),
            (1, 5_000_000),
        ] {
            let mut estimate = 0.0f32;
            for _ in 0..(30_000_000 / every) {
                estimate = decayed_demand(estimate, spent, every);
            }
            let per_sec = spent as f32 * 1e6 / every as f32;
            assert!(
                (estimate - per_sec).abs() <= 0.06 * per_sec,
                "{spent} every {every} µs: {estimate}, not {per_sec}"
            );
        }
    }

    /// A request a microsecond after the last sample (or in the same one) is one more request,
    /// not a million a second: what sized thin slices' leases at 5% of the burst.
    #[test]
    fn a_sample_over_a_microsecond_is_one_request() {
        for elapsed in [0, 1, 100] {
            let estimate = decayed_demand(2.0, 1, elapsed);
            assert!((2.0..3.5).contains(&estimate), "{elapsed} µs: {estimate}");
        }
        assert_eq!(decayed_demand(0.0, 0, 0), 0.0);
    }

    /// Demand that stops fades: after a few time constants without a request it is near zero.
    #[test]
    fn demand_that_stops_fades() {
        let estimate = decayed_demand(100.0, 0, 5 * DEMAND_MEMORY_MICROS as u64);
        assert!(estimate < 1.0, "{estimate}");
        for (spent, elapsed) in [
            (u64::MAX, 0),
            (u64::MAX, 1),
            (u64::MAX, u64::MAX),
            (0, u64::MAX),
        ] {
            let estimate = decayed_demand(f32::MAX, spent, elapsed);
            assert!(
                estimate.is_finite() && estimate >= 0.0,
                "{spent} over {elapsed}: {estimate}"
            );
        }
    }
}
