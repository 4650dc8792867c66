//! Scenario files: each names a grid of fleet runs (every combination of its lists), so one
//! entry covers "N ∈ {2, 32, 128, 1 000} × demand 20 %…400 %" without repeating itself.

use serde::Deserialize;

/// A scenario file: `scenarios:`, a list of grids.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// The grids, run in order.
    pub scenarios: Vec<Grid>,
}

/// How requests arrive, across the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// A Poisson process at the offered rate, each request to a sidecar picked at random.
    Poisson,
    /// Every sidecar sends one request at the same microsecond, in steps spaced so the fleet
    /// offers the rate (the worst case for leases: all ask at once), always in sidecar order:
    /// the same sidecars reach the store first at every step (those nearest it, say).
    Step,
    /// As [`Step`](Self::Step), the step's requests in a new random order each time. The
    /// store round trip's jitter cannot reorder them (the simulated clock ticks in whole
    /// milliseconds, so a request's one-way trip of 0.5–1 ms ends in the tick it began): this
    /// is the order a real fleet's jitter gives. Where the burst is smaller than the fleet, an
    /// exact limiter admits whichever requests come first, so the two limiters admit different
    /// requests of the same step: read "short of exact" there, not "false denials".
    StepAnyOrder,
    /// Poisson, with half of the requests on one sidecar (one hot pod).
    Hot,
    /// Poisson, and every 10 s a quarter of the sidecars leave (returning their leases as a
    /// pod shutting down does) and as many new ones join, cold.
    Churn,
}

/// How sidecars lease from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Leases {
    /// Token leases only (the default engine).
    Tokens,
    /// Leases of rate too (`engine.rate_lease_ttl: 10s`).
    Rates,
}

fn default_leases() -> Vec<Leases> {
    vec![Leases::Tokens]
}

/// A grid of runs: every list is a dimension.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grid {
    /// Names the grid's rows in the report.
    pub name: String,
    /// Sidecar counts, each at most [`MAX_SIDECARS`].
    pub sidecars: Vec<usize>,
    /// Offered load, as a fraction of the limit (0.8: 80 % of `limit`).
    pub demand: Vec<f64>,
    /// Arrival patterns.
    pub arrivals: Vec<Arrivals>,
    /// Bursts.
    pub burst: Vec<u64>,
    /// The key's limit, requests a second.
    pub limit: u64,
    /// Simulated seconds per run.
    #[serde(default = "default_seconds")]
    pub seconds: u64,
    /// The store's round trip, milliseconds (half each way).
    #[serde(default = "default_rtt_ms")]
    pub rtt_ms: f64,
    /// Up to this much more per round trip, uniformly at random, milliseconds.
    #[serde(default)]
    pub jitter_ms: f64,
    /// The store's timeout (`redis.timeout`): a decision waits at most this long for it.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Spells when the store does not answer, `[from, to]` in seconds from the start.
    #[serde(default)]
    pub outages: Vec<[f64; 2]>,
    /// The seed of every random choice in the run (arrivals, jitter).
    #[serde(default)]
    pub seed: u64,
    /// Lease policies (default `[tokens]`).
    #[serde(default = "default_leases")]
    pub leases: Vec<Leases>,
}

fn default_seconds() -> u64 {
    60
}

fn default_rtt_ms() -> f64 {
    1.0
}

fn default_timeout_ms() -> u64 {
    20
}

/// One run: a point of a grid.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The grid's name.
    pub name: String,
    /// Sidecars.
    pub sidecars: usize,
    /// Offered load, as a fraction of the limit.
    pub demand: f64,
    /// How requests arrive.
    pub arrivals: Arrivals,
    /// The key's limit, a second.
    pub limit: u64,
    /// The key's burst.
    pub burst: u64,
    /// Simulated seconds.
    pub seconds: u64,
    /// Round trip, microseconds.
    pub rtt_us: u64,
    /// Jitter per round trip, up to, microseconds.
    pub jitter_us: u64,
    /// The store's timeout, microseconds.
    pub timeout_us: u64,
    /// Outages, `[from, to)` in microseconds from the start.
    pub outages: Vec<(u64, u64)>,
    /// The seed.
    pub seed: u64,
    /// The lease policy.
    pub leases: Leases,
}

impl Case {
    /// Requests a second the fleet offers.
    pub fn offered_per_sec(&self) -> f64 {
        self.demand * self.limit as f64
    }

    /// Whether the store is out at `t` (microseconds from the start).
    pub fn out_at(&self, t: u64) -> bool {
        self.outages.iter().any(|&(from, to)| from <= t && t < to)
    }
}

/// The most sidecars a run may have.
pub const MAX_SIDECARS: usize = 10_000;

/// The most requests a run may offer (its arrivals are drawn before it starts).
pub const MAX_REQUESTS: u64 = 20_000_000;

/// Parses a scenario file and checks its values: a clear error, never a run that cannot end.
pub fn parse(text: &str) -> anyhow::Result<File> {
    let file: File = serde_saphyr::from_str(text)?;
    for g in &file.scenarios {
        let bad = |what: &str| anyhow::anyhow!("scenario {}: {what}", g.name);
        if g.sidecars.is_empty() || g.sidecars.iter().any(|&n| n == 0 || n > MAX_SIDECARS) {
            return Err(bad(&format!(
                "sidecars: a list of counts in 1..={MAX_SIDECARS}"
            )));
        }
        if g.demand.is_empty()
            || g.demand
                .iter()
                .any(|d| !(d.is_finite() && *d > 0.0 && *d <= 100.0))
        {
            return Err(bad("demand: a list of fractions of the limit in (0, 100]"));
        }
        if g.leases.is_empty() {
            return Err(bad("leases: a non-empty list of tokens | rates"));
        }
        if g.arrivals.is_empty() || g.burst.is_empty() || g.burst.contains(&0) {
            return Err(bad(
                "arrivals and burst: non-empty lists, bursts of at least 1",
            ));
        }
        if g.limit == 0 || g.limit > 1_000_000 || g.seconds == 0 || g.seconds > 3_600 {
            return Err(bad("limit in 1..=1000000 a second, seconds in 1..=3600"));
        }
        let ms_ok = |v: f64| v.is_finite() && (0.0..=10_000.0).contains(&v);
        if !ms_ok(g.rtt_ms) || !ms_ok(g.jitter_ms) || g.timeout_ms == 0 {
            return Err(bad(
                "rtt_ms and jitter_ms in 0..=10000, timeout_ms at least 1",
            ));
        }
        if g.outages
            .iter()
            .any(|[from, to]| !(from.is_finite() && to.is_finite() && 0.0 <= *from && from < to))
        {
            return Err(bad("outages: [from, to] seconds, from < to"));
        }
        // The arrivals are drawn up front (16 bytes each): bound a run's requests.
        let most_demand = g.demand.iter().copied().fold(0.0, f64::max);
        if most_demand * g.limit as f64 * g.seconds as f64 > MAX_REQUESTS as f64 {
            return Err(bad(&format!(
                "demand × limit × seconds: at most {MAX_REQUESTS} requests a run"
            )));
        }
    }
    Ok(file)
}

impl Grid {
    /// Every run of the grid: sidecars outermost, then demand, arrivals and burst.
    pub fn cases(&self) -> Vec<Case> {
        let us = |ms: f64| (ms * 1_000.0).round() as u64;
        let mut cases = Vec::new();
        for &sidecars in &self.sidecars {
            for &demand in &self.demand {
                for &arrivals in &self.arrivals {
                    for (&burst, &leases) in self
                        .burst
                        .iter()
                        .flat_map(|b| self.leases.iter().map(move |l| (b, l)))
                    {
                        cases.push(Case {
                            name: self.name.clone(),
                            sidecars,
                            demand,
                            arrivals,
                            limit: self.limit,
                            burst,
                            seconds: self.seconds,
                            rtt_us: us(self.rtt_ms),
                            jitter_us: us(self.jitter_ms),
                            timeout_us: self.timeout_ms * 1_000,
                            outages: self
                                .outages
                                .iter()
                                .map(|[from, to]| (us(from * 1_000.0), us(to * 1_000.0)))
                                .collect(),
                            seed: self.seed,
                            leases,
                        });
                    }
                }
            }
        }
        cases
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(fields: &str) -> String {
        format!(
            "scenarios:\n  - {{name: g, sidecars: [4], demand: [0.5], arrivals: [poisson], burst: [10], limit: 100{fields}}}\n"
        )
    }

    #[test]
    fn a_grid_expands_to_every_combination() {
        let text = "scenarios:\n  - {name: g, sidecars: [2, 32], demand: [0.2, 4], arrivals: [poisson, step, hot], burst: [10, 100], limit: 100, outages: [[1, 2.5]]}\n";
        let cases = parse(text).expect("valid").scenarios[0].cases();
        assert_eq!(cases.len(), 2 * 2 * 3 * 2);
        assert_eq!(cases[0].outages, vec![(1_000_000, 2_500_000)]);
        assert!(cases[0].out_at(1_000_000) && !cases[0].out_at(2_500_000));
        assert_eq!(
            (cases[0].seconds, cases[0].rtt_us, cases[0].timeout_us),
            (60, 1_000, 20_000)
        );
    }

    #[test]
    fn values_no_run_can_use_are_refused_with_what_is_allowed() {
        for (fields, says) in [
            (", seconds: 0", "seconds in 1..=3600"),
            (", rtt_ms: -1", "rtt_ms"),
            (", jitter_ms: .nan", "jitter_ms"),
            (", outages: [[5, 5]]", "from < to"),
        ] {
            let err = parse(&grid(fields)).expect_err(fields).to_string();
            assert!(err.contains(says), "{fields}: {err}");
        }
        let err = parse("scenarios:\n  - {name: g, sidecars: [0], demand: [1], arrivals: [poisson], burst: [1], limit: 1}\n")
            .expect_err("no sidecars")
            .to_string();
        assert!(err.contains("1..=10000"), "{err}");
        let err = parse("scenarios:\n  - {name: g, sidecars: [1], demand: [1e308], arrivals: [poisson], burst: [1], limit: 1}\n")
            .expect_err("huge demand")
            .to_string();
        assert!(err.contains("demand"), "{err}");
        let err = parse("scenarios:\n  - {name: g, sidecars: [1], demand: [100], arrivals: [poisson], burst: [1], limit: 100000, seconds: 3600}\n")
            .expect_err("too many requests")
            .to_string();
        assert!(err.contains("at most 20000000 requests"), "{err}");
        let err = parse(&grid(", spread: 3"))
            .expect_err("unknown field")
            .to_string();
        assert!(err.contains("spread"), "{err}");
    }
}
