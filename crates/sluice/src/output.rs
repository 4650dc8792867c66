//! How client commands print: lines on stdout (the CLI's output, not logging), aligned tables,
//! and limits and periods as people write them.

use sluice_proto::sluice::v1 as pb;

/// Prints rows as aligned columns.
pub(crate) fn table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|v| v.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{v:<w$}", w = widths[i]))
            .collect();
        out(line.join("  ").trim_end());
    }
}

#[allow(clippy::print_stdout)]
pub(crate) fn out(line: &str) {
    println!("{line}");
}

/// A period as people write it: `minute`, or `10 minutes` for a unit multiplier of 10.
fn period(unit: &str, multiplier: u32) -> String {
    match multiplier {
        0 | 1 => unit.to_string(),
        n => format!("{n} {unit}s"),
    }
}

/// What a limit is, as the Quota API sends it (in a `QuotaState` or a `Rule`): the one place that
/// turns it into words, for `quota get`, `quota watch` and `rules` alike.
pub(crate) struct Shape<'a> {
    requests_per_unit: u64,
    unit: &'a str,
    unit_multiplier: u32,
    burst: u64,
    /// `token_bucket`, `fixed_window`, `sliding_window` or `concurrency` (empty from a server
    /// older than the field: a token bucket).
    algorithm: &'a str,
}

impl<'a> From<&'a pb::QuotaState> for Shape<'a> {
    fn from(s: &'a pb::QuotaState) -> Self {
        Shape {
            requests_per_unit: s.requests_per_unit,
            unit: &s.unit,
            unit_multiplier: s.unit_multiplier,
            burst: s.burst,
            algorithm: &s.algorithm,
        }
    }
}

impl<'a> From<&'a pb::Rule> for Shape<'a> {
    fn from(r: &'a pb::Rule) -> Self {
        Shape {
            requests_per_unit: r.requests_per_unit,
            unit: &r.unit,
            unit_multiplier: r.unit_multiplier,
            burst: r.burst,
            algorithm: &r.algorithm,
        }
    }
}

impl Shape<'_> {
    /// A concurrency limit: `burst` requests in flight at once, its period the hold timeout (its
    /// `requests_per_unit` is 0: slots never refill, so "0 per 5 minutes" would say nothing).
    pub(crate) fn is_concurrency(&self) -> bool {
        self.algorithm == "concurrency"
    }

    /// The limit in words: `5 per minute (burst 5)`, `100 per 10 minutes (fixed window)`,
    /// `3 in flight (hold timeout 5m)`.
    pub(crate) fn text(&self) -> String {
        match self.algorithm {
            "concurrency" => format!("{} in flight (hold timeout {})", self.burst, self.hold()),
            "fixed_window" | "sliding_window" => format!(
                "{} per {} ({})",
                self.requests_per_unit,
                period(self.unit, self.unit_multiplier),
                self.algorithm.replace('_', " ")
            ),
            _ => format!(
                "{} per {} (burst {})",
                self.requests_per_unit,
                period(self.unit, self.unit_multiplier),
                self.burst
            ),
        }
    }

    /// The limit for a table column: `5/minute`, `100/10 minutes fixed window`,
    /// `3 in flight, hold 5m`.
    pub(crate) fn short(&self) -> String {
        let rate = format!(
            "{}/{}",
            self.requests_per_unit,
            period(self.unit, self.unit_multiplier)
        );
        match self.algorithm {
            "concurrency" => format!("{} in flight, hold {}", self.burst, self.hold()),
            "fixed_window" | "sliding_window" => {
                format!("{rate} {}", self.algorithm.replace('_', " "))
            }
            _ => rate,
        }
    }

    /// A concurrency limit's hold timeout as the config writes it (`5m`, `90s`): its period.
    fn hold(&self) -> String {
        let unit = self
            .unit
            .parse::<sluice_core::Unit>()
            .map_or(1, |u| u.seconds());
        let secs = unit.saturating_mul(u64::from(self.unit_multiplier.max(1)));
        humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(
        requests_per_unit: u64,
        unit: &str,
        multiplier: u32,
        burst: u64,
        algorithm: &str,
    ) -> pb::QuotaState {
        pb::QuotaState {
            requests_per_unit,
            unit: unit.into(),
            unit_multiplier: multiplier,
            burst,
            algorithm: algorithm.into(),
            ..pb::QuotaState::default()
        }
    }

    /// Every kind of limit in words; a server older than `algorithm` sends it empty, and its
    /// limits read as they did.
    #[test]
    fn each_algorithm_reads_as_people_write_it() {
        let cases = [
            (
                state(5, "minute", 1, 5, "token_bucket"),
                "5 per minute (burst 5)",
                "5/minute",
            ),
            (
                state(5, "minute", 1, 8, ""),
                "5 per minute (burst 8)",
                "5/minute",
            ),
            (
                state(100, "minute", 10, 100, "fixed_window"),
                "100 per 10 minutes (fixed window)",
                "100/10 minutes fixed window",
            ),
            (
                state(7, "second", 90, 7, "sliding_window"),
                "7 per 90 seconds (sliding window)",
                "7/90 seconds sliding window",
            ),
            (
                state(0, "second", 300, 3, "concurrency"),
                "3 in flight (hold timeout 5m)",
                "3 in flight, hold 5m",
            ),
            (
                state(0, "second", 86_400, 1_000_000, "concurrency"),
                "1000000 in flight (hold timeout 1day)",
                "1000000 in flight, hold 1day",
            ),
        ];
        for (s, text, short) in cases {
            let shape = Shape::from(&s);
            assert_eq!(
                (shape.text().as_str(), shape.short().as_str()),
                (text, short)
            );
            assert_eq!(shape.is_concurrency(), s.algorithm == "concurrency");
        }
    }
}
