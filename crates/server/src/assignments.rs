//! What operators see of RLQS assignments: each open stream's buckets, refreshed by the stream
//! after it acts, for the Quota API's `ListAssignments`. Below both the RLQS service (which
//! updates it) and the server state (which holds it), so neither imports the other for it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_engine::assignment::Strategy;

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
