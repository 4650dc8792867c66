//! Time, injected. Only this file reads the system clock (see `clippy.toml`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A monotonic source of time in microseconds since an arbitrary, fixed origin.
///
/// Decisions read it once and pass the value down, so the math stays pure and testable.
pub trait Clock: Send + Sync + 'static {
    /// Microseconds since this clock's origin; never decreases.
    fn now_micros(&self) -> u64;
}

/// The real monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_micros(&self) -> u64 {
        // u64 microseconds last 584 000 years; saturate rather than wrap.
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

/// A clock that moves only when told to: for tests. Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    /// Shared so a test can hold one handle and give clones to the code under test.
    micros: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at `micros`.
    pub fn at(micros: u64) -> Self {
        Self {
            micros: Arc::new(AtomicU64::new(micros)),
        }
    }

    /// Moves the clock forward by `micros`.
    pub fn advance_micros(&self, micros: u64) {
        self.micros.fetch_add(micros, Ordering::SeqCst);
    }

    /// Moves the clock forward by `millis`.
    pub fn advance_millis(&self, millis: u64) {
        self.advance_micros(millis * 1_000);
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> u64 {
        self.micros.load(Ordering::SeqCst)
    }
}
