//! A request's plan: descriptor → rule → bucket, each distinct bucket once with the hits of every
//! descriptor that lands on it summed (saturating, so no sum of costs ever wraps to free).

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::OnceLock;

use sluice_core::bucket::Algorithm;
use sluice_core::descriptor::Hold;
use sluice_core::rules::Payment;
use sluice_core::{Descriptor, Entry, RuleSet};
use smallvec::SmallVec;

use crate::bucket::LeaseBucket;
use crate::decision::{LimitInfo, RateLimitRequest};
use crate::key;
use crate::ledger::{StoreStatus, Terms};

mod matching;

use matching::{Found, Matched, matched};

/// Where a bucket came from: tracked in the engine's table, or made for this request only
/// because there was no room to track it (denied as [`StoreStatus::NoRoom`]).
#[derive(Debug)]
pub(crate) enum Slot {
    /// A tracked key.
    Tracked(LeaseBucket),
    /// An untracked bucket for a key with no room.
    NoRoom(LeaseBucket),
}

/// The limits a descriptor charges. A count on a descriptor with a post-paid limit is usage
/// reported after the request (Envoy's `apply_on_stream_done` entry, `Usage/Report`): it charges
/// the post-paid limits only. The descriptor's prepaid limits were charged when the request came
/// (its request-time entry), and charging them the usage would take the response's cost from a
/// request budget (and could deny a report, which is never denied).
fn reported_only<'r, 'd>(
    mut limits: SmallVec<[Matched<'r, 'd>; 1]>,
    d: &Descriptor,
    req: &RateLimitRequest<'_>,
) -> SmallVec<[Matched<'r, 'd>; 1]> {
    let post_paid = |m: &Matched<'_, '_>| matches!(m.info.payment, Payment::PostPaid { .. });
    let counted = d.hits_addend.unwrap_or(req.hits_addend) > 0;
    if counted && limits.len() > 1 && limits.iter().any(post_paid) {
        limits.retain(|m| post_paid(m));
    }
    limits
}

/// The keys of the concurrency limits and reservations descriptor `d` matches in `domain`, as
/// (table identity, entries): where its release looks for the hold.
pub(crate) fn hold_keys<'d>(
    rules: &RuleSet,
    domain: &str,
    d: &'d Descriptor,
) -> SmallVec<[(u64, Cow<'d, [Entry]>); 1]> {
    match matched(rules, domain, d) {
        Found::Limits(limits) => limits
            .into_iter()
            .filter(|m| {
                m.info.rate.algorithm == Algorithm::Concurrency
                    || m.info.payment.reserve().is_some()
            })
            .map(|m| (m.identity, m.key))
            .collect(),
        Found::Unlimited | Found::Nothing => SmallVec::new(),
    }
}

/// A reservation a request's release settled: its descriptor, the limit's table identity, and
/// the tokens it had reserved (which cover that much of the usage the descriptor reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settled {
    pub(crate) descriptor: usize,
    pub(crate) identity: u64,
    pub(crate) reserved: u64,
}

/// One distinct bucket of a request and what the request asks of it (`'d`: the request's
/// descriptors, whose entries key it).
#[derive(Debug)]
pub(crate) struct Charge<'d> {
    /// The bucket.
    pub(crate) bucket: LeaseBucket,
    /// The identity the bucket is tracked by (its global bucket's is `bucket.identity`).
    pub(crate) identity: u64,
    /// The limit (the same for every descriptor on this bucket: the key includes the identity).
    pub(crate) info: LimitInfo,
    /// Hits of every descriptor on this bucket that checks (and, prepaid, pays) before the
    /// request, summed without wrapping.
    pub(crate) hits: u64,
    /// Whether any descriptor on this bucket is such a check (a post-paid bucket may only be
    /// reported to).
    pub(crate) checked: bool,
    /// Post-paid usage reported on this bucket (explicit per-descriptor `hits_addend` > 0),
    /// summed without wrapping: charged in full, never denied.
    pub(crate) reported: u64,
    /// The entries the bucket is keyed by: a descriptor's own, or `share_threshold` patterns
    /// standing for its values.
    pub(crate) entries: Cow<'d, [Entry]>,
    /// The global store's key, made by the first store call that needs it and used by every
    /// later one (background work takes a copy, and so carries no descriptors).
    store_key: OnceLock<String>,
    /// The store's state for this bucket, updated by the lease calls.
    pub(crate) store: StoreStatus,
    /// A concurrency limit a descriptor acquires a hold on: a request it admits holds its
    /// slots (`crate::holds`) until released.
    pub(crate) acquire: bool,
}

impl Charge<'_> {
    /// The global store's key of this bucket, made once per request (most decisions never ask:
    /// their lease covers them).
    pub(crate) fn store_key(&self) -> &str {
        self.store_key
            .get_or_init(|| key::store_key(self.bucket.identity, key::Values::Sent(&self.entries)))
    }

    /// The ledger's view of this charge (with `instances` sharing the limit if the store is down).
    pub(crate) fn terms(&self, instances: u64) -> Terms {
        let store = match self.store {
            StoreStatus::Down { fallback, .. } => StoreStatus::Down {
                fallback,
                instances,
            },
            other => other,
        };
        Terms {
            hits: self.hits,
            checked: self.checked,
            quota: self.info.quota,
            count_denied: self.info.count_denied,
            reported: self.reported,
            max_debt: self.info.payment.max_debt(),
            mode: self.info.mode,
            rate: self.info.rate,
            shadow: self.info.shadow,
            store,
        }
    }
}

/// The plan of one request (`'d`: its descriptors).
#[derive(Debug, Default)]
pub(crate) struct Plan<'d> {
    /// Distinct buckets in address order: the order their locks are taken in, so two requests
    /// never deadlock.
    pub(crate) charges: SmallVec<[Charge<'d>; 4]>,
    /// For each request descriptor, the charge of its first limit (`None`: no limit applies).
    pub(crate) by_descriptor: SmallVec<[Option<usize>; 4]>,
    /// Charges of further limits of a descriptor (`rate_limits`): (descriptor, charge).
    pub(crate) more: SmallVec<[(usize, usize); 2]>,
    /// Descriptors that matched an `unlimited` rule (answered with no limit, and the most
    /// remaining a status can say).
    pub(crate) unlimited: SmallVec<[usize; 2]>,
}

impl<'d> Plan<'d> {
    /// Plans `req` under `rules`: `slot` finds (or makes) the bucket of a table identity, store
    /// identity and descriptor. Rules named in another matched rule's `replaces` do not apply, and get no key.
    pub(crate) fn build(
        rules: &RuleSet,
        req: &RateLimitRequest<'d>,
        settled: &[Settled],
        mut slot: impl FnMut(u64, u64, &[Entry], &LimitInfo) -> Slot,
    ) -> Self {
        let mut replaced: Option<HashSet<&str>> = None;
        let mut plan = Plan::default();
        let matched: SmallVec<[SmallVec<[Matched<'_, '_>; 1]>; 4]> = req
            .descriptors
            .iter()
            .enumerate()
            .map(|(index, d)| {
                let limits = match matched(rules, req.domain, d) {
                    Found::Limits(limits) => reported_only(limits, d, req),
                    Found::Unlimited => {
                        plan.unlimited.push(index);
                        SmallVec::new()
                    }
                    Found::Nothing => SmallVec::new(),
                };
                for m in limits.iter().filter(|m| !m.replaces.is_empty()) {
                    replaced
                        .get_or_insert_with(HashSet::new)
                        .extend(m.replaces.iter().map(String::as_str));
                }
                limits
            })
            .collect();
        for (index, (d, limits)) in req.descriptors.iter().zip(matched).enumerate() {
            plan.by_descriptor.push(None);
            let applies = |m: &Matched<'_, '_>| {
                let r = replaced.as_ref();
                !m.name.is_some_and(|n| r.is_some_and(|r| r.contains(n)))
            };
            // A release charges no prepaid limit and no concurrency limit (the engine gives the
            // hold back before planning): its entries may match the rate limits its
            // request-time descriptor already paid. Its count is usage, reported to its post-paid
            // limits beyond what a reservation it settled covered (never lost: a release that
            // found no reservation reports it all).
            if matches!(d.hold, Hold::Release(_)) {
                let used = d.hits_addend.unwrap_or(req.hits_addend);
                for m in limits
                    .into_iter()
                    .filter(|m| applies(m) && m.info.payment.max_debt().is_some())
                {
                    let covered = settled
                        .iter()
                        .find(|s| s.descriptor == index && s.identity == m.identity)
                        .map_or(0, |s| s.reserved);
                    let report = used.saturating_sub(covered);
                    if report > 0 {
                        let at = plan.charge(req, d, m, Some(report), &mut slot);
                        match &mut plan.by_descriptor[index] {
                            first @ None => *first = Some(at),
                            Some(_) => plan.more.push((index, at)),
                        }
                    }
                }
                continue;
            }
            for m in limits.into_iter().filter(applies) {
                let at = plan.charge(req, d, m, None, &mut slot);
                match &mut plan.by_descriptor[index] {
                    first @ None => *first = Some(at),
                    Some(_) => plan.more.push((index, at)),
                }
            }
        }
        plan.sort_for_locking();
        plan
    }

    /// Adds what descriptor `d` asks of limit `m` to its charge, making the charge
    /// (and finding its bucket with `slot`) if the request has none on that bucket yet; returns
    /// the charge's index.
    fn charge(
        &mut self,
        req: &RateLimitRequest<'d>,
        d: &Descriptor,
        m: Matched<'_, 'd>,
        report: Option<u64>,
        slot: &mut impl FnMut(u64, u64, &[Entry], &LimitInfo) -> Slot,
    ) -> usize {
        let default_hits = if req.hits_addend == 0 {
            1
        } else {
            req.hits_addend
        };
        // A post-paid rule is never paid before the request: a count (the descriptor's, else
        // the request's) is usage reported after it, and no count is a check (a peek).
        // Envoy's request-time entry sends an explicit 0, its stream-done entry the usage;
        // ext_authz sends no count at all.
        let concurrency = m.info.rate.algorithm == Algorithm::Concurrency;
        let reserve = m.info.payment.reserve();
        let acquire = (concurrency || reserve.is_some()) && d.hold == Hold::Acquire;
        let (hits, reported) = match (m.info.payment, d.hits_addend) {
            // Usage a settle reports beyond its reservation.
            _ if let Some(n) = report => (None, n),
            // A reservation pays its estimate before the request, as a prepaid cost: the
            // request's own (`sluice-estimate`, else its count), else the rule's default, at
            // least 1 and at most the rule's `max`.
            _ if acquire && let Some(r) = reserve => {
                let asked = d.estimate.or(d.hits_addend.filter(|&n| n > 0));
                (Some(asked.unwrap_or(r.default).clamp(1, r.max)), 0)
            }
            // A concurrency limit only asked whether one more fits (no `sluice-hold: acquire`)
            // is a check: nothing taken, so nothing to give back. An acquire takes at least one
            // slot (a count of 0 must not make it a hold of nothing).
            _ if concurrency && !acquire => (Some(0), 0),
            (_, n) if acquire => (Some(n.unwrap_or(default_hits).max(1)), 0),
            // On an acquire the count is the request's estimate, not usage: a post-paid rule
            // without reservations only checks (its usage comes with the stream-done call).
            (Payment::PostPaid { .. }, _) if d.hold == Hold::Acquire => (Some(0), 0),
            (Payment::PostPaid { .. }, n) => match n.unwrap_or(req.hits_addend) {
                0 => (Some(0), 0),
                n => (None, n),
            },
            (Payment::Prepaid, n) => (Some(n.unwrap_or(default_hits)), 0),
        };
        // The same key twice in one request is one bucket (found by key, not by bucket:
        // an untracked bucket made for a key with no room is made once per request too).
        let seen = self
            .charges
            .iter()
            .position(|c| c.identity == m.identity && c.entries == m.key);
        match seen {
            Some(at) => {
                let c = &mut self.charges[at];
                c.hits = c.hits.saturating_add(hits.unwrap_or(0));
                c.checked |= hits.is_some();
                c.reported = c.reported.saturating_add(reported);
                c.acquire |= acquire;
                at
            }
            None => {
                let (bucket, store) = match slot(m.identity, m.store_identity, &m.key, &m.info) {
                    Slot::Tracked(b) => (b, StoreStatus::Up),
                    Slot::NoRoom(b) => (b, StoreStatus::NoRoom),
                };
                self.charges.push(Charge {
                    bucket,
                    identity: m.identity,
                    info: m.info,
                    hits: hits.unwrap_or(0),
                    checked: hits.is_some(),
                    reported,
                    entries: m.key,
                    store_key: OnceLock::new(),
                    store,
                    acquire,
                });
                self.charges.len() - 1
            }
        }
    }

    /// Sorts the charges by bucket address and points the descriptors at their new places.
    fn sort_for_locking(&mut self) {
        let mut order: SmallVec<[usize; 4]> = (0..self.charges.len()).collect();
        order.sort_by_key(|&i| self.charges[i].bucket.addr());
        if order.iter().enumerate().all(|(to, &from)| to == from) {
            return;
        }
        let mut new_place: SmallVec<[usize; 4]> = SmallVec::from_elem(0, order.len());
        for (to, &from) in order.iter().enumerate() {
            new_place[from] = to;
        }
        let mut taken: SmallVec<[Option<Charge<'d>>; 4]> =
            self.charges.drain(..).map(Some).collect();
        self.charges = order.iter().filter_map(|&i| taken[i].take()).collect();
        for at in self.by_descriptor.iter_mut().flatten() {
            *at = new_place[*at];
        }
        for (_, at) in &mut self.more {
            *at = new_place[*at];
        }
    }

    /// Whether the request acquires a hold on some concurrency limit.
    pub(crate) fn acquires(&self) -> bool {
        self.charges.iter().any(|c| c.acquire)
    }

    /// Refuses every hold the request would take (no room for one more:
    /// `engine.max_holds`): its concurrency limits deny it as `no_room_for_key`.
    pub(crate) fn refuse_acquires(&mut self) {
        for c in self.charges.iter_mut().filter(|c| c.acquire) {
            c.store = StoreStatus::NoRoom;
        }
    }

    /// Why some enforcing charge can never be paid: the request is denied without store calls.
    /// A quota that can never pay does not make it so (another quota may pass the request).
    pub(crate) fn hopeless(&self) -> bool {
        self.charges
            .iter()
            .any(|c| !c.info.shadow && !c.info.quota && c.terms(1).hopeless().is_some())
    }
}
