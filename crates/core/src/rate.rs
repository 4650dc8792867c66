//! What a limit is and what a bucket holds: [`Rate`] (with its [`Algorithm`] and period) and
//! [`BucketState`]. They sit below the arithmetic on them, the token bucket ([`crate::bucket`])
//! and the windows ([`crate::window`]), so that both read them and neither imports the other for
//! them. [`crate::bucket`] re-exports them, so `bucket::Rate` and the rest keep their paths.

use crate::unit::Unit;

/// The longest period a limit may have: 100 years of 365 days, in seconds. Periods are exact
/// integers of microseconds in `u64` and in `f64` (below 2^53) far beyond it.
pub const MAX_PERIOD_SECS: u64 = 100 * 365 * 86_400;

/// How a limit counts (`rate_limit.algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// A token bucket: burst `B`, refilled continuously at `L` per period (default).
    #[default]
    TokenBucket,
    /// `L` per window aligned to the epoch, as envoyproxy/ratelimit counts (see [`crate::window`]).
    FixedWindow,
    /// `L` per trailing period, estimated from the current and previous windows (see
    /// [`crate::window`] for its error bound).
    SlidingWindow,
    /// A concurrency limit (`rate_limit.concurrency`): at most `B` held at once. A token is a
    /// slot: taken when a request starts, given back when it ends (never refilled: `L` is 0),
    /// and the period is the hold timeout, after which a slot never given back comes back.
    /// Not a spelling of `algorithm:`: `concurrency:` makes it.
    #[serde(skip)]
    Concurrency,
}

impl Algorithm {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// Whether it counts in windows (leases then end with the window they came from).
    pub const fn is_window(self) -> bool {
        matches!(self, Algorithm::FixedWindow | Algorithm::SlidingWindow)
    }

    /// The code the Lua scripts take (`ARGV[5]`).
    pub const fn code(self) -> u64 {
        match self {
            Algorithm::TokenBucket => 0,
            Algorithm::FixedWindow => 1,
            Algorithm::SlidingWindow => 2,
            Algorithm::Concurrency => 3,
        }
    }
}

/// A limit: its rate, period, burst and how it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    /// `L`: tokens added per period.
    pub requests_per_unit: u64,
    /// The unit of the period.
    pub unit: Unit,
    /// Units in the period (`unit_multiplier`: 10 minutes is `Minute` × 10); at least 1.
    pub unit_multiplier: u32,
    /// `B`: the most tokens the bucket holds (and so the largest burst); `L` for windows.
    pub burst: u64,
    /// How it counts.
    pub algorithm: Algorithm,
}

impl Rate {
    /// A rate whose burst equals its requests per unit (envoyproxy/ratelimit's behaviour).
    pub const fn per_unit(requests_per_unit: u64, unit: Unit) -> Self {
        Self {
            requests_per_unit,
            unit,
            unit_multiplier: 1,
            burst: requests_per_unit,
            algorithm: Algorithm::TokenBucket,
        }
    }

    /// `T`: the period, in microseconds (`unit × unit_multiplier`; saturating, though config
    /// bounds it by [`MAX_PERIOD_SECS`]).
    pub const fn period_micros(&self) -> u64 {
        self.unit
            .micros()
            .saturating_mul(if self.unit_multiplier == 0 {
                1
            } else {
                self.unit_multiplier as u64
            })
    }

    /// `L` as tokens a second (0 for a zero rate).
    pub fn per_second(&self) -> f64 {
        self.requests_per_unit as f64 * 1e6 / self.period_micros() as f64
    }

    /// The period in whole seconds.
    pub const fn period_secs(&self) -> u64 {
        self.period_micros() / 1_000_000
    }
}

/// A whole token bucket: the global bucket of the in-memory store, or a local-mode bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketState {
    /// Tokens at `updated_micros`; fractional between whole refills.
    pub tokens: f64,
    /// When `tokens` was last brought up to date.
    pub updated_micros: u64,
    /// Sliding windows: what the previous window used (0 otherwise).
    pub previous: f64,
}

impl BucketState {
    /// A full bucket, as a key starts.
    pub fn full(rate: &Rate, now_micros: u64) -> Self {
        Self {
            tokens: rate.burst as f64,
            updated_micros: now_micros,
            previous: 0.0,
        }
    }

    /// An empty bucket at `now` (a sliding window with nothing carried over).
    pub fn empty(now_micros: u64) -> Self {
        Self {
            tokens: 0.0,
            updated_micros: now_micros,
            previous: 0.0,
        }
    }
}
