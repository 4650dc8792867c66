//! What the engine is asked and what it answers: requests, decisions, per-descriptor outcomes,
//! and the engine's tuning.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::Descriptor;
use sluice_core::RuleSet;
use sluice_core::bucket::Rate;
use sluice_core::config::{Fallback, Mode};
use sluice_core::rules::{Payment, RuleId};

/// Engine tuning, in the engine's units.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Most keys tracked at once.
    pub max_keys: usize,
    /// Keys unused this long are evicted (once their state is at rest).
    pub idle_timeout: Duration,
    /// A lease holds about the tokens spent in this long.
    pub lease_horizon: Duration,
    /// A lease holds at most this fraction of the burst.
    pub max_lease_fraction: f64,
    /// Leased tokens unspent this long go back.
    pub lease_ttl: Duration,
    /// A cold lease's tokens unspent this long go back.
    pub cold_lease_ttl: Duration,
    /// A starved key's sidecars take turns asking a remote store, this many a second in all.
    pub starved_calls_per_sec: u32,
    /// Most holds of concurrency limits kept at once.
    pub max_holds: u64,
    /// Leases of rate: how long a reservation lasts at least (`None`: token leases only).
    pub rate_lease_ttl: Option<Duration>,
}

impl From<&sluice_core::config::EngineConfig> for EngineSettings {
    fn from(c: &sluice_core::config::EngineConfig) -> Self {
        Self {
            max_keys: c.max_keys,
            idle_timeout: c.idle_timeout.0,
            lease_horizon: c.lease_horizon.0,
            max_lease_fraction: c.max_lease_fraction,
            lease_ttl: c.lease_ttl.0,
            cold_lease_ttl: c.cold_lease_ttl.0.max(c.lease_ttl.0),
            starved_calls_per_sec: c.starved_calls_per_sec.max(1),
            max_holds: c.max_holds as u64,
            rate_lease_ttl: c.rate_lease_ttl.map(|d| d.0),
        }
    }
}

impl Default for EngineSettings {
    fn default() -> Self {
        (&sluice_core::config::EngineConfig::default()).into()
    }
}

/// One rate-limit question: Envoy's `RateLimitRequest`, or descriptors built by ext_authz.
#[derive(Debug, Clone, Copy)]
pub struct RateLimitRequest<'a> {
    /// The domain.
    pub domain: &'a str,
    /// The descriptors, each decided, all charged or none.
    pub descriptors: &'a [Descriptor],
    /// Request-wide hits; 0 means 1 (proto3 cannot tell unset from 0).
    pub hits_addend: u64,
}

/// A decision's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Within the limit.
    Ok,
    /// Over the limit.
    OverLimit,
}

/// The limit that applied to a descriptor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitInfo {
    /// Rate and burst.
    pub rate: Rate,
    /// The rule, or `None` for a caller-supplied override.
    pub rule: Option<RuleId>,
    /// Sharing mode.
    pub mode: Mode,
    /// Store-down behaviour.
    pub fallback: Fallback,
    /// Whether the rule is in shadow mode.
    pub shadow: bool,
    /// Whether the rule is a quota (`quota_mode`): its denial blocks the request only when every
    /// quota of the request denies it.
    pub quota: bool,
    /// A fixed window whose denials count (`count_denied`): a request it denies closes it.
    pub count_denied: bool,
    /// When hits are paid (post-paid: reports go into bounded debt).
    pub payment: Payment,
}

/// The longest a key refused for want of room waits before the table and the embedded store
/// look for room again (keys at rest, buckets refilled): the retry time of such a denial.
pub const NO_ROOM_RETRY: Duration = Duration::from_secs(1);

/// Why a bucket denied a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// Not enough tokens now; `retry_after` says when there will be.
    Empty,
    /// The request costs more than the bucket's burst: it can never pass (and charged nothing).
    CostAboveBurst,
    /// `engine.max_keys` is reached, every tracked key holds state that evicting would lose,
    /// and this key's rule already holds its share of the room (see `room.rs`), so this new key
    /// could not be tracked; ask again after [`NO_ROOM_RETRY`].
    NoRoom,
    /// The global store is unavailable and the rule's fallback is `deny`.
    StoreDown,
}

impl Denial {
    /// A short, stable word for logs and answers.
    pub const fn as_str(self) -> &'static str {
        match self {
            Denial::Empty => "over_limit",
            Denial::CostAboveBurst => "cost_above_burst",
            Denial::NoRoom => "no_room_for_key",
            Denial::StoreDown => "store_down",
        }
    }
}

/// A key's last denial on this instance, as `quota get` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastDenial {
    /// When, by the engine's clock (µs; the Unix epoch's with the system clock).
    pub at: u64,
    /// Why.
    pub reason: Denial,
    /// Decided by the rule's fallback while the store was unavailable.
    pub fallback: bool,
}

/// The decision for one descriptor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DescriptorOutcome {
    /// OK or over the limit (shadow-mode rules always report OK).
    pub code: Code,
    /// The limit that applied; `None` when none did.
    pub limit: Option<LimitInfo>,
    /// Whole tokens left after this decision (0 while in debt).
    pub remaining: u64,
    /// Tokens owed after this decision, rounded up: post-paid usage beyond what was left, which
    /// the bucket refills out of before anything passes (0 when not in debt).
    pub debt: u64,
    /// Time until the bucket is full again.
    pub until_full: Duration,
    /// When over the limit: time until this request could pass; `None` if it never can, or no
    /// time can be promised (see `denial`).
    pub retry_after: Option<Duration>,
    /// Why the descriptor's bucket denies (also set for shadow rules that would deny).
    pub denial: Option<Denial>,
    /// A shadow-mode rule that would have denied.
    pub shadow_over_limit: bool,
    /// Decided by the rule's fallback because the global store was unavailable.
    pub fallback: bool,
    /// The descriptor matched an `unlimited` rule (RLS answers it with the most remaining a
    /// status can carry, as envoyproxy/ratelimit does; no limit applies either way).
    pub unlimited: bool,
}

impl DescriptorOutcome {
    /// Whether this outcome of one of a descriptor's limits is more restrictive than `other`
    /// (the one the descriptor answers with): a denial before a pass (the longer wait first,
    /// "never" longest), else fewer tokens left, else the longer time until full.
    pub fn is_tighter_than(&self, other: &DescriptorOutcome) -> bool {
        let wait = |o: &DescriptorOutcome| o.retry_after.unwrap_or(Duration::MAX);
        match (self.denial.is_some(), other.denial.is_some()) {
            (true, false) => true,
            (false, true) => false,
            (true, true) => wait(self) > wait(other),
            (false, false) => {
                (self.remaining, std::cmp::Reverse(self.until_full))
                    < (other.remaining, std::cmp::Reverse(other.until_full))
            }
        }
    }

    /// The outcome of a descriptor under `limit` whose key found no room (`engine.max_keys`):
    /// nothing left for it now, and the table and store look for room again within
    /// [`NO_ROOM_RETRY`], so that is when to ask again (not a bucket's refill: the key has
    /// none).
    pub(crate) fn no_room(limit: LimitInfo, shadow: bool) -> Self {
        Self {
            code: if shadow { Code::Ok } else { Code::OverLimit },
            limit: Some(limit),
            remaining: 0,
            debt: 0,
            until_full: NO_ROOM_RETRY,
            retry_after: (!shadow).then_some(NO_ROOM_RETRY),
            denial: Some(Denial::NoRoom),
            shadow_over_limit: shadow,
            fallback: false,
            unlimited: false,
        }
    }

    /// The outcome of a descriptor no limit applies to.
    pub(crate) fn unlimited() -> Self {
        Self {
            unlimited: false,
            code: Code::Ok,
            limit: None,
            remaining: 0,
            debt: 0,
            until_full: Duration::ZERO,
            retry_after: None,
            denial: None,
            shadow_over_limit: false,
            fallback: false,
        }
    }
}

/// The decision for a whole request.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Over the limit if any descriptor is.
    pub overall: Code,
    /// One outcome per request descriptor, in order.
    pub outcomes: Vec<DescriptorOutcome>,
    /// The rules the decision was made with (to name rules in answers).
    pub rules: Arc<RuleSet>,
    /// The domain has no config (everything is OK, as in envoyproxy/ratelimit).
    pub unknown_domain: bool,
    /// The token of the hold this request took on its concurrency limits, if it was admitted
    /// and acquired one (`sluice-hold: acquire`); its release names it.
    pub hold: Option<u64>,
    /// Holds this request's releases gave back (`sluice-release: <token>`).
    pub released: u32,
}
