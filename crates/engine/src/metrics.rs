//! The engine's Prometheus series. Labels are fixed words, never descriptor values.

use crate::store::StoreError;
use prometheus::{
    Counter, CounterVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry,
};

/// Engine metrics, registered into an explicitly passed registry.
#[derive(Debug, Clone)]
pub struct EngineMetrics {
    /// `sluice_tracked_keys`: bucket keys held by this instance.
    pub tracked_keys: IntGauge,
    /// `sluice_store_calls_total{op, outcome}`: global store calls (lease, release, peek).
    pub store_calls: IntCounterVec,
    /// `sluice_store_call_seconds{op}`: global store call latency.
    pub store_latency: HistogramVec,
    /// `sluice_lease_tokens_total{event}`: tokens granted to and returned by this instance.
    pub lease_tokens: IntCounterVec,
    /// `sluice_evictions_total{reason}`: keys dropped (idle, capacity).
    pub evictions: IntCounterVec,
    /// `sluice_usage_tokens_total{outcome}`: post-paid usage reported (`reported`), dropped at
    /// a rule's debt bound (`clamped`), or sent to a store that timed out and may not have charged
    /// it (`unconfirmed`; never sent twice). Charged = reported - clamped - unconfirmed.
    /// A float counter: absurd reports (up to `u64::MAX` each) must not wrap it.
    pub usage_tokens: CounterVec,
    /// `sluice_keys_refused_total`: new keys not tracked because `max_keys` was reached (in
    /// this instance's table, or the embedded store) and no room could be made: their requests
    /// were denied as `no_room_for_key`.
    pub keys_refused: IntCounter,
    /// `sluice_holds_in_flight{rule}`: slots of concurrency limits held on this instance by
    /// requests in flight, per rule (as of the last sweep, at most a second old).
    pub holds_in_flight: IntGaugeVec,
    /// `sluice_holds_expired_total{rule}`: holds given back by their hold timeout, never
    /// released (the stream-done call lost: Envoy restarted, the request's sidecar changed).
    pub holds_expired: IntCounterVec,
    /// `sluice_hold_releases_total{outcome}`: releases that gave a hold back (`released`) or
    /// found none (`unknown`: released already, expired, never taken, or another key's).
    pub hold_releases: IntCounterVec,
    /// `sluice_reservation_error_tokens{direction}`: how far a settled reservation's estimate
    /// was from the usage reported (`over`: estimate above it, refunded; `under`: below it,
    /// charged beyond the reservation).
    pub reservation_errors: HistogramVec,
    /// The refusal log line: at most one a second (a flood of new keys repeats it).
    refusal_log: std::sync::Arc<sluice_core::SampledLine>,
    /// The store-call series of each operation, resolved once (`with_label_values` hashes and
    /// locks on every call; a cold key costs a store call).
    ops: [OpSeries; 6],
    /// `sluice_lease_tokens_total{event="granted"}` and `{event="returned"}`.
    granted: IntCounter,
    returned: IntCounter,
    /// `sluice_usage_tokens_total` by outcome: reported, clamped, unconfirmed.
    usage: [Counter; 3],
}

/// What became of post-paid usage (the `outcome` label of `sluice_usage_tokens_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageOutcome {
    /// Reported to this instance.
    Reported = 0,
    /// Dropped at the rule's debt bound.
    Clamped = 1,
    /// Sent to the store, which timed out: it may not have been charged.
    Unconfirmed = 2,
}

/// A global store operation (the `op` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    /// Take tokens from a global bucket.
    Lease = 0,
    /// Give unspent tokens back.
    Release = 1,
    /// Read a global bucket.
    Peek = 2,
    /// Charge post-paid usage, or what a fallback owes after an outage, into debt.
    Charge = 3,
    /// Close a fixed window that counts denials (`count_denied`).
    Close = 4,
    /// Record an RLQS stream's demand and read everyone's.
    Demand = 5,
}

/// How a store call ended (the `outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    /// Answered.
    Ok = 0,
    /// No answer within the store timeout.
    Timeout = 1,
    /// Not reachable (or the circuit breaker is open).
    Unavailable = 2,
    /// Answered with an error.
    Error = 3,
    /// No room for a new key (the embedded store at `max_keys`).
    Full = 4,
}

const OPS: [&str; 6] = ["lease", "release", "peek", "charge", "close", "demand"];
const OUTCOMES: [&str; 5] = ["ok", "timeout", "unavailable", "error", "full"];

#[derive(Debug, Clone)]
struct OpSeries {
    calls: [IntCounter; 5],
    latency: Histogram,
}

impl EngineMetrics {
    /// Creates and registers the series.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let store_calls = IntCounterVec::new(
            Opts::new(
                "sluice_store_calls_total",
                "Global store calls by operation and outcome",
            ),
            &["op", "outcome"],
        )?;
        let store_latency = HistogramVec::new(
            HistogramOpts::new("sluice_store_call_seconds", "Global store call latency").buckets(
                vec![
                    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.02, 0.05,
                    0.1,
                ],
            ),
            &["op"],
        )?;
        let lease_tokens = IntCounterVec::new(
            Opts::new(
                "sluice_lease_tokens_total",
                "Tokens leased from (granted) or returned to the global store",
            ),
            &["event"],
        )?;
        let usage_tokens = CounterVec::new(
            Opts::new(
                "sluice_usage_tokens_total",
                "Post-paid usage tokens: reported, clamped at the debt bound, or unconfirmed (store timed out)",
            ),
            &["outcome"],
        )?;
        let ops = OPS.map(|op| OpSeries {
            calls: OUTCOMES.map(|outcome| store_calls.with_label_values(&[op, outcome])),
            latency: store_latency.with_label_values(&[op]),
        });
        let m = Self {
            refusal_log: std::sync::Arc::default(),
            ops,
            granted: lease_tokens.with_label_values(&["granted"]),
            returned: lease_tokens.with_label_values(&["returned"]),
            usage: ["reported", "clamped", "unconfirmed"]
                .map(|outcome| usage_tokens.with_label_values(&[outcome])),
            usage_tokens,
            store_calls,
            store_latency,
            lease_tokens,
            tracked_keys: IntGauge::new(
                "sluice_tracked_keys",
                "Bucket keys tracked by this instance",
            )?,
            evictions: IntCounterVec::new(
                Opts::new("sluice_evictions_total", "Bucket keys evicted, by reason"),
                &["reason"],
            )?,
            keys_refused: IntCounter::new(
                "sluice_keys_refused_total",
                "New keys not tracked (and denied) because max_keys was reached and no tracked key was at rest",
            )?,
            holds_in_flight: IntGaugeVec::new(
                Opts::new(
                    "sluice_holds_in_flight",
                    "Concurrency slots held on this instance by requests in flight, per rule",
                ),
                &["rule"],
            )?,
            holds_expired: IntCounterVec::new(
                Opts::new(
                    "sluice_holds_expired_total",
                    "Holds given back by their rule's hold_timeout, never released",
                ),
                &["rule"],
            )?,
            reservation_errors: HistogramVec::new(
                HistogramOpts::new(
                    "sluice_reservation_error_tokens",
                    "Settled reservations: |estimate - reported usage|, by direction (over: refunded, under: charged beyond)",
                )
                .buckets(prometheus::exponential_buckets(1.0, 4.0, 12)?),
                &["direction"],
            )?,
            hold_releases: IntCounterVec::new(
                Opts::new(
                    "sluice_hold_releases_total",
                    "Releases of holds: released, or unknown (nothing held under that token)",
                ),
                &["outcome"],
            )?,
        };
        registry.register(Box::new(m.reservation_errors.clone()))?;
        registry.register(Box::new(m.holds_in_flight.clone()))?;
        registry.register(Box::new(m.holds_expired.clone()))?;
        registry.register(Box::new(m.hold_releases.clone()))?;
        registry.register(Box::new(m.tracked_keys.clone()))?;
        registry.register(Box::new(m.store_calls.clone()))?;
        registry.register(Box::new(m.store_latency.clone()))?;
        registry.register(Box::new(m.lease_tokens.clone()))?;
        registry.register(Box::new(m.evictions.clone()))?;
        registry.register(Box::new(m.keys_refused.clone()))?;
        registry.register(Box::new(m.usage_tokens.clone()))?;
        Ok(m)
    }

    /// Counts a new key (or hold) refused for want of room (`where_`: `table`, `store` or
    /// `holds`) at `now` (µs), and logs it at most once a second.
    pub fn key_refused(&self, where_: &'static str, now: u64) {
        self.keys_refused.inc();
        if let Some(unlogged) = self.refusal_log.sample(now) {
            tracing::warn!(
                r#where = where_,
                refused_total = self.keys_refused.get(),
                unlogged_since_last_line = unlogged,
                "no room: engine.max_keys reached (where=table|store) or engine.max_holds (where=holds), and none could be made: new keys or holds are denied (no_room_for_key)"
            );
        }
    }

    /// Counts one store call and its latency.
    pub fn observe_store_call(&self, op: StoreOp, outcome: StoreOutcome, seconds: f64) {
        let series = &self.ops[op as usize];
        series.calls[outcome as usize].inc();
        series.latency.observe(seconds);
    }

    /// Counts one store call from its result, with the latency since `started`.
    pub fn observe_result<T>(
        &self,
        op: StoreOp,
        started: std::time::Instant,
        result: &Result<T, StoreError>,
    ) {
        let outcome = match result {
            Ok(_) => StoreOutcome::Ok,
            Err(StoreError::Timeout) => StoreOutcome::Timeout,
            Err(StoreError::Unavailable(_)) => StoreOutcome::Unavailable,
            Err(StoreError::Full) => StoreOutcome::Full,
            Err(StoreError::Protocol(_)) => StoreOutcome::Error,
        };
        self.observe_store_call(op, outcome, started.elapsed().as_secs_f64());
    }

    /// Counts tokens granted by the store.
    pub fn tokens_granted(&self, tokens: u64) {
        self.granted.inc_by(tokens);
    }

    /// Counts tokens given back to the store.
    pub fn tokens_returned(&self, tokens: u64) {
        self.returned.inc_by(tokens);
    }

    /// Counts post-paid usage tokens by what became of them.
    pub fn usage(&self, outcome: UsageOutcome, tokens: u64) {
        if tokens > 0 {
            self.usage[outcome as usize].inc_by(tokens as f64);
        }
    }

    /// Observes a settled reservation of `reserved` tokens whose request reported `used`.
    pub fn reservation_error(&self, reserved: u64, used: u64) {
        let (direction, error) = if reserved >= used {
            ("over", reserved - used)
        } else {
            ("under", used - reserved)
        };
        self.reservation_errors
            .with_label_values(&[direction])
            .observe(error as f64);
    }

    /// Metrics registered into a private registry (tests, benchmarks).
    pub fn unregistered() -> Self {
        Self::register(&Registry::new()).unwrap_or_else(|e| unreachable!("fresh registry: {e}"))
    }
}
