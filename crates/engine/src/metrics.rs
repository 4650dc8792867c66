//! The engine's Prometheus series. Labels are fixed words, never descriptor values.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

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
}

impl EngineMetrics {
    /// Creates and registers the series.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self {
            tracked_keys: IntGauge::new(
                "sluice_tracked_keys",
                "Bucket keys tracked by this instance",
            )?,
            store_calls: IntCounterVec::new(
                Opts::new(
                    "sluice_store_calls_total",
                    "Global store calls by operation and outcome",
                ),
                &["op", "outcome"],
            )?,
            store_latency: HistogramVec::new(
                HistogramOpts::new("sluice_store_call_seconds", "Global store call latency")
                    .buckets(vec![
                        0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.02,
                        0.05, 0.1,
                    ]),
                &["op"],
            )?,
            lease_tokens: IntCounterVec::new(
                Opts::new(
                    "sluice_lease_tokens_total",
                    "Tokens leased from (granted) or returned to the global store",
                ),
                &["event"],
            )?,
            evictions: IntCounterVec::new(
                Opts::new("sluice_evictions_total", "Bucket keys evicted, by reason"),
                &["reason"],
            )?,
        };
        registry.register(Box::new(m.tracked_keys.clone()))?;
        registry.register(Box::new(m.store_calls.clone()))?;
        registry.register(Box::new(m.store_latency.clone()))?;
        registry.register(Box::new(m.lease_tokens.clone()))?;
        registry.register(Box::new(m.evictions.clone()))?;
        Ok(m)
    }

    /// Metrics registered into a private registry (tests, benchmarks).
    pub fn unregistered() -> Self {
        Self::register(&Registry::new()).unwrap_or_else(|e| unreachable!("fresh registry: {e}"))
    }
}
