//! [`Engine`]: the decision procedure and everything the engine offers its callers.
//!
//! A decision, in order: [`Plan::build`] matches every descriptor to a rule and finds each
//! distinct bucket with its summed hits; [`Leaser::ensure`] makes sure the leases can cover them
//! (asking the global store only when a lease runs dry); then, under the buckets' locks taken in
//! address order, [`ledger::settle`] charges every bucket or none. Background refills start after
//! the locks are dropped.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use sluice_core::{Clock, Entry, RuleSet};
use smallvec::SmallVec;

use crate::decision::{
    Code, Decision, Denial, DescriptorOutcome, EngineSettings, LastDenial, RateLimitRequest,
};
use crate::key::Values;
use crate::lease::Leaser;
use crate::ledger::{self, LeaseState, Settlement, StoreStatus};
use crate::metrics::{EngineMetrics, UsageOutcome};
use crate::plan::Plan;
use crate::quota::{self, KeyFilter, QuotaView, TrackedPage};
use crate::store::{GlobalStore, StoreError};
use crate::table::BucketTable;

/// The decision engine.
pub struct Engine {
    clock: Arc<dyn Clock>,
    rules: ArcSwap<RuleSet>,
    /// Talks to the global store (shared with background refills).
    leaser: Arc<Leaser>,
    /// The tracked keys.
    table: BucketTable,
    /// Hits denied per key since the last flush to the store (`quota top`).
    denied: crate::top::DeniedCounts,
    /// Pushed resets acted on this second: the second (high 32 bits) and the count.
    pushed_drops: std::sync::atomic::AtomicU64,
    /// Holds of concurrency limits kept, bounded by `max_holds`.
    holds: crate::holds::HoldCount,
    settings: EngineSettings,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.leaser.store.name())
            .field("keys", &self.table.len())
            .field("settings", &self.settings)
            .finish()
    }
}

impl Engine {
    /// An engine deciding with `rules` over `store`.
    pub fn new(
        rules: RuleSet,
        store: Arc<dyn GlobalStore>,
        clock: Arc<dyn Clock>,
        settings: EngineSettings,
        metrics: EngineMetrics,
    ) -> Self {
        Self {
            clock: clock.clone(),
            rules: ArcSwap::from_pointee(rules),
            table: BucketTable::new(settings.max_keys, metrics.clone()),
            denied: crate::top::DeniedCounts::default(),
            pushed_drops: std::sync::atomic::AtomicU64::new(0),
            holds: crate::holds::HoldCount::new(settings.max_holds),
            leaser: Arc::new(Leaser::new(store, metrics, settings.clone(), clock)),
            settings,
        }
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.load_full()
    }

    /// Swaps in new rules atomically. Buckets are keyed by rule fingerprint, so keys of unchanged
    /// rules keep their state; keys of changed or removed rules go idle and are evicted.
    pub fn swap_rules(&self, rules: RuleSet) {
        self.rules.store(Arc::new(rules));
    }

    /// The global store.
    pub fn store(&self) -> &Arc<dyn GlobalStore> {
        &self.leaser.store
    }

    /// The engine clock's current time, in microseconds.
    pub fn now(&self) -> u64 {
        self.clock.now_micros()
    }

    /// How many keys are tracked.
    pub fn tracked_keys(&self) -> usize {
        self.table.len()
    }

    /// Decides a request.
    pub async fn decide(&self, req: &RateLimitRequest<'_>) -> Decision {
        let rules = self.rules.load_full();
        let now = self.clock.now_micros();
        let mut outcomes = vec![DescriptorOutcome::unlimited(); req.descriptors.len()];
        if !rules.has_domain(req.domain) {
            return Decision {
                overall: Code::Ok,
                outcomes,
                rules,
                unknown_domain: true,
                hold: None,
                released: 0,
            };
        }
        // Releases first: the slots they give back may be what this request's acquires take.
        let (released, settled) = self.release_holds(&rules, req, now);
        let mut evicted = Vec::new();
        let mut plan = Plan::build(
            &rules,
            req,
            &settled,
            |identity, store_identity, entries, info| {
                self.table.slot(
                    identity,
                    store_identity,
                    Values::Sent(entries),
                    info,
                    now,
                    &mut evicted,
                )
            },
        );
        for &d in &plan.unlimited {
            outcomes[d].unlimited = true;
        }
        if plan.acquires() && !self.holds.has_room() {
            self.refuse_holds(&mut plan, now);
        }
        self.leaser.return_later(evicted);
        let mut may_retry = true;
        // The whole decision waits for the store at most its timeout, leasing again included.
        let deadline = self.leaser.deadline();
        let (overall, hold) = loop {
            self.leaser.ensure(&mut plan, now, deadline).await;
            match self.settle(&plan, &mut outcomes, now, may_retry) {
                Some(settled) => break settled,
                // A concurrent request spent the leased tokens this one saw: lease again, once.
                None => may_retry = false,
            }
        };
        if plan.charges.iter().any(|c| c.reported > 0) {
            self.leaser.flush_debts(&plan, now, deadline).await;
        }
        Decision {
            overall,
            outcomes,
            rules,
            unknown_domain: false,
            hold,
            released,
        }
    }

    /// Locks the plan's buckets, settles them in the ledger and fills the outcomes; `None` when
    /// the ledger asks to lease again (nothing was charged). Also the token of the hold the
    /// request took, if it acquired one and passed.
    fn settle(
        &self,
        plan: &Plan<'_>,
        outcomes: &mut [DescriptorOutcome],
        now: u64,
        may_retry: bool,
    ) -> Option<(Code, Option<u64>)> {
        let down = plan
            .charges
            .iter()
            .any(|c| matches!(c.store, StoreStatus::Down { .. }));
        let instances = if down {
            self.leaser.store.live_instances().max(1)
        } else {
            1
        };
        let terms: SmallVec<[_; 4]> = plan.charges.iter().map(|c| c.terms(instances)).collect();
        // Charges are distinct buckets in address order: a fixed lock order.
        let mut guards: SmallVec<[_; 4]> = plan.charges.iter().map(|c| c.bucket.lock()).collect();
        let mut states: SmallVec<[&mut LeaseState; 4]> =
            guards.iter_mut().map(|g| &mut **g).collect();
        let (allowed, verdicts) = match ledger::settle(&terms, &mut states, now, may_retry) {
            Settlement::LeaseAgain => return None,
            Settlement::Settled { allowed, verdicts } => (allowed, verdicts),
        };
        // Under the same locks as the payment: a release can only name a hold once it exists.
        let hold = (allowed && plan.acquires())
            .then(|| self.record_holds(plan, &terms, &mut states, &verdicts, now))
            .flatten();
        // Each bucket that denied remembers it (a denial is rare next to a pass: the one box a
        // key's `Rare` costs is paid by denied keys only).
        for (state, v) in states.iter_mut().zip(&verdicts) {
            if let Some(reason) = v.denial {
                state.rare_mut().last_denial = Some(LastDenial {
                    at: now,
                    reason,
                    fallback: v.fallback,
                });
            }
        }
        drop(states);
        drop(guards);
        let outcome = |at: usize| {
            let (charge, v) = (&plan.charges[at], &verdicts[at]);
            let shadow = charge.info.shadow;
            let reported = v.denial.filter(|_| !shadow);
            if v.denial == Some(Denial::NoRoom) {
                return DescriptorOutcome::no_room(charge.info, shadow);
            }
            DescriptorOutcome {
                code: if reported.is_some() {
                    Code::OverLimit
                } else {
                    Code::Ok
                },
                limit: Some(charge.info),
                remaining: v.remaining.floor() as u64,
                debt: v.debt.ceil() as u64,
                until_full: Duration::from_micros(v.until_full),
                retry_after: v
                    .retry_after
                    .filter(|_| reported.is_some())
                    .map(Duration::from_micros),
                denial: v.denial,
                shadow_over_limit: shadow && v.denial.is_some(),
                fallback: v.fallback,
                unlimited: false,
            }
        };
        for (d, at) in plan.by_descriptor.iter().enumerate() {
            if let Some(at) = *at {
                outcomes[d] = outcome(at);
            }
        }
        // A descriptor with several limits answers with the most restrictive one.
        for &(d, at) in &plan.more {
            let candidate = outcome(at);
            if candidate.is_tighter_than(&outcomes[d]) {
                outcomes[d] = candidate;
            }
        }
        for (charge, v) in plan.charges.iter().zip(&verdicts) {
            // Who is being limited (`quota top`): the rule's own keys, not shadow rules' nor
            // callers' overrides.
            // At most a burst per request: a client asking for u64::MAX hits at once (a
            // cost_above_burst) must not push every other key off the list.
            if v.denial.is_some() && charge.info.rule.is_some() && !charge.info.shadow {
                let hits = charge.hits.clamp(1, charge.info.rate.burst.max(1));
                self.denied.note(charge.bucket.key(), hits);
            }
            let metrics = &self.leaser.metrics;
            metrics.usage(UsageOutcome::Reported, charge.reported);
            metrics.usage(UsageOutcome::Clamped, v.clamped);
            if let Some(window) = v.close_window {
                self.leaser
                    .close_window_later(&charge.bucket, charge.store_key(), window);
            }
            if v.refill_ahead {
                self.leaser.refill_ahead(charge, now);
            }
        }
        // Over the limit if any descriptor is (then nothing was charged).
        Some((if allowed { Code::Ok } else { Code::OverLimit }, hold))
    }

    /// Peeks at the quota of `entries` in `domain`: nothing is consumed and no key is created.
    pub async fn quota(&self, domain: &str, entries: &[Entry]) -> QuotaView {
        quota::view(
            self.rules(),
            &self.table,
            &self.leaser,
            self.now(),
            domain,
            entries,
        )
        .await
    }

    /// Refills the global bucket of `entries` (forgets it in the store) and drops this instance's
    /// state for the key. Returns the matched rule's label, or `None` if no limited rule matches.
    pub async fn reset(
        &self,
        domain: &str,
        entries: &[Entry],
    ) -> Result<Option<String>, StoreError> {
        let store = Arc::clone(self.store());
        quota::reset(&self.rules(), &self.table, &*store, domain, entries).await
    }

    /// A page of the keys this instance tracks (see [`quota::tracked_page`]): at most `size`
    /// keys matching `filter`, after the cursor `after` from the previous page. One pass over
    /// every key: call it off the async workers (`spawn_blocking`) on large tables.
    pub fn tracked_page(
        &self,
        filter: &KeyFilter,
        after: Option<&[u8]>,
        size: usize,
    ) -> TrackedPage {
        quota::tracked_page(&self.rules(), &self.table, self.now(), filter, after, size)
    }
}

mod denied;
mod holding;
mod maintenance;
mod shares;
pub use shares::Payee;

#[cfg(test)]
mod tests;
