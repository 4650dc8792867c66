//! Human-readable durations in config: `250us`, `20ms`, `1s`, `10m`, `1h`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A [`Duration`] written as a number and a unit (`us`, `ms`, `s`, `m`, `h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let split = s
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(|| format!("duration '{s}' needs a unit (us, ms, s, m, h)"))?;
        let (number, unit) = s.split_at(split);
        let n: u64 = number
            .parse()
            .map_err(|_| format!("duration '{s}' must start with a whole number"))?;
        let d = match unit {
            "us" => Duration::from_micros(n),
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3_600)),
            _ => {
                return Err(format!(
                    "duration '{s}' has unknown unit '{unit}' (us, ms, s, m, h)"
                ));
            }
        };
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
        s.parse().map_err(serde::de::Error::custom)
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
        assert!("1.5s".parse::<HumanDuration>().is_err());
        assert!("5 days".parse::<HumanDuration>().is_err());
    }
}
