//! RLQS series (Envoy exports none of the filter's stats in 1.40): per rule, summed over this
//! sidecar's streams; labels never come from bucket ids, which Envoy builds from request headers.

use prometheus::{
    GaugeVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    register_gauge_vec_with_registry, register_int_counter_vec_with_registry,
    register_int_gauge_vec_with_registry, register_int_gauge_with_registry,
};
use sluice_engine::assignment::Strategy;

/// RLQS series.
#[derive(Debug, Clone)]
pub struct RlqsMetrics {
    /// Open streams.
    pub streams: IntGauge,
    /// Tokens per second assigned to a rule's buckets, summed over this sidecar's Envoys.
    pub assigned: GaugeVec,
    /// Buckets of a rule held by this sidecar's Envoys (one per bucket and Envoy).
    pub buckets: IntGaugeVec,
    /// Requests Envoy reported for a rule's buckets, allowed or denied.
    pub reported: IntCounterVec,
    /// Assignments sent, by strategy (`token_bucket`, `deny_all`, `allow_all`, `abandon`).
    pub sent: IntCounterVec,
    /// Buckets not tracked because a stream already held the most it may.
    pub refused: IntCounterVec,
}

impl RlqsMetrics {
    /// Registers the series in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        Ok(Self {
            streams: register_int_gauge_with_registry!(
                Opts::new("sluice_rlqs_streams", "Open RLQS streams (one per Envoy)."),
                registry
            )?,
            assigned: register_gauge_vec_with_registry!(
                Opts::new(
                    "sluice_rlqs_assigned_tokens_per_second",
                    "Tokens per second assigned to a rule's RLQS buckets, summed over this \
                     sidecar's Envoys (0 while DENY_ALL; rule \"\" for buckets with no rule)."
                ),
                &["rule"],
                registry
            )?,
            buckets: register_int_gauge_vec_with_registry!(
                Opts::new(
                    "sluice_rlqs_buckets",
                    "RLQS buckets of a rule held by this sidecar's Envoys (one per bucket and \
                     Envoy)."
                ),
                &["rule"],
                registry
            )?,
            reported: register_int_counter_vec_with_registry!(
                Opts::new(
                    "sluice_rlqs_reported_requests_total",
                    "Requests Envoy reported for a rule's RLQS buckets, by outcome (allowed, \
                     denied)."
                ),
                &["rule", "outcome"],
                registry
            )?,
            sent: register_int_counter_vec_with_registry!(
                Opts::new(
                    "sluice_rlqs_assignments_total",
                    "RLQS bucket actions sent, by strategy (token_bucket, deny_all, allow_all, \
                     abandon)."
                ),
                &["strategy"],
                registry
            )?,
            refused: register_int_counter_vec_with_registry!(
                Opts::new(
                    "sluice_rlqs_buckets_refused_total",
                    "RLQS buckets left unassigned or denied, by reason (too_many: the stream \
                     holds the most buckets it may; too_large: its bucket ids already hold \
                     1 MiB; bad_id: an invalid bucket id; no_room: engine.max_keys left no room \
                     for the bucket's key, so it was sent DENY_ALL)."
                ),
                &["reason"],
                registry
            )?,
        })
    }

    /// A rule gained (`+1`) or lost (`-1`) a bucket on one stream.
    pub fn bucket(&self, rule: &str, delta: i64) {
        self.buckets.with_label_values(&[rule]).add(delta);
    }

    /// Counts a sent action.
    pub fn sent(&self, strategy: Option<Strategy>) {
        let label = match strategy {
            Some(Strategy::Bucket(_)) => "token_bucket",
            Some(Strategy::DenyAll) => "deny_all",
            Some(Strategy::AllowAll) => "allow_all",
            None => "abandon",
        };
        self.sent.with_label_values(&[label]).inc();
    }
}
