//! The simulated clock: tokio's paused clock, read as sluice's [`Clock`].
//!
//! Under a paused runtime, tokio's `Instant` only moves when every task waits on a timer, and
//! then jumps to the earliest deadline; the engines' lease times, the store's refills and the
//! arrivals all read the same clock, so a run depends on nothing but its seed.

use sluice_core::Clock;
use tokio::time::Instant;

/// Microseconds since the simulation started, plus a fixed origin (sluice's buckets treat 0 as
/// "never touched", so the clock starts well past it).
#[derive(Debug, Clone, Copy)]
pub struct SimClock {
    start: Instant,
}

/// Where the simulated clock starts, in microseconds.
pub const ORIGIN_MICROS: u64 = 1_000_000;

impl SimClock {
    /// A clock reading [`ORIGIN_MICROS`] now.
    pub fn starting_now() -> Self {
        Self {
            start: Instant::now(),
        }
    }

    /// Microseconds since the simulation started.
    pub fn elapsed_micros(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

impl Clock for SimClock {
    fn now_micros(&self) -> u64 {
        ORIGIN_MICROS + self.elapsed_micros()
    }
}
