//! One run: `n` real engines (the sidecars' decision code, unchanged) on one simulated store,
//! every request of the case decided by the sidecar it arrives at, each engine's maintenance
//! loop running as in the server; then the same arrivals through the exact limiter.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use sluice_core::Descriptor;
use sluice_core::config::parse_config;
use sluice_engine::decision::{Code, EngineSettings, RateLimitRequest};
use sluice_engine::{Engine, EngineMetrics};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::arrivals::{self, Arrival};
use crate::clock::SimClock;
use crate::exact::Exact;
use crate::scenario::{Case, Leases};
use crate::store::SimStore;

/// What a run saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The run.
    pub case: Case,
    /// Requests sent.
    pub requests: u64,
    /// Requests sluice admitted.
    pub admitted: u64,
    /// Requests the exact limiter admitted.
    pub exact_admitted: u64,
    /// Requests the exact limiter admitted and sluice denied.
    pub false_denials: u64,
    /// The most sluice had admitted beyond `B + L·t` at any moment (`t` from the first
    /// request); 0 or less: within the bound throughout.
    pub over: f64,
    /// The most sluice admitted beyond `B + L·w` in any window of length `w` (an exact limiter
    /// never admits more than its burst plus what refilled in the window); 0 or less: within.
    pub over_window: f64,
    /// `B + L·T` for the whole run.
    pub bound: f64,
    /// Admitted in the run's second half (answered from `T/2` on): with `L·T/2`, the rate a
    /// fleet settles at, apart from what its leases took at the start (a starved fleet of 1 000
    /// holds about 1 500 tokens between turns, a stock, not a rate).
    pub admitted_late: u64,
    /// Store calls on the key while requests were decided (leases, returns, everything else).
    pub store_calls: u64,
    /// Of them, those made from `T/2` on: with `T/2`, the calls a second of a fleet that has
    /// settled (each of 1 000 starved sidecars makes its first call at the start).
    pub store_calls_late: u64,
    /// Of them, leases.
    pub leases: u64,
    /// Of them, returns.
    pub releases: u64,
    /// Calls that failed: the store was out.
    pub failed: u64,
    /// Decisions that waited on the store.
    pub waited: u64,
    /// Decisions that waited the store's whole timeout (the rule's fallback decided them).
    pub timed_out: u64,
}

impl Outcome {
    /// What the second half admitted, of `L·T/2`.
    pub fn late_of_limit(&self) -> f64 {
        let half = self.case.limit as f64 * self.case.seconds as f64 / 2.0;
        if half == 0.0 {
            0.0
        } else {
            self.admitted_late as f64 / half
        }
    }

    /// Store calls on the key a simulated second.
    pub fn calls_per_sec(&self) -> f64 {
        self.store_calls as f64 / self.case.seconds as f64
    }

    /// Store calls on the key a simulated second in the second half.
    pub fn late_calls_per_sec(&self) -> f64 {
        self.store_calls_late as f64 * 2.0 / self.case.seconds as f64
    }
}

/// The rules: one key, `limit` a second with `burst`, every other setting a user's default.
fn config(case: &Case) -> String {
    format!(
        "domains:\n  - domain: fleet\n    descriptors:\n      - key: k\n        rate_limit: {{unit: second, requests_per_unit: {}, burst: {}}}\n",
        case.limit, case.burst
    )
}

/// A sidecar: its engine, and the way to stop its maintenance loop (which returns its leases).
struct Sidecar {
    engine: Arc<Engine>,
    stop: oneshot::Sender<()>,
    loop_done: JoinHandle<()>,
}

impl Sidecar {
    fn start(case: &Case, store: &Arc<SimStore>, clock: SimClock) -> Self {
        let rules = parse_config(&config(case)).expect("the fleet config").rules;
        let engine = Arc::new(Engine::new(
            rules,
            store.clone(),
            Arc::new(clock),
            EngineSettings {
                rate_lease_ttl: (case.leases == Leases::Rates)
                    .then(|| std::time::Duration::from_secs(10)),
                ..EngineSettings::default()
            },
            EngineMetrics::unregistered(),
        ));
        let (stop, stopped) = oneshot::channel::<()>();
        let loop_done = tokio::spawn(engine.clone().maintain_until(async move {
            let _ = stopped.await;
        }));
        Self {
            engine,
            stop,
            loop_done,
        }
    }

    /// Stops it as a pod shutting down does: its maintenance loop returns every lease.
    async fn leave(self) {
        let _ = self.stop.send(());
        let _ = self.loop_done.await;
    }
}

/// Runs `case` on a runtime of its own, on a paused (simulated) clock.
pub fn run(case: &Case) -> Outcome {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
        .block_on(simulate(case))
}

async fn simulate(case: &Case) -> Outcome {
    let arrivals = arrivals::draw(case);
    let churn = arrivals::churn(case);
    let clock = SimClock::starting_now();
    let start = Instant::now();
    let store = SimStore::new(case, clock);
    let mut fleet: Vec<Sidecar> = (0..case.sidecars)
        .map(|_| Sidecar::start(case, &store, clock))
        .collect();
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, bool, u64, u64)>();
    let mut churn = churn.into_iter().peekable();
    let half = second_half(case, &arrivals);
    let mut calls_at_half = None;
    for (i, &Arrival { at_us, sidecar }) in arrivals.iter().enumerate() {
        while let Some((at, slots)) = churn.next_if(|(at, _)| *at <= at_us) {
            tokio::time::sleep_until(start + std::time::Duration::from_micros(at)).await;
            for slot in slots {
                let new = Sidecar::start(case, &store, clock);
                // Leaving takes a store call: the old pod goes while the new one serves.
                let old = std::mem::replace(&mut fleet[slot], new);
                tokio::spawn(old.leave());
            }
        }
        tokio::time::sleep_until(start + std::time::Duration::from_micros(at_us)).await;
        if at_us >= half && calls_at_half.is_none() {
            calls_at_half = Some(store.calls.on_keys());
        }
        let engine = fleet[sidecar].engine.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let descriptors = [Descriptor::of([("k", "v")])];
            let asked = clock.elapsed_micros();
            let decision = engine
                .decide(&RateLimitRequest {
                    domain: "fleet",
                    descriptors: &descriptors,
                    hits_addend: 1,
                })
                .await;
            let _ = tx.send((
                i,
                decision.overall == Code::Ok,
                asked,
                clock.elapsed_micros(),
            ));
        });
    }
    drop(tx);
    let mut decided = vec![None; arrivals.len()];
    while let Some((i, ok, asked, answered)) = rx.recv().await {
        decided[i] = Some((ok, asked, answered));
    }
    let calls = &store.calls;
    let store_calls = calls.on_keys();
    let counts = Counts {
        store_calls,
        store_calls_late: store_calls - calls_at_half.unwrap_or(store_calls),
        leases: calls.leases.load(Ordering::Relaxed),
        releases: calls.releases.load(Ordering::Relaxed),
        failed: calls.failed.load(Ordering::Relaxed),
    };
    for sidecar in fleet {
        sidecar.leave().await;
    }
    let decided: Vec<(bool, u64, u64)> = decided
        .into_iter()
        .map(|d| d.expect("every request is decided"))
        .collect();
    tally(case, &arrivals, &decided, counts)
}

/// When a run's second half begins (µs, as arrivals count time): `T/2` after its first request.
/// Its admissions and its store calls are counted from here on.
fn second_half(case: &Case, arrivals: &[Arrival]) -> u64 {
    arrivals.first().map_or(0, |a| a.at_us) + case.seconds * 500_000
}

/// The store's counts when the last request was decided.
struct Counts {
    store_calls: u64,
    store_calls_late: u64,
    leases: u64,
    releases: u64,
    failed: u64,
}

/// Compares what sluice decided with the exact limiter on the same arrivals.
fn tally(case: &Case, arrivals: &[Arrival], decided: &[(bool, u64, u64)], c: Counts) -> Outcome {
    let mut exact = Exact::new(case.limit, case.burst);
    let (mut exact_admitted, mut false_denials) = (0, 0);
    // The exact limiter sees each request when sluice did (`asked`): tokio's clock ticks in
    // whole milliseconds, so a request drawn at 123.656 ms reaches its sidecar at 124 ms. Judged
    // at the drawn time, the exact limiter saw gaps sluice never did: a burst of 1 at 324 a
    // second (a token every 3.09 ms) counted a third of its false denials from the rounding.
    for &(ok, asked, _) in decided {
        let exact_ok = exact.admit(asked);
        exact_admitted += u64::from(exact_ok);
        false_denials += u64::from(exact_ok && !ok);
    }
    // B + L·t at each admission, in the order they were answered, from the first request's.
    let first = decided.first().map_or(0, |d| d.1);
    let half = second_half(case, arrivals);
    let mut answered: Vec<u64> = decided.iter().filter(|d| d.0).map(|d| d.2).collect();
    answered.sort_unstable();
    let bound_at =
        |t: u64| case.burst as f64 + case.limit as f64 * t.saturating_sub(first) as f64 / 1e6;
    let over = answered
        .iter()
        .enumerate()
        .map(|(k, &t)| (k + 1) as f64 - bound_at(t))
        .fold(f64::NEG_INFINITY, f64::max);
    // B + L·(t_k − t_j) over every window [t_j, t_k] of admissions: k − j + 1 admitted there.
    // The most over it is the most of (k − L·t_k) + (1 − j + L·t_j) for j ≤ k, less B.
    let per_us = case.limit as f64 / 1e6;
    let mut best_start = f64::NEG_INFINITY;
    let mut over_window = f64::NEG_INFINITY;
    for (k, &t) in answered.iter().enumerate() {
        let at = (t.saturating_sub(first)) as f64;
        best_start = best_start.max(1.0 - (k + 1) as f64 + per_us * at);
        over_window =
            over_window.max((k + 1) as f64 - per_us * at + best_start - case.burst as f64);
    }
    Outcome {
        case: case.clone(),
        requests: arrivals.len() as u64,
        over_window: if answered.is_empty() {
            0.0
        } else {
            over_window
        },
        admitted: answered.len() as u64,
        exact_admitted,
        false_denials,
        over: if answered.is_empty() { 0.0 } else { over },
        bound: bound_at(first + case.seconds * 1_000_000),
        admitted_late: answered.iter().filter(|&&t| t >= half).count() as u64,
        store_calls: c.store_calls,
        store_calls_late: c.store_calls_late,
        leases: c.leases,
        releases: c.releases,
        failed: c.failed,
        waited: decided.iter().filter(|d| d.2 > d.1).count() as u64,
        timed_out: decided
            .iter()
            .filter(|d| d.2 - d.1 >= case.timeout_us)
            .count() as u64,
    }
}
