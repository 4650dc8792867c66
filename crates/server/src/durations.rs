//! Protobuf `Duration`s in and out of the APIs: Envoy's copy of the well-known type (RLS,
//! RLQS) and prost's (`sluice.v1`). One home for the conversions, so every answer caps a
//! duration the same way and every request reads one the same way.

use std::time::Duration;

use sluice_proto::envoy::protobuf::Duration as EnvoyDuration;

/// The longest duration a protobuf `Duration` may hold: 10 000 years, in seconds.
pub const MAX_SECS: u64 = 315_576_000_000;

/// Seconds and nanoseconds of `d`, capped at the type's valid range (a bucket of 4 billion
/// tokens that refills once a year is full again in 4 billion years).
fn parts(d: Duration) -> (i64, i32) {
    if d.as_secs() >= MAX_SECS {
        return (MAX_SECS as i64, 0);
    }
    (d.as_secs() as i64, d.subsec_nanos() as i32)
}

/// `d` as Envoy's `Duration`.
pub fn envoy(d: Duration) -> EnvoyDuration {
    let (seconds, nanos) = parts(d);
    EnvoyDuration { seconds, nanos }
}

/// `d` as prost's `Duration` (`sluice.v1`).
pub fn prost(d: Duration) -> prost_types::Duration {
    let (seconds, nanos) = parts(d);
    prost_types::Duration { seconds, nanos }
}

/// Whole seconds of an Envoy `Duration` from a request (0 when absent or negative).
pub fn whole_seconds(d: Option<&EnvoyDuration>) -> u64 {
    d.map_or(0, |d| u64::try_from(d.seconds).unwrap_or(0))
}

/// A `sluice.v1` duration from a request (negative parts read as 0).
pub fn from_prost(d: &prost_types::Duration) -> Duration {
    Duration::new(
        u64::try_from(d.seconds).unwrap_or(0),
        u32::try_from(d.nanos).unwrap_or(0).min(999_999_999),
    )
}

/// A `sluice.v1` duration in seconds (0 when absent), as answers print it.
pub fn seconds(d: Option<&prost_types::Duration>) -> f64 {
    d.map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_capped_at_the_valid_range_and_read_without_wrapping() {
        let long = Duration::from_secs(u64::MAX);
        assert_eq!(envoy(long).seconds, MAX_SECS as i64);
        assert_eq!(prost(long).nanos, 0);
        let d = Duration::new(3, 250_000_000);
        assert_eq!((envoy(d).seconds, envoy(d).nanos), (3, 250_000_000));
        assert_eq!(from_prost(&prost(d)), d);
        assert!((seconds(Some(&prost(d))) - 3.25).abs() < 1e-9);
        let negative = prost_types::Duration {
            seconds: -5,
            nanos: -1,
        };
        assert_eq!(from_prost(&negative), Duration::ZERO);
        let negative = EnvoyDuration {
            seconds: -5,
            nanos: 0,
        };
        assert_eq!(whole_seconds(Some(&negative)), 0);
        assert_eq!(whole_seconds(None), 0);
    }
}
