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
    /// offers the rate (the worst case for leases: all ask at once).
    Step,
    /// Poisson, with half of the requests on one sidecar (one hot pod).
    Hot,
    /// Poisson, and every 10 s a quarter of the sidecars leave (returning their leases as a
    /// pod shutting down does) and as many new ones join, cold.
    Churn,
}

/// A grid of runs: every list is a dimension.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grid {
    /// Names the grid's rows in the report.
    pub name: String,
    /// Sidecar counts.
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

/// Parses a scenario file and checks its values.
pub fn parse(text: &str) -> anyhow::Result<File> {
    let file: File = serde_saphyr::from_str(text)?;
    for g in &file.scenarios {
        let bad = |what: &str| anyhow::anyhow!("scenario {}: {what}", g.name);
        if g.sidecars.is_empty() || g.sidecars.iter().any(|&n| n == 0 || n > 100_000) {
            return Err(bad("sidecars: a list of counts in 1..=100000"));
        }
        if g.demand.is_empty()
            || g.demand
                .iter()
                .any(|d| !(d.is_finite() && *d > 0.0 && *d <= 100.0))
        {
            return Err(bad("demand: a list of fractions of the limit in (0, 100]"));
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
                    for &burst in &self.burst {
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
                        });
                    }
                }
            }
        }
        cases
    }
}
