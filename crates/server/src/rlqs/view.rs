//! What operators see of RLQS (Envoy exports none of the filter's stats in 1.40): metrics per
//! rule summed over this sidecar's streams (labels never come from bucket ids, which Envoy builds
//! from request headers), and each stream's buckets for the Quota API's `ListAssignments`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// One bucket of one stream, as the Quota API lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketView {
    /// The matched rule's label (empty: no rule, ALLOW_ALL).
    pub rule: String,
    /// The bucket id's entries, in the rule's order.
    pub entries: Vec<(String, String)>,
    /// The strategy in force.
    pub strategy: Option<Strategy>,
    /// Tokens per second assigned.
    pub tokens_per_second: f64,
    /// Requests per second Envoy last reported.
    pub demand: Option<f64>,
    /// Totals Envoy reported.
    pub allowed: u64,
    /// Totals Envoy reported.
    pub denied: u64,
    /// Sent unpaid (store down: the rule's fallback).
    pub unpaid: bool,
}

/// One stream, as the Quota API lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamView {
    /// Envoy's address.
    pub peer: String,
    /// The stream's domain.
    pub domain: String,
    /// Its buckets.
    pub buckets: Vec<BucketView>,
}

/// Every open stream's view, refreshed by each stream after it acts.
#[derive(Debug, Default)]
pub struct Streams {
    next: AtomicU64,
    views: Mutex<BTreeMap<u64, StreamView>>,
}

impl Streams {
    /// A new stream's id.
    pub fn open(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Replaces a stream's view.
    pub fn update(&self, id: u64, view: StreamView) {
        self.lock().insert(id, view);
    }

    /// Forgets a stream.
    pub fn close(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Every stream's view (of `domain`, if not empty), by stream id.
    pub fn snapshot(&self, domain: &str) -> Vec<(u64, StreamView)> {
        self.lock()
            .iter()
            .filter(|(_, v)| domain.is_empty() || v.domain == domain)
            .map(|(id, v)| (*id, v.clone()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, StreamView>> {
        // A panic while holding it leaves a map of plain data: still usable.
        self.views
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Every stream's buckets (of `domain`, if not empty) as the Quota API lists them.
pub fn assignments(streams: &Streams, domain: &str) -> Vec<sluice_proto::sluice::v1::Assignment> {
    use sluice_proto::sluice::v1 as pb;
    let mut out = Vec::new();
    for (id, s) in streams.snapshot(domain) {
        for b in s.buckets {
            let strategy = match b.strategy {
                Some(Strategy::Bucket(_)) => "token_bucket",
                Some(Strategy::DenyAll) => "deny_all",
                Some(Strategy::AllowAll) => "allow_all",
                None => "",
            };
            out.push(pb::Assignment {
                envoy: s.peer.clone(),
                stream: id,
                domain: s.domain.clone(),
                rule: b.rule,
                bucket: b
                    .entries
                    .into_iter()
                    .map(|(key, value)| pb::Entry { key, value })
                    .collect(),
                strategy: strategy.to_string(),
                tokens_per_second: b.tokens_per_second,
                demand: b.demand,
                allowed: b.allowed,
                denied: b.denied,
                unpaid: b.unpaid,
            });
        }
    }
    out
}
