//! Window algorithms: `fixed_window` and `sliding_window`, as time rules over a [`BucketState`].
//!
//! Windows are aligned to the clock's origin (the Unix epoch for [`SystemClock`] and Redis
//! `TIME`): window `w` of a period `T` is `[w·T, (w+1)·T)`, as envoyproxy/ratelimit aligns its
//! counters (`now / divider · divider`). A bucket's `tokens` are what is left of the current
//! window's `L`; `updated_micros` tells which window that is.
//!
//! - **Fixed window**: a new window starts full, whatever the last one used (usage and debt
//!   are forgotten at the window's end, as a fixed-window counter expires).
//! - **Sliding window** (the sliding-window counter estimate): the hits of the previous window
//!   count with the part of it the trailing period still covers, so at a fraction `f` into the
//!   current window `available = tokens − previous·(1 − f)`. The estimate assumes the previous
//!   window's hits were spread evenly. **Error bound**: the hits truly in the trailing period
//!   `(t − T, t]` are at most `estimate + previous·f`, so a key admits at most `L + f·previous`
//!   (below `2L`) over any trailing period, and exactly `L` when the previous window's hits were
//!   spread evenly; over every aligned window it admits at most `L`, like a fixed window.
//!
//! The same arithmetic (f64, integer microseconds, the window found by integer division) runs in
//! `crates/redis/lua/bucket.lua`, so Rust and Lua agree to the bit.
//!
//! [`SystemClock`]: crate::SystemClock

use crate::rate::{Algorithm, BucketState, Rate};

/// The window `now` falls in, and how far into it (µs).
pub fn window_of(rate: &Rate, now: u64) -> (u64, u64) {
    let period = rate.period_micros().max(1);
    (now / period, now % period)
}

/// Microseconds until the window of `now` ends.
pub fn until_window_end(rate: &Rate, now: u64) -> u64 {
    rate.period_micros().max(1) - window_of(rate, now).1
}

/// Starts the window of `now` if the state's is over: a fixed window full; a sliding window
/// full, with what the last window used kept as `previous` if it was the one just before.
pub(crate) fn shift(state: &mut BucketState, rate: &Rate, now: u64) {
    let (then, _) = window_of(rate, state.updated_micros);
    let (current, _) = window_of(rate, now);
    if current > then {
        state.previous = match rate.algorithm {
            Algorithm::SlidingWindow if current == then + 1 => rate.burst as f64 - state.tokens,
            _ => 0.0,
        };
        state.tokens = rate.burst as f64;
    }
    state.updated_micros = state.updated_micros.max(now);
}

/// Tokens a window bucket can spend at its last update (a sliding window's previous hits
/// weighted by the part of the trailing period that still covers them).
pub(crate) fn available(state: &BucketState, rate: &Rate) -> f64 {
    match rate.algorithm {
        Algorithm::SlidingWindow => {
            let period = rate.period_micros().max(1);
            let (_, into) = window_of(rate, state.updated_micros);
            let f = into as f64 / period as f64;
            state.tokens - state.previous * (1.0 - f)
        }
        _ => state.tokens,
    }
}

#[cfg(test)]
mod tests;
