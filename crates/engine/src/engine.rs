//! The decision procedure.
//!
//! For a request: match every descriptor to a rule, drop rules that others `replace`, find each
//! key's [`LeaseBucket`], make sure leases can cover the hits (asking the global store only when a
//! lease runs dry), then charge all buckets or none under their locks, taken in a fixed order.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use dashmap::DashMap;
use sluice_core::bucket::Rate;
use sluice_core::config::{Fallback, Mode};
use sluice_core::rules::{Limit, Match};
use sluice_core::{Clock, Descriptor, RuleSet};
use smallvec::SmallVec;

use crate::bucket::LeaseBucket;
pub use crate::decision::{
    Code, Decision, DescriptorOutcome, EngineSettings, LimitInfo, RateLimitRequest,
};
use crate::key::{self, BucketKey};
use crate::lease::Leaser;
use crate::metrics::EngineMetrics;
use crate::store::GlobalStore;

/// Plans of one request; inline for the common few descriptors, so a decision allocates little.
pub(crate) type Plans = SmallVec<[Plan; 4]>;

/// A descriptor's plan during a decision.
pub(crate) struct Plan {
    pub(crate) index: usize,
    pub(crate) info: LimitInfo,
    pub(crate) hits: u64,
    pub(crate) bucket: Arc<LeaseBucket>,
    /// Set when the store failed for this bucket during this decision.
    pub(crate) store_down: bool,
}

/// The decision engine.
pub struct Engine {
    clock: Arc<dyn Clock>,
    rules: ArcSwap<RuleSet>,
    /// Talks to the global store (shared with background refills).
    pub(crate) leaser: Arc<Leaser>,
    /// Bucket keys → local state. `Arc` values let a decision drop the map's shard lock before
    /// taking the bucket's own lock, so no map lock is ever held while another is taken.
    pub(crate) buckets: DashMap<BucketKey, Arc<LeaseBucket>, foldhash::fast::RandomState>,
    pub(crate) settings: EngineSettings,
    pub(crate) metrics: EngineMetrics,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.leaser.store.name())
            .field("keys", &self.buckets.len())
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
            clock,
            rules: ArcSwap::from_pointee(rules),
            leaser: Arc::new(Leaser::new(store, metrics.clone(), settings.clone())),
            buckets: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            settings,
            metrics,
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
        self.buckets.len()
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
            };
        }
        let mut plans = self.plan(&rules, req, now);
        let mut may_retry = true;
        let overall = loop {
            self.leaser.ensure(&mut plans, req.descriptors, now).await;
            match self.charge(&plans, req.descriptors, &mut outcomes, now, may_retry) {
                Some(code) => break code,
                // A concurrent request spent the leased tokens this one saw: lease again, once.
                None => may_retry = false,
            }
        };
        Decision {
            overall,
            outcomes,
            rules,
            unknown_domain: false,
        }
    }

    /// Matches descriptors to limits and finds their buckets.
    fn plan(&self, rules: &RuleSet, req: &RateLimitRequest<'_>, now: u64) -> Plans {
        let default_hits = if req.hits_addend == 0 {
            1
        } else {
            req.hits_addend
        };
        let mut plans = Plans::new();
        let mut replaced: Option<HashSet<&str>> = None;
        for (index, d) in req.descriptors.iter().enumerate() {
            let hits = d.hits_addend.unwrap_or(default_hits);
            let (info, identity) = if let Some(o) = d.limit_override {
                let rate = Rate::per_unit(o.requests_per_unit, o.unit);
                let info = LimitInfo {
                    rate,
                    rule: None,
                    mode: Mode::Strict,
                    fallback: Fallback::LocalShare,
                    shadow: false,
                };
                (info, override_identity(req.domain, &rate))
            } else {
                let Match::Rule(rule) = rules.match_descriptor(req.domain, &d.entries) else {
                    continue;
                };
                let Limit::Limited {
                    rate,
                    mode,
                    fallback,
                } = rule.limit
                else {
                    continue;
                };
                if !rule.replaces.is_empty() {
                    replaced
                        .get_or_insert_with(HashSet::new)
                        .extend(rule.replaces.iter().map(String::as_str));
                }
                let info = LimitInfo {
                    rate,
                    rule: Some(rule.id),
                    mode,
                    fallback,
                    shadow: rule.shadow_mode,
                };
                (info, rule.fingerprint)
            };
            let bucket = self.bucket(identity, d, &info, now);
            bucket.touch(now);
            plans.push(Plan {
                index,
                info,
                hits,
                bucket,
                store_down: false,
            });
        }
        if let Some(replaced) = replaced {
            plans.retain(|p| {
                let name = p
                    .info
                    .rule
                    .and_then(|id| rules.rule(id))
                    .and_then(|r| r.explicit_name.as_deref());
                !name.is_some_and(|n| replaced.contains(n))
            });
        }
        plans
    }

    /// The bucket for a descriptor, created on first use.
    fn bucket(
        &self,
        identity: u64,
        d: &Descriptor,
        info: &LimitInfo,
        now: u64,
    ) -> Arc<LeaseBucket> {
        let found = key::with_encoded(identity, &d.entries, |k| {
            self.buckets.get(k).map(|b| Arc::clone(b.value()))
        });
        if let Some(b) = found {
            return b;
        }
        self.make_room(now);
        let owned = key::with_encoded(identity, &d.entries, key::owned);
        let bucket = self
            .buckets
            .entry(owned)
            .or_insert_with(|| {
                Arc::new(LeaseBucket::new(
                    info.rate,
                    info.mode,
                    info.fallback,
                    identity,
                    now,
                ))
            })
            .value()
            .clone();
        self.metrics.tracked_keys.set(self.buckets.len() as i64);
        bucket
    }

    /// Charges every bucket or none, and fills the outcomes. With `may_retry`, returns `None`
    /// (charging nothing) when a lease came up short although its key is not starved: the
    /// tokens `ensure` saw went to a concurrent request in between, so the caller leases again.
    fn charge(
        &self,
        plans: &[Plan],
        descriptors: &[Descriptor],
        outcomes: &mut [DescriptorOutcome],
        now: u64,
        may_retry: bool,
    ) -> Option<Code> {
        // Distinct buckets in address order: a fixed lock order, so two requests never deadlock.
        let mut order: SmallVec<[usize; 4]> = (0..plans.len()).collect();
        order.sort_by_key(|&i| Arc::as_ptr(&plans[i].bucket) as usize);
        order.dedup_by_key(|i| Arc::as_ptr(&plans[*i].bucket) as usize);
        let mut guards: SmallVec<[_; 4]> =
            order.iter().map(|&i| (i, plans[i].bucket.lock())).collect();
        let instances = if plans.iter().any(|p| p.store_down) {
            self.leaser.store.live_instances().max(1)
        } else {
            1
        };

        // Pass 1: can every enforcing bucket pay?
        let mut allowed = true;
        for (i, state) in &guards {
            let needed = sum_hits(plans, *i);
            let (mode, rate) = effective(&plans[*i], instances);
            let pays = match (plans[*i].store_down, plans[*i].info.fallback) {
                (true, Fallback::Allow) => true,
                (true, Fallback::Deny) => needed == 0,
                _ => state.spendable(mode, &rate, now) >= needed,
            };
            if !pays && !plans[*i].info.shadow {
                allowed = false;
                let leased = matches!(mode, Mode::Strict | Mode::Exact);
                if may_retry && leased && !plans[*i].store_down && now >= state.retry_at {
                    return None;
                }
            }
        }
        // Pass 2: charge (all or nothing) and report.
        let mut prefetch: SmallVec<[(Arc<LeaseBucket>, usize); 2]> = SmallVec::new();
        for (i, state) in &mut guards {
            let plan = &plans[*i];
            let needed = sum_hits(plans, *i);
            let (mode, rate) = effective(plan, instances);
            let forced = match (plan.store_down, plan.info.fallback) {
                (true, Fallback::Allow) => Some(true),
                (true, Fallback::Deny) => Some(needed == 0),
                _ => None,
            };
            let pays = forced.unwrap_or_else(|| state.spendable(mode, &rate, now) >= needed);
            if allowed && pays && forced.is_none() && needed > 0 {
                state.spend(mode, &rate, now, needed);
                if mode == Mode::Strict && state.lease_is_low() && now >= state.retry_at {
                    prefetch.push((Arc::clone(&plan.bucket), plan.index));
                }
            }
            let remaining = state.remaining(mode, &rate, now).max(0.0);
            // Each descriptor reports its own bucket: one that could pay says OK even when another
            // descriptor denied the request (and so nothing was charged). A peek (0 hits) reports
            // whether one more request would pass.
            let denied = if needed > 0 { !pays } else { remaining < 1.0 };
            let report_denied = denied && !plan.info.shadow;
            for p in plans
                .iter()
                .filter(|p| Arc::ptr_eq(&p.bucket, &plan.bucket))
            {
                let hits = p.hits.max(1) as f64;
                outcomes[p.index] = DescriptorOutcome {
                    code: if report_denied {
                        Code::OverLimit
                    } else {
                        Code::Ok
                    },
                    limit: Some(p.info),
                    remaining: remaining.floor() as u64,
                    until_full: Duration::from_micros(rate.micros_until_full(remaining)),
                    retry_after: if report_denied {
                        rate.micros_until(remaining, hits)
                            .map(Duration::from_micros)
                    } else {
                        None
                    },
                    shadow_over_limit: denied && p.info.shadow,
                    fallback: plan.store_down,
                };
            }
        }
        drop(guards);
        for (bucket, index) in prefetch {
            self.leaser
                .prefetch(bucket, &descriptors[index].entries, now);
        }
        // Over the limit if any descriptor is: a denied request, or a peek at an empty bucket.
        Some(if allowed && outcomes.iter().all(|o| o.code == Code::Ok) {
            Code::Ok
        } else {
            Code::OverLimit
        })
    }
}

/// Total hits of every plan on the same bucket as `plans[i]`.
fn sum_hits(plans: &[Plan], i: usize) -> u64 {
    plans
        .iter()
        .filter(|p| Arc::ptr_eq(&p.bucket, &plans[i].bucket))
        .map(|p| p.hits)
        .sum()
}

/// The mode and rate a plan is decided with: its own, or `local_share` while the store is down.
fn effective(plan: &Plan, instances: u64) -> (Mode, Rate) {
    let rate = plan.info.rate;
    if plan.store_down && plan.info.fallback == Fallback::LocalShare {
        let share = Rate {
            requests_per_unit: (rate.requests_per_unit / instances).max(1),
            unit: rate.unit,
            burst: (rate.burst / instances).max(1),
        };
        (Mode::Local, share)
    } else {
        (plan.info.mode, rate)
    }
}

/// A stable identity for a caller-supplied limit override in `domain`.
fn override_identity(domain: &str, rate: &Rate) -> u64 {
    let text = format!(
        "override\u{0}{domain}\u{0}{}\u{0}{}",
        rate.requests_per_unit, rate.unit
    );
    sluice_core::hash::fnv1a_of(text.as_bytes())
}

#[cfg(test)]
mod tests;
