//! The exact limiter a run is compared with: one token bucket (`limit` a second, `burst`),
//! deciding every request at its arrival with no delay and no share: what envoyproxy/ratelimit
//! or any single-counter limiter admits. Integer arithmetic (millionths of a token), so it
//! never denies for a rounding.

/// A token bucket in millionths of a token, full at the start.
#[derive(Debug, Clone)]
pub struct Exact {
    /// Tokens, in millionths.
    micro_tokens: u128,
    /// The burst, in millionths.
    cap: u128,
    /// Millionths of a token per microsecond: `limit`.
    per_us: u128,
    last_us: u64,
}

impl Exact {
    /// A full bucket of `burst`, refilling `limit` a second.
    pub fn new(limit: u64, burst: u64) -> Self {
        let cap = u128::from(burst) * 1_000_000;
        Self {
            micro_tokens: cap,
            cap,
            per_us: u128::from(limit),
            last_us: 0,
        }
    }

    /// Whether a request at `at_us` (never before the previous one) is admitted.
    pub fn admit(&mut self, at_us: u64) -> bool {
        let dt = u128::from(at_us.saturating_sub(self.last_us));
        self.last_us = self.last_us.max(at_us);
        self.micro_tokens = (self.micro_tokens + dt * self.per_us).min(self.cap);
        if self.micro_tokens >= 1_000_000 {
            self.micro_tokens -= 1_000_000;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_the_burst_then_the_rate() {
        let mut e = Exact::new(100, 10);
        assert_eq!((0..12).filter(|_| e.admit(0)).count(), 10);
        // 100/s: one token every 10 ms, exactly.
        assert!(!e.admit(9_999));
        assert!(e.admit(10_000));
        assert!(!e.admit(10_000));
        // A long gap refills to the burst, no more.
        assert_eq!((0..20).filter(|_| e.admit(60_000_000)).count(), 10);
    }
}
