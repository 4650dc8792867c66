//! Time, injected. Only this file reads the system clock (see `clippy.toml`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A monotonic source of time in microseconds since a fixed origin (the Unix epoch for the
/// system clock; whatever a test chooses for [`ManualClock`]).
///
/// Decisions read it once and pass the value down, so the math stays pure and testable.
pub trait Clock: Send + Sync + 'static {
    /// Microseconds since this clock's origin; never decreases.
    fn now_micros(&self) -> u64;
}

/// The real monotonic clock, counting from the Unix epoch: it reads the wall clock once, when
/// made, and the monotonic clock after that (so it never goes back, whatever NTP does). Windows
/// (`fixed_window`, `sliding_window`) are aligned to its origin, as Redis `TIME` aligns them.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
    /// Microseconds from the Unix epoch to `origin`.
    epoch_micros: u64,
}

impl SystemClock {
    /// A clock reading the Unix time now.
    pub fn new() -> Self {
        #[allow(clippy::disallowed_methods)] // the one read of the wall clock (see clippy.toml)
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            origin: Instant::now(),
            epoch_micros: u64::try_from(since_epoch.as_micros()).unwrap_or(0),
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
        let elapsed = u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.epoch_micros.saturating_add(elapsed)
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

/// Microseconds since this process first asked (monotonic): for code with no injected clock
/// that only spaces things out, such as [`SampledLine::sample_now`]. Never a decision's time.
pub fn process_micros() -> u64 {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let elapsed = ORIGIN.get_or_init(Instant::now).elapsed();
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

/// At most one of something per period (a log line a second, say), across threads: given the
/// time, says whether this one may go. The first always may. It reads no clock itself: callers
/// pass the time they already have (the engine's clock, an `Instant`'s elapsed time).
#[derive(Debug, Default)]
pub struct Throttle {
    /// When the last one went, plus 1, in the caller's microseconds (0: never).
    last: AtomicU64,
}

impl Throttle {
    /// None gone yet (a `const`, for statics).
    pub const fn new() -> Self {
        Self {
            last: AtomicU64::new(0),
        }
    }

    /// Whether one may go at `now_micros`, at least `period_micros` after the last that went.
    /// Of concurrent callers at the same moment, one wins.
    pub fn allow(&self, now_micros: u64, period_micros: u64) -> bool {
        let last = self.last.load(Ordering::Relaxed);
        (last == 0 || now_micros.saturating_sub(last - 1) >= period_micros)
            && self
                .last
                .compare_exchange(
                    last,
                    now_micros.saturating_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }
}

/// One log line that a fault or a client can repeat (a store refusing every call, a client
/// sending a wrong token in a loop): it goes at most once a second, and says how many times it
/// was held back since it last went, so a flood costs a line a second, not a line an event, and
/// the count is not lost. Give each such line its own: one line's flood must not hide another.
/// Every sampled line names the count `unlogged_since_last_line`, as the denial log does.
#[derive(Debug, Default)]
pub struct SampledLine {
    throttle: Throttle,
    /// Times the line was held back since it last went.
    held_back: AtomicU64,
}

impl SampledLine {
    /// The period a line may go once in, in microseconds: a second.
    pub const PERIOD_MICROS: u64 = 1_000_000;

    /// A line never written yet (a `const`, for statics).
    pub const fn new() -> Self {
        Self {
            throttle: Throttle::new(),
            held_back: AtomicU64::new(0),
        }
    }

    /// Whether the line may go at `now_micros` (any monotonic microseconds; the engine's clock
    /// where there is one): `Some(times held back since it last went)`, or `None` (counted).
    pub fn sample(&self, now_micros: u64) -> Option<u64> {
        if self.throttle.allow(now_micros, Self::PERIOD_MICROS) {
            Some(self.held_back.swap(0, Ordering::Relaxed))
        } else {
            self.held_back.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    /// [`sample`](Self::sample) at [`process_micros`], for code with no clock of its own.
    pub fn sample_now(&self) -> Option<u64> {
        self.sample(process_micros())
    }
}

#[cfg(test)]
mod tests {
    use super::{SampledLine, Throttle};

    /// A flood of 1 000 events a second for 5 s: 5 lines, the first at once, and every event
    /// either written or counted in the next line written.
    #[test]
    fn a_sampled_line_goes_once_a_second_and_counts_what_it_held_back() {
        let line = SampledLine::new();
        let (mut written, mut counted) = (0u64, 0u64);
        for event in 0..5_000u64 {
            if let Some(held_back) = line.sample(event * 1_000) {
                written += 1;
                counted += held_back;
            }
        }
        assert_eq!(written, 5);
        // The 999 held back after the last line are counted by the next one.
        assert_eq!(written + counted + 999, 5_000);
        assert_eq!(line.sample(5_000_000), Some(999));
        assert_eq!(line.sample(5_000_001), None);
    }

    #[test]
    fn a_throttle_lets_one_go_per_period_and_the_first_at_once() {
        let t = Throttle::default();
        assert!(t.allow(0, 1_000_000), "the first, even at time 0");
        assert!(!t.allow(999_999, 1_000_000));
        assert!(t.allow(1_000_000, 1_000_000));
        assert!(!t.allow(1_500_000, 1_000_000));
        assert!(
            !t.allow(10, 1_000_000),
            "time going back lets nothing through"
        );
        assert!(t.allow(2_000_000, 1_000_000));
    }
}
