//! A circuit breaker: after `threshold` consecutive failures, calls fail at once (and decisions use
//! their fallback) until a background probe sees Redis answer again.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Breaker state, shared by every call and the probe.
#[derive(Debug)]
pub struct Breaker {
    threshold: u32,
    consecutive_failures: AtomicU32,
    open: AtomicBool,
}

impl Breaker {
    /// A closed breaker that opens after `threshold` consecutive failures (at least 1).
    pub fn new(threshold: u32) -> Self {
        Self {
            threshold: threshold.max(1),
            consecutive_failures: AtomicU32::new(0),
            open: AtomicBool::new(false),
        }
    }

    /// A breaker that starts open (not connected yet).
    pub fn new_open(threshold: u32) -> Self {
        let b = Self::new(threshold);
        b.open.store(true, Ordering::SeqCst);
        b
    }

    /// Whether calls should be attempted.
    pub fn is_closed(&self) -> bool {
        !self.open.load(Ordering::Acquire)
    }

    /// Records a successful call.
    pub fn success(&self) {
        self.consecutive_failures.store(0, Ordering::Relaxed);
    }

    /// Records a failed call; returns true if this failure opened the breaker.
    pub fn failure(&self) -> bool {
        let n = self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        n >= self.threshold && !self.open.swap(true, Ordering::AcqRel)
    }

    /// Opens the breaker now, whatever the count (Redis did not answer at start); returns true if
    /// it was closed.
    pub fn open(&self) -> bool {
        !self.open.swap(true, Ordering::AcqRel)
    }

    /// Closes the breaker (the probe saw Redis answer).
    pub fn close(&self) {
        self.consecutive_failures.store(0, Ordering::Relaxed);
        self.open.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_only() {
        let b = Breaker::new(3);
        assert!(!b.failure() && !b.failure());
        b.success();
        assert!(!b.failure() && !b.failure());
        assert!(b.is_closed());
        assert!(b.failure(), "third in a row opens");
        assert!(!b.is_closed());
        assert!(!b.failure(), "already open");
        b.close();
        assert!(b.is_closed());
    }
}
