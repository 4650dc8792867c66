//! One RLQS stream: its domain, its buckets, and the loop that answers Envoy.
//!
//! The loop acts after every usage report and every second: each bucket gets its next paid
//! assignment, or nothing if the one it holds is paid and not about to lapse. A bucket with no
//! rule (no rule uses exactly its keys, an `unlimited` or shadow-mode rule, or global shadow
//! mode) is told `ALLOW_ALL`, as RLS would answer OK. A bucket without traffic for
//! [`ABANDON_AFTER`] is abandoned (Envoy forgets it; its next request starts it again), and so is
//! one whose rule changed on reload, so no assignment outlives the limit it was paid under. When
//! the stream ends, tokens leased and not assigned go back to the store; what Envoy may still
//! admit until its assignments expire stays spent.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::rules::BucketMatch;
use sluice_core::{Entry, RuleSet};
use sluice_engine::Payee;
use sluice_engine::assignment::{Funds, Share, Step, Strategy, TICK};
use sluice_proto::envoy::rlqs::rate_limit_quota_response::BucketAction;
use sluice_proto::envoy::rlqs::{RateLimitQuotaResponse, RateLimitQuotaUsageReports};
use tokio::sync::mpsc::Sender;
use tonic::{Status, Streaming};

use super::bucket::{
    BucketKind, StreamBucket, enforced, entries_of, free, id_bytes, pairs, reported, retire,
    same_limit,
};
use super::wire;
use crate::admission::Charge;
use crate::assignments::{BucketView, StreamView};
use crate::state::AppState;

/// Most buckets one stream may hold; reports of more are left unassigned (Envoy applies its
/// `no_assignment_behavior`) and counted.
pub const MAX_BUCKETS: usize = 4096;
/// A bucket with no reported traffic for this long is abandoned.
pub const ABANDON_AFTER: Duration = Duration::from_secs(30);
/// Most bytes of bucket ids (keys and values as Envoy sent them) one stream may hold; ids
/// beyond are left unassigned (Envoy applies its `no_assignment_behavior`) and counted
/// (`too_large`). Each id is held once, and answers must name it as Envoy sent it.
pub const MAX_ID_BYTES: usize = 1 << 20;

/// What a stream is charged per bucket it tracks, besides three times the bucket id's bytes
/// (the stream's copy, `ListAssignments`' view, the answer being built): the bucket's state,
/// its entries in the stream's map and the view (2.4 KiB measured with 4 096 buckets a stream,
/// `loadtest/pin-memory.sh`; rounded up).
pub const BUCKET_COST: usize = 3 * 1024;

/// What tracking the bucket `entries` costs its stream.
fn bucket_cost(entries: &[Entry]) -> usize {
    BUCKET_COST + 3 * id_bytes(entries)
}

/// Runs one stream until Envoy closes it, it fails, or sluice drains. Its buckets are charged to
/// `charge`, the call's request bytes ([`crate::admission`]), when there is one.
pub async fn run(
    state: Arc<AppState>,
    peer: String,
    mut inbound: Streaming<RateLimitQuotaUsageReports>,
    tx: Sender<Result<RateLimitQuotaResponse, Status>>,
    charge: Option<Charge>,
) {
    let id = state.rlqs.open();
    state.metrics.rlqs.streams.inc();
    let mut stream = RlqsStream {
        state: Arc::clone(&state),
        id,
        domain: None,
        rules: state.engine.rules(),
        slots: HashMap::new(),
        id_bytes: 0,
        charge,
    };
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let drain = state.drain.clone();
    let failed = loop {
        tokio::select! {
            () = drain.cancelled() => break None,
            () = tx.closed() => break None,
            msg = inbound.message() => match msg {
                Ok(Some(reports)) => {
                    if let Err(status) = stream.report(reports) {
                        break Some(status);
                    }
                }
                Ok(None) => break None,
                // A bound on what the client may hold (`crate::admission`): the client is told.
                Err(e) if e.code() == tonic::Code::ResourceExhausted => break Some(e),
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "RLQS stream ended");
                    break None;
                }
            },
            _ = tick.tick() => {}
        }
        let actions = stream.act().await;
        if !actions.is_empty()
            && tx
                .send(Ok(RateLimitQuotaResponse {
                    bucket_action: actions,
                }))
                .await
                .is_err()
        {
            break None;
        }
        state.rlqs.update(id, stream.view(&peer));
    };
    if let Some(status) = failed {
        // A client can open stream after stream that is refused: a line a second.
        static REFUSED: sluice_core::SampledLine = sluice_core::SampledLine::new();
        if let Some(unlogged) = REFUSED.sample_now() {
            tracing::info!(
                %peer,
                status = %status.message(),
                unlogged_since_last_line = unlogged,
                "RLQS stream refused (sampled: at most one line a second)"
            );
        }
        let _ = tx.send(Err(status)).await;
    }
    stream.finish().await;
    state.rlqs.close(id);
    state.metrics.rlqs.streams.dec();
}

struct RlqsStream {
    state: Arc<AppState>,
    /// This stream's id (its demands' name in the store).
    id: u64,
    domain: Option<String>,
    /// The rules the buckets were matched with.
    rules: Arc<RuleSet>,
    /// By bucket id, entries sorted by key (the one copy of each id the stream holds).
    slots: HashMap<Arc<[Entry]>, StreamBucket>,
    /// Bytes of the bucket ids in `slots` (bounded by [`MAX_ID_BYTES`]).
    id_bytes: usize,
    /// The call's request bytes, charged [`BUCKET_COST`] and the id's bytes per bucket.
    charge: Option<Charge>,
}

impl RlqsStream {
    /// Takes a usage report message in.
    fn report(&mut self, reports: RateLimitQuotaUsageReports) -> Result<(), Status> {
        match &self.domain {
            None if reports.domain.is_empty() => {
                return Err(Status::invalid_argument(
                    "the first usage report of a stream must name its domain",
                ));
            }
            None => {
                crate::validate::domain(&reports.domain)?;
                self.domain = Some(reports.domain);
            }
            Some(d) if !reports.domain.is_empty() && *d != reports.domain => {
                return Err(Status::invalid_argument(format!(
                    "a stream has one domain ('{d}'); open another stream for '{}'",
                    reports.domain
                )));
            }
            Some(_) => {}
        }
        let now = self.state.engine.now();
        for usage in reports.bucket_quota_usages {
            let entries = match wire::entries(usage.bucket_id.as_ref()) {
                Ok(e) => e,
                Err(status) => {
                    self.state
                        .metrics
                        .rlqs
                        .refused
                        .with_label_values(&["bad_id"])
                        .inc();
                    return Err(status);
                }
            };
            let elapsed = crate::durations::whole_seconds(usage.time_elapsed.as_ref());
            let (allowed, denied) = (usage.num_requests_allowed, usage.num_requests_denied);
            let id = match self.slots.get_key_value(entries.as_slice()) {
                Some((id, _)) => Arc::clone(id),
                None => {
                    let bytes = id_bytes(&entries);
                    let refused = if self.slots.len() >= MAX_BUCKETS {
                        Some("too_many")
                    } else if self.id_bytes + bytes > MAX_ID_BYTES {
                        Some("too_large")
                    } else if let Some(charge) = &self.charge
                        && charge.grow(bucket_cost(&entries)).is_err()
                    {
                        Some("request_bytes")
                    } else {
                        None
                    };
                    if let Some(reason) = refused {
                        self.state
                            .metrics
                            .rlqs
                            .refused
                            .with_label_values(&[reason])
                            .inc();
                        continue;
                    }
                    let id: Arc<[Entry]> = entries.into();
                    let slot = self.track(Arc::clone(&id), now);
                    self.id_bytes += bytes;
                    self.slots.insert(Arc::clone(&id), slot);
                    id
                }
            };
            self.record(&id, allowed, denied, elapsed, now);
        }
        Ok(())
    }

    /// Adds one usage report to the bucket `id` tracks.
    fn record(&mut self, id: &[Entry], allowed: u64, denied: u64, elapsed: u64, now: u64) {
        let Some(slot) = self.slots.get_mut(id) else {
            return;
        };
        let m = &self.state.metrics.rlqs;
        m.reported
            .with_label_values(&[&slot.rule, "allowed"])
            .inc_by(allowed);
        m.reported
            .with_label_values(&[&slot.rule, "denied"])
            .inc_by(denied);
        match &mut slot.kind {
            BucketKind::Limited(b) => b.report(allowed, denied, elapsed, now),
            BucketKind::Free(f) => {
                f.reported.add(allowed, denied, now);
            }
        }
    }

    /// Starts tracking a bucket id (entries sorted by key) under the current rules: its share
    /// is paid through the engine, from the rule's bucket and its descriptor's further limits.
    fn track(&self, id: Arc<[Entry]>, now: u64) -> StreamBucket {
        let domain = self.domain.as_deref().unwrap_or_default();
        let shadow = self.state.runtime.load().shadow_mode;
        let (tracked, rule) = match self.rules.match_bucket_id(domain, &id) {
            BucketMatch::Rule(rule, ordered) => match enforced(rule, shadow) {
                Some((rate, mode, fallback)) => {
                    let further = self.rules.limits_of(rule)[1..]
                        .iter()
                        .filter_map(|r| {
                            let (rate, mode, _) = enforced(r, shadow)?;
                            Some(Payee::new(r.fingerprint, &ordered, rate, mode))
                        })
                        .collect();
                    let funds = Funds {
                        engine: Arc::clone(&self.state.engine),
                        payee: Payee::new(rule.fingerprint, &ordered, rate, mode),
                        fallback,
                        further,
                    };
                    let b = Share::new(id, rule.label.clone(), funds, self.id, now);
                    (BucketKind::Limited(Box::new(b)), rule.label.clone())
                }
                None => (free(id, now), rule.label.clone()),
            },
            BucketMatch::NoRule | BucketMatch::UnknownDomain => (free(id, now), String::new()),
        };
        self.state.metrics.rlqs.bucket(&rule, 1);
        StreamBucket {
            kind: tracked,
            rule,
            gauged: 0.0,
        }
    }

    /// Decides and pays every bucket's next action.
    async fn act(&mut self) -> Vec<BucketAction> {
        let mut actions = Vec::new();
        let now = self.state.engine.now();
        let rules = self.state.engine.rules();
        let reloaded = !Arc::ptr_eq(&rules, &self.rules);
        let shadow = self.state.runtime.load().shadow_mode;
        self.rules = rules;
        let instances = self.state.engine.store().live_instances();
        let idle = u64::try_from(ABANDON_AFTER.as_micros()).unwrap_or(u64::MAX);
        let mut gone = Vec::new();
        for (id, slot) in &mut self.slots {
            let last_traffic = reported(&slot.kind).last_traffic;
            let stale = reloaded && {
                let domain = self.domain.as_deref().unwrap_or_default();
                !same_limit(&slot.kind, self.rules.match_bucket_id(domain, id), shadow)
            };
            if stale || now.saturating_sub(last_traffic) > idle {
                gone.push(id.clone());
                continue;
            }
            let step = match &mut slot.kind {
                BucketKind::Limited(b) => {
                    let step = b.next(now, instances).await;
                    if b.no_room {
                        self.state
                            .metrics
                            .rlqs
                            .refused
                            .with_label_values(&["no_room"])
                            .inc();
                    }
                    step
                }
                BucketKind::Free(f) => f.next(now),
            };
            if let Step::Send(strategy, ttl) = step {
                actions.push(wire::assign(entries_of(&slot.kind), strategy, ttl));
                self.state.metrics.rlqs.sent(Some(strategy));
            }
            let rate = match &slot.kind {
                BucketKind::Limited(b) => b.assigned_rate(),
                BucketKind::Free(_) => 0.0,
            };
            if rate != slot.gauged {
                self.state
                    .metrics
                    .rlqs
                    .assigned
                    .with_label_values(&[&slot.rule])
                    .add(rate - slot.gauged);
                slot.gauged = rate;
            }
        }
        for id in gone {
            if let Some(slot) = self.slots.remove(&id) {
                self.id_bytes -= id_bytes(&id);
                if let Some(charge) = &self.charge {
                    charge.shrink(bucket_cost(&id));
                }
                actions.push(wire::abandon(entries_of(&slot.kind)));
                self.state.metrics.rlqs.sent(None);
                retire(&self.state.metrics.rlqs, slot, |b| b.abandon(now)).await;
            }
        }
        actions
    }

    /// The stream ended: unassigned tokens go back to the store (what Envoy may still admit
    /// until its assignments expire stays spent).
    async fn finish(&mut self) {
        self.id_bytes = 0;
        for (_, slot) in std::mem::take(&mut self.slots) {
            retire(&self.state.metrics.rlqs, slot, Share::take_pool).await;
        }
    }

    fn view(&self, peer: &str) -> StreamView {
        let mut buckets: Vec<BucketView> = self
            .slots
            .values()
            .map(|slot| match &slot.kind {
                BucketKind::Limited(b) => BucketView {
                    rule: slot.rule.clone(),
                    entries: pairs(&b.entries),
                    strategy: b.strategy(),
                    tokens_per_second: b.assigned_rate(),
                    demand: b.demand(),
                    allowed: b.reported.allowed,
                    denied: b.reported.denied,
                    unpaid: b.unpaid,
                },
                BucketKind::Free(f) => BucketView {
                    rule: slot.rule.clone(),
                    entries: pairs(&f.entries),
                    strategy: f.sent_at.map(|_| Strategy::AllowAll),
                    tokens_per_second: 0.0,
                    demand: None,
                    allowed: f.reported.allowed,
                    denied: f.reported.denied,
                    unpaid: false,
                },
            })
            .collect();
        buckets.sort_by(|a, b| a.entries.cmp(&b.entries));
        StreamView {
            peer: peer.to_string(),
            domain: self.domain.clone().unwrap_or_default(),
            buckets,
        }
    }
}
