//! An envoyproxy/ratelimit domain file, exactly as upstream writes it: the domain, its
//! descriptor tree, and each descriptor's `rate_limit` with sluice's extensions.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::modes::{ChargeMode, Fallback, Mode};

/// One domain, exactly as an envoyproxy/ratelimit config file writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainFile {
    /// The domain name Envoy sends.
    pub domain: Spanned<String>,
    /// The descriptor tree (`descriptors:` with nothing after it is an empty tree).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub descriptors: Vec<Spanned<DescriptorConfig>>,
}

/// One level of a descriptor tree.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorConfig {
    /// The entry key to match (missing or empty: rejected, "descriptor has empty key").
    #[serde(default)]
    pub key: Option<Spanned<String>>,
    /// The value to match: exact, or a pattern with `*` wildcards; absent matches any value.
    #[serde(default)]
    pub value: Option<String>,
    /// The limit for a request whose descriptor ends here; absent exempts it.
    pub rate_limit: Option<RateLimitConfig>,
    /// sluice, instead of `rate_limit`: several limits on this descriptor (10 a second and 1000
    /// a day): a request passes only if every one of them can pay, and each is charged.
    pub rate_limits: Option<Vec<RateLimitConfig>>,
    /// Deeper levels.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub descriptors: Vec<Spanned<DescriptorConfig>>,
    /// Decide and count, but always answer OK.
    #[serde(default)]
    pub shadow_mode: bool,
    /// A quota: its denial makes the request OVER_LIMIT only if every quota-mode descriptor of
    /// the request is denied (its own status still says OVER_LIMIT).
    #[serde(default)]
    pub quota_mode: bool,
    /// On a wildcard `value`: every value the pattern matches shares one bucket (the pattern
    /// stands for the value in the bucket's key), instead of a bucket per value.
    #[serde(default)]
    pub share_threshold: bool,
    /// Free-form data returned in the RLS response's `dynamic_metadata` (with
    /// `response.rls_dynamic_metadata: true`) when a request passes this descriptor's limit.
    #[serde(default)]
    pub metadata: Option<serde_json::Value>,
    /// Also count this descriptor's decisions per value (`sluice_detailed_decisions_total`),
    /// within a label budget: the busiest values, the rest as `other`.
    #[serde(default)]
    pub detailed_metric: bool,
    /// As `detailed_metric` (upstream names statistics by value with it; sluice counts per value
    /// the same way for both).
    #[serde(default)]
    pub value_to_metric: bool,
}

/// `rate_limit:` of a descriptor, with sluice's extensions.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// `second` … `year`, any case; must be absent when `unlimited`.
    pub unit: Option<Spanned<String>>,
    /// Requests per period (Envoy's API carries it as uint32).
    #[serde(default)]
    pub requests_per_unit: u32,
    /// sluice (the name of Envoy's proposed RLS field): units in the period, so `unit: minute`
    /// with `unit_multiplier: 10` is "per 10 minutes"; at least 1 (default), and the period at
    /// most 100 years.
    pub unit_multiplier: Option<u32>,
    /// Never limit; reported as OK without a limit.
    #[serde(default)]
    pub unlimited: bool,
    /// The rule's name: shown in responses, metrics and `replaces`.
    pub name: Option<String>,
    /// Names of rules this one replaces when both match one request.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub replaces: Vec<ReplacesConfig>,
    /// sluice: how the limit counts: `token_bucket` (default), `fixed_window` (envoyproxy/
    /// ratelimit's counting) or `sliding_window`.
    pub algorithm: Option<crate::rate::Algorithm>,
    /// sluice, `fixed_window` only: whether a request the window denies counts its hits, as
    /// envoyproxy/ratelimit's counter does by default (true: the window is closed until it
    /// ends). Default false (upstream's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`): with
    /// leases, a sidecar may deny for want of its own tokens while others still hold some, and
    /// closing then loses what the window had left (measured: 96% of the ideal).
    pub count_denied: Option<bool>,
    /// sluice: bucket size; defaults to `requests_per_unit` (token buckets only: a window holds
    /// `requests_per_unit`).
    pub burst: Option<u32>,
    /// sluice: how the limit is shared across instances.
    pub mode: Option<Mode>,
    /// sluice: what to do when the global store is unavailable.
    pub fallback: Option<Fallback>,
    /// sluice: when hits are paid: `prepaid` (default: before the request passes) or `post_paid`
    /// (usage reported after the response is charged in full, into bounded debt).
    pub charge: Option<ChargeMode>,
    /// sluice, with `charge: post_paid`: the most debt a bucket may carry, in tokens (default:
    /// the burst; at most 2^53).
    pub max_debt: Option<u64>,
    /// sluice, instead of a rate: at most this many requests in flight at once per key, each
    /// holding a slot from its start (a descriptor ending in `sluice-hold: acquire`) to its end
    /// (one ending in `sluice-release: <token>`); 1 to 1 000 000.
    pub concurrency: Option<u32>,
    /// sluice, with `concurrency`: a slot never given back comes back after this long (whole
    /// seconds, 3s to 24h; default 5m). Also how long a sidecar that died holding slots keeps
    /// them from the others. With `reserve`: how long an unsettled reservation is kept.
    pub hold_timeout: Option<super::HumanDuration>,
    /// sluice, with `charge: post_paid`: reservations. A request acquiring a hold reserves an
    /// estimate (denied if the bucket cannot pay it); its usage, reported when it ends, is
    /// settled against it (refund, or the excess charged into debt).
    pub reserve: Option<ReserveConfig>,
}

/// `reserve:` of a post-paid rate limit.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReserveConfig {
    /// The estimate of a request that names none (at least 1, at most `max`).
    pub default: u64,
    /// The most one request reserves (default and at most the burst).
    pub max: Option<u64>,
}

/// An entry of `replaces:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplacesConfig {
    /// The replaced rule's name (`name:` with nothing after it is empty, and rejected).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub name: String,
}

/// A YAML `null` (a key with nothing after it) as the empty value, as envoyproxy/ratelimit's
/// YAML reader takes it.
fn null_as_empty<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}
