//! The time units of `rate_limit.unit`, as envoyproxy/ratelimit and Envoy's RLS API define them.

use std::fmt;
use std::str::FromStr;

/// The period a `requests_per_unit` refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3 600 seconds.
    Hour,
    /// 86 400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days, as envoyproxy/ratelimit counts a month.
    Month,
    /// 365 days, as envoyproxy/ratelimit counts a year.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit's length in seconds.
    pub const fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The unit's length in microseconds.
    pub const fn micros(self) -> u64 {
        self.seconds() * 1_000_000
    }

    /// The lower-case name used in config files.
    pub const fn as_str(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The value of Envoy's `RateLimitResponse.RateLimit.Unit` enum.
    pub const fn envoy_code(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit for an Envoy enum value; `None` for UNKNOWN or out of range.
    pub const fn from_envoy_code(code: i32) -> Option<Unit> {
        Some(match code {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Unit {
    type Err = String;

    /// Case-insensitive, as envoyproxy/ratelimit accepts `SECOND` and `second` alike.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Unit::ALL
            .into_iter()
            .find(|u| u.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("invalid rate limit unit '{s}' (expected second, minute, hour, day, week, month or year)")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_any_case_and_round_trips_envoy_codes() {
        for unit in Unit::ALL {
            assert_eq!(unit.as_str().to_uppercase().parse::<Unit>(), Ok(unit));
            assert_eq!(Unit::from_envoy_code(unit.envoy_code()), Some(unit));
        }
        assert!("fortnight".parse::<Unit>().is_err());
        assert_eq!(Unit::from_envoy_code(0), None);
    }
}
