//! Human-readable durations in config: `250us`, `20ms`, `1s`, `10m`, `1h`.
//!
//! Every duration is at most [`MAX_DURATION`], so arithmetic on it (`3 × heartbeat_interval`,
//! microseconds in a `u64`) can never overflow; a longer one is an error where it is written.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A [`Duration`] written as a number and a unit (`us`, `ms`, `s`, `m`, `h`), at most
/// [`MAX_DURATION`]. In config files it must also be above zero (every duration field needs
/// one); on the command line `0s` is allowed (it turns a feature off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

/// The longest duration sluice accepts anywhere: 365 days.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

impl FromStr for HumanDuration {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let split = s
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(|| format!("duration '{s}' needs a unit (us, ms, s, m, h)"))?;
        let (number, unit) = s.split_at(split);
        let too_long = || format!("duration '{s}' is longer than the maximum of 365 days");
        let n: u64 = match number.parse() {
            Ok(n) => n,
            Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => return Err(too_long()),
            Err(_) => return Err(format!("duration '{s}' must start with a whole number")),
        };
        let micros_per = match unit {
            "us" => 1,
            "ms" => 1_000,
            "s" => 1_000_000,
            "m" => 60_000_000,
            "h" => 3_600_000_000,
            _ => {
                return Err(format!(
                    "duration '{s}' has unknown unit '{unit}' (us, ms, s, m, h)"
                ));
            }
        };
        let d = n
            .checked_mul(micros_per)
            .map(Duration::from_micros)
            .filter(|d| *d <= MAX_DURATION)
            .ok_or_else(too_long)?;
        Ok(HumanDuration(d))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0.as_micros();
        match us {
            _ if us.is_multiple_of(3_600_000_000) && us > 0 => write!(f, "{}h", us / 3_600_000_000),
            _ if us.is_multiple_of(60_000_000) && us > 0 => write!(f, "{}m", us / 60_000_000),
            _ if us.is_multiple_of(1_000_000) => write!(f, "{}s", us / 1_000_000),
            _ if us.is_multiple_of(1_000) => write!(f, "{}ms", us / 1_000),
            _ => write!(f, "{us}us"),
        }
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        let d: HumanDuration = s.parse().map_err(serde::de::Error::custom)?;
        if d.0.is_zero() {
            return Err(serde::de::Error::custom(format!(
                "duration '{s}' must be above zero"
            )));
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for (text, d) in [
            ("250us", Duration::from_micros(250)),
            ("20ms", Duration::from_millis(20)),
            ("1s", Duration::from_secs(1)),
            ("10m", Duration::from_secs(600)),
            ("2h", Duration::from_secs(7_200)),
        ] {
            let parsed: HumanDuration = text.parse().expect(text);
            assert_eq!(parsed.0, d);
            assert_eq!(parsed.to_string(), text);
        }
        assert!("10".parse::<HumanDuration>().is_err());
        assert_eq!(
            "0s".parse::<HumanDuration>(),
            Ok(HumanDuration(Duration::ZERO))
        );
        assert_eq!(
            "8760h".parse::<HumanDuration>().map(|d| d.0),
            Ok(MAX_DURATION)
        );
        assert!("1.5s".parse::<HumanDuration>().is_err());
        assert!("5 days".parse::<HumanDuration>().is_err());
    }

    #[test]
    fn never_overflows_or_wraps() {
        for text in [
            "8761h",
            "18446744073709551615s",
            "18446744073709551615h",
            "307445734561825861m",
            "99999999999999999999999us",
        ] {
            let e = text.parse::<HumanDuration>().expect_err(text);
            assert!(
                e.contains("longer than the maximum of 365 days"),
                "{text}: {e}"
            );
        }
    }
}
