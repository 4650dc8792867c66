//! What a compiled rule is: a [`Rule`], its [`Limit`] and when it is paid ([`Payment`]).

use std::path::PathBuf;
use std::sync::Arc;

use crate::rate::{Algorithm, Rate};
use crate::schema::{Fallback, Mode};

/// Index of a rule in its [`RuleSet`](crate::rules::RuleSet).
pub type RuleId = u32;

/// What a matched rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// `unlimited: true`: always OK, reported without a limit.
    Unlimited,
    /// A token bucket.
    Limited {
        /// The bucket's rate and burst.
        rate: Rate,
        /// How the bucket is shared across instances.
        mode: Mode,
        /// What happens while the global store is unavailable.
        fallback: Fallback,
        /// When hits are paid.
        payment: Payment,
    },
}

impl Limit {
    /// Whether a caller's `limit` override (Envoy's per-descriptor `RateLimitOverride`, which
    /// Envoy sends whenever a `rate_limits` entry reads `limit` from dynamic metadata) may
    /// change this limit: the one place that decides it, for acquires, releases and checks alike.
    ///
    /// An override is a rate, so it changes a prepaid rate (and makes an `unlimited` rule a
    /// limit, as envoyproxy/ratelimit does). It never changes:
    /// - a concurrency limit: it has no rate, and "1000 per second" says nothing about how many
    ///   may run at once. Read as a number of slots, one request's own N could not be held on
    ///   slots every sidecar shares without asking the store on every acquire; read as a rate,
    ///   it took no slot at all (9 in flight on a 3-slot key). The rule's N stands.
    /// - a post-paid budget: its usage, debt and reservations must land in the rule's own bucket
    ///   whichever of a request's descriptors (request-time, stream-done) carries an override;
    ///   made a prepaid rate, a release's usage was charged nowhere and its reservation was not
    ///   found.
    pub const fn takes_override(&self) -> bool {
        match self {
            Limit::Unlimited => true,
            Limit::Limited { rate, payment, .. } => {
                !matches!(rate.algorithm, Algorithm::Concurrency)
                    && matches!(payment, Payment::Prepaid)
            }
        }
    }
}

/// When a limited rule's hits are paid. Not part of the rule's identity: a bucket's state means
/// the same either way (a prepaid bucket is one that never goes below zero), so switching a
/// rule keeps its buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Payment {
    /// Before the request passes (today's semantics).
    #[default]
    Prepaid,
    /// After the fact, in full, into debt of at most `max_debt` tokens.
    PostPaid {
        /// The most debt a bucket may carry.
        max_debt: u64,
        /// Reservations (`reserve:`): an estimate paid when a request starts, settled against
        /// the usage reported when it ends.
        reserve: Option<Reserve>,
    },
}

/// `reserve:` of a post-paid rule: what a request acquiring a hold (`sluice-hold: acquire`)
/// reserves, and how long an unsettled reservation is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reserve {
    /// The estimate of a request that names none (`sluice-estimate`, or its count).
    pub default: u64,
    /// The most one request reserves: a larger estimate is cut to it (at most the burst).
    pub max: u64,
    /// A reservation never settled is dropped after this (µs), and stays charged.
    pub hold_micros: u64,
}

impl Payment {
    /// The word the config uses: `prepaid` or `post_paid`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Payment::Prepaid => "prepaid",
            Payment::PostPaid { .. } => "post_paid",
        }
    }

    /// A post-paid rule's reservations, if it has them.
    pub const fn reserve(self) -> Option<Reserve> {
        match self {
            Payment::PostPaid { reserve, .. } => reserve,
            Payment::Prepaid => None,
        }
    }

    /// The debt bound of a post-paid rule; `None` for a prepaid one.
    pub const fn max_debt(self) -> Option<u64> {
        match self {
            Payment::PostPaid { max_debt, .. } => Some(max_debt),
            Payment::Prepaid => None,
        }
    }
}

/// The largest `max_debt`: tokens are f64 everywhere (Rust and Lua), exact up to 2^53.
pub const MAX_DEBT: u64 = 1 << 53;

/// One `rate_limit` of a domain's descriptor tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its index in the rule set.
    pub id: RuleId,
    /// The domain it belongs to.
    pub domain: String,
    /// The descriptor path, e.g. `remote_address` or `api_key=* > path=/upload`.
    pub path: String,
    /// `rate_limit.name` when given: reported in `current_limit.name` and used by `replaces`.
    pub explicit_name: Option<String>,
    /// The limit.
    pub limit: Limit,
    /// Decide and count, but answer OK.
    pub shadow_mode: bool,
    /// A quota: its denial makes the request OVER_LIMIT only if every quota of the request
    /// denies it (`quota_mode` on the descriptor, or at the top level).
    pub quota_mode: bool,
    /// `metadata` of its descriptor: returned in the RLS response's `dynamic_metadata` when the
    /// request passes this rule (a JSON object).
    pub metadata: Option<Arc<serde_json::Map<String, serde_json::Value>>>,
    /// Names of rules this one replaces when both match one request.
    pub replaces: Vec<String>,
    /// A `fixed_window` rule whose denials count their hits (`count_denied`, default off): a
    /// request the window denies closes it until it ends, as envoyproxy/ratelimit's counter
    /// passing the limit does.
    pub count_denied: bool,
    /// The ids of every limit of its descriptor (`rate_limits`), itself included, in file order:
    /// a request passes only if all of them can pay. One id for a single `rate_limit`.
    pub limits: std::ops::Range<RuleId>,
    /// `detailed_metric` (or `value_to_metric`) on its descriptor: decisions are also counted
    /// per descriptor value, within a label budget.
    pub detailed_metric: bool,
    /// A stable identity of (domain, path, limit): buckets of an unchanged rule survive reloads.
    pub fingerprint: u64,
    /// The name for metrics, logs and headers: the explicit name, else `domain:path`.
    pub label: String,
    /// Where the rule is written.
    pub file: PathBuf,
    /// The line of its descriptor's `key`.
    pub line: u64,
}
