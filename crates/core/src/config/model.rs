//! The serde model of sluice's config file and of envoyproxy/ratelimit domain files.
//!
//! Every struct denies unknown fields, so a misspelled field is an error with its line, as it is
//! in envoyproxy/ratelimit.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::HumanDuration;

/// sluice's own config file (the file given to `sluice serve --config`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Domains written inline, in envoyproxy/ratelimit's format.
    #[serde(default)]
    pub domains: Vec<DomainFile>,
    /// Paths or globs (relative to this file) of envoyproxy/ratelimit domain files.
    #[serde(default)]
    pub include: Vec<Spanned<String>>,
    /// How ext_authz requests become descriptors; without it, `Check` allows every request.
    pub authz: Option<AuthzConfig>,
    /// Named value maps for `authz` entries (e.g. API key → tier).
    #[serde(default)]
    pub maps: BTreeMap<String, Spanned<MapConfig>>,
    /// Engine tuning: key bounds and lease sizing (every field checks itself where written).
    #[serde(default)]
    pub engine: EngineSettings,
    /// What responses carry besides the decision.
    #[serde(default)]
    pub response: ResponseSettings,
    /// The global store; without it sluice runs on its embedded in-memory store.
    pub redis: Option<Spanned<RedisSettings>>,
    /// Dry run for every rule: decide and count, but always answer OK.
    #[serde(default)]
    pub shadow_mode: bool,
    /// Every rule is a quota (`quota_mode` on every descriptor): a request is OVER_LIMIT only
    /// if all its limits deny it (envoyproxy/ratelimit's `QUOTA_MODE`).
    #[serde(default)]
    pub quota_mode: bool,
    /// Which of Envoy's per-descriptor `limit` overrides apply.
    #[serde(default)]
    pub limit_overrides: LimitOverrides,
    /// Operator API settings.
    pub admin: Option<Spanned<AdminConfig>>,
    /// TLS on the gRPC port (mutual TLS with `client_ca_file`).
    pub tls: Option<Spanned<TlsConfig>>,
}

/// `tls:`: certificates for the gRPC port (paths relative to the config file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The server certificate chain (PEM).
    pub cert_file: String,
    /// The server's private key (PEM).
    pub key_file: String,
    /// CA certificates (PEM) that client certificates must chain to; set for mutual TLS.
    pub client_ca_file: Option<String>,
}

/// `admin:`: what the operator API may do.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Allow `ResetQuota` (with the bearer token).
    #[serde(default)]
    pub allow_reset: bool,
    /// An environment variable holding the reset token.
    pub reset_token_env: Option<String>,
    /// A file holding the reset token (e.g. a mounted Kubernetes Secret).
    pub reset_token_file: Option<String>,
    /// An environment variable holding the read token: when set (or `read_token_file`), the
    /// Quota read API (`GetQuota`, `ListQuotas`, `WatchQuota`, `ListRules`) and admin `/config`
    /// and `/quota` need `authorization: Bearer <read token>` (the reset token works too).
    pub read_token_env: Option<String>,
    /// A file holding the read token.
    pub read_token_file: Option<String>,
}

/// `redis:`: where global buckets live.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSettings {
    /// A standalone Redis: `redis://[user:password@]host:port[/db]` or `rediss://…` for TLS.
    pub url: Option<String>,
    /// A Redis Cluster: seed nodes, each `redis://host:port` (or `rediss://`).
    #[serde(default)]
    pub cluster_nodes: Vec<String>,
    /// An environment variable holding the password (instead of putting it in the URL).
    pub password_env: Option<String>,
    /// A CA bundle (PEM, relative to the config file) to verify `rediss://` servers with, instead
    /// of the public web roots.
    pub tls_ca_file: Option<String>,
    /// The contents of `tls_ca_file`, read when the config is loaded.
    #[serde(skip)]
    pub tls_ca_pem: Option<Vec<u8>>,
    /// Longest wait for one script call; a decision never waits longer for Redis.
    #[serde(default = "default_redis_timeout")]
    pub timeout: HumanDuration,
    /// Longest wait to open a connection.
    #[serde(default = "default_redis_connect_timeout")]
    pub connect_timeout: HumanDuration,
    /// Consecutive failures that open the circuit breaker (calls then fail at once); at least 1.
    #[serde(
        default = "default_breaker_failures",
        deserialize_with = "breaker_failures"
    )]
    pub breaker_failures: u32,
    /// How often an open breaker probes Redis (PING) to close again.
    #[serde(default = "default_probe_interval")]
    pub probe_interval: HumanDuration,
    /// How often this instance announces itself (for `fallback: local_share`).
    #[serde(default = "default_heartbeat_interval")]
    pub heartbeat_interval: HumanDuration,
    /// While a batch of lease and release calls is on its way to Redis, how long later calls may
    /// wait for it before they go (together: one pipeline per node). Shorter than `timeout`.
    #[serde(default = "default_batch_linger")]
    pub batch_linger: HumanDuration,
    /// How long every batch gathers calls before it goes, even with none on its way (unset:
    /// none): fewer round trips to Redis for up to that much more latency on each decision
    /// that needs Redis. Shorter than `timeout`.
    pub batch_min_wait: Option<HumanDuration>,
    /// Most calls in one batch (1 to 1024).
    #[serde(default = "default_batch_max", deserialize_with = "batch_max")]
    pub batch_max: u32,
}

fn default_batch_linger() -> HumanDuration {
    HumanDuration(Duration::from_millis(1))
}

fn default_batch_max() -> u32 {
    64
}

fn default_redis_timeout() -> HumanDuration {
    HumanDuration(Duration::from_millis(20))
}

fn default_redis_connect_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(1))
}

fn default_breaker_failures() -> u32 {
    3
}

fn default_probe_interval() -> HumanDuration {
    HumanDuration(Duration::from_millis(250))
}

fn default_heartbeat_interval() -> HumanDuration {
    HumanDuration(Duration::from_secs(1))
}

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
    /// Accepted for compatibility; sluice never labels metrics with raw values.
    #[serde(default)]
    pub detailed_metric: bool,
    /// Accepted for compatibility; sluice never labels metrics with raw values.
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
    pub algorithm: Option<crate::bucket::Algorithm>,
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

/// Which caller-supplied limits (Envoy's per-descriptor `limit`) sluice honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitOverrides {
    /// On descriptors that match a configured rule (the override replaces its limit). Default:
    /// a caller cannot create limits, and so keys, for descriptors the config does not know.
    #[default]
    RulesOnly,
    /// On any descriptor (envoyproxy/ratelimit's behaviour).
    Any,
    /// Never.
    Ignore,
}

/// How a limit is shared across sluice instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// One global limit; instances lease tokens in batches and decide locally (default).
    #[default]
    Strict,
    /// One global limit; every decision asks the global store.
    Exact,
    /// A limit per instance; never touches the global store.
    Local,
}

impl Mode {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Strict => "strict",
            Mode::Exact => "exact",
            Mode::Local => "local",
        }
    }
}

/// When a rule's hits are paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChargeMode {
    /// A request pays before it passes, and is denied if it cannot (default).
    #[default]
    Prepaid,
    /// Usage reported after the fact is charged in full, into debt up to `max_debt`; checks are
    /// denied while the bucket is empty or in debt.
    PostPaid,
}

/// What a rule does while the global store cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// Enforce this instance's share of the limit locally (default).
    #[default]
    LocalShare,
    /// Allow every request.
    Allow,
    /// Deny every request.
    Deny,
}

impl Fallback {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Fallback::LocalShare => "local_share",
            Fallback::Allow => "allow",
            Fallback::Deny => "deny",
        }
    }
}

/// `authz:`: how ext_authz `Check` requests become descriptors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthzConfig {
    /// The domain the built descriptors are checked in.
    pub domain: Spanned<String>,
    /// How many proxies in front of Envoy append to X-Forwarded-For (0: use the peer address).
    #[serde(default)]
    pub trusted_hops: u32,
    /// Descriptors to build, each a list of entries.
    pub descriptors: Vec<Vec<AuthzEntryConfig>>,
}

/// One entry of an authz descriptor: a key and where its value comes from.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthzEntryConfig {
    /// The descriptor key.
    pub key: Spanned<String>,
    /// Where the value comes from.
    pub from: Source,
    /// Translate the value through this named map.
    pub map: Option<Spanned<String>>,
    /// Keep the value only as a digest (`sha256:<32 hex digits>`) in bucket keys, the Quota API
    /// and Redis, so that secrets never show there. Default: on for an `api_key` without a
    /// `map` (the key itself would be the value), off otherwise.
    pub hash: Option<bool>,
}

/// Where an authz entry's value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Source {
    /// The client address: X-Forwarded-For (honouring `trusted_hops`), else the peer address.
    ClientIp,
    /// The request path, without the query string.
    Path,
    /// The HTTP method.
    Method,
    /// The Host / :authority.
    Host,
    /// A request header (case-insensitive name).
    Header(String),
    /// A context extension set on the route by Envoy's ext_authz per-route config.
    ContextExtension(String),
    /// An API key: `x-api-key` header, `Authorization: Bearer`, or the `api_key` query parameter.
    ApiKey(ApiKeySource),
    /// A literal value.
    Value(String),
}

/// Where to look for an API key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeySource {
    /// The header carrying the key.
    #[serde(default = "default_api_key_header")]
    pub header: String,
    /// The query parameter carrying the key.
    #[serde(default = "default_api_key_query")]
    pub query_param: String,
}

fn default_api_key_header() -> String {
    "x-api-key".to_string()
}

fn default_api_key_query() -> String {
    "api_key".to_string()
}

/// A named map: inline `entries` or a YAML `file` of `key: value` lines.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapConfig {
    /// A YAML file (relative to the config file) holding one mapping of strings.
    pub file: Option<String>,
    /// Inline entries.
    pub entries: Option<BTreeMap<String, String>>,
    /// The value for keys the map lacks; without it such a descriptor is skipped.
    pub default: Option<String>,
}

/// `engine:` tuning.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSettings {
    /// Most keys tracked at once (at least 1); keys at rest are evicted when it is reached.
    #[serde(deserialize_with = "max_keys")]
    pub max_keys: usize,
    /// Keys unused for this long are evicted.
    pub idle_timeout: HumanDuration,
    /// A lease holds about the tokens this instance spends in this long.
    pub lease_horizon: HumanDuration,
    /// A lease holds at most this fraction of the burst, in (0, 1].
    #[serde(deserialize_with = "max_lease_fraction")]
    pub max_lease_fraction: f64,
    /// Leased tokens unspent this long go back to the global bucket.
    pub lease_ttl: HumanDuration,
    /// A cold lease (a key far from its limit) is kept this long instead: later requests for the
    /// key on this instance spend it without a store call. At least `lease_ttl`.
    pub cold_lease_ttl: HumanDuration,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            max_keys: 1_000_000,
            idle_timeout: HumanDuration(Duration::from_secs(600)),
            lease_horizon: HumanDuration(Duration::from_millis(200)),
            max_lease_fraction: 0.05,
            lease_ttl: HumanDuration(Duration::from_secs(1)),
            cold_lease_ttl: HumanDuration(Duration::from_secs(30)),
        }
    }
}

/// `response:` what answers carry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResponseSettings {
    /// Add `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10) to ext_authz answers.
    pub ratelimit_headers: bool,
    /// Also add the legacy `X-RateLimit-Limit/Remaining/Reset` headers.
    pub legacy_x_ratelimit_headers: bool,
    /// Fill the RLS response's `dynamic_metadata` as envoyproxy/ratelimit's
    /// `RESPONSE_DYNAMIC_METADATA` does: the domain, the descriptors, and the merged `metadata`
    /// of every descriptor that passed.
    pub rls_dynamic_metadata: bool,
}

impl Default for ResponseSettings {
    fn default() -> Self {
        Self {
            ratelimit_headers: true,
            legacy_x_ratelimit_headers: false,
            rls_dynamic_metadata: false,
        }
    }
}

/// `engine.max_keys`: at least 1.
fn max_keys<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    match usize::deserialize(d)? {
        0 => Err(serde::de::Error::custom("max_keys must be at least 1")),
        n => Ok(n),
    }
}

/// `redis.breaker_failures`: at least 1.
fn breaker_failures<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match u32::deserialize(d)? {
        0 => Err(serde::de::Error::custom(
            "breaker_failures must be at least 1",
        )),
        n => Ok(n),
    }
}

/// `redis.batch_max`: 1 to 1024.
fn batch_max<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match u32::deserialize(d)? {
        n @ 1..=1024 => Ok(n),
        _ => Err(serde::de::Error::custom("batch_max must be from 1 to 1024")),
    }
}

/// `engine.max_lease_fraction`: in (0, 1].
fn max_lease_fraction<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let f = f64::deserialize(d)?;
    if f > 0.0 && f <= 1.0 {
        Ok(f)
    } else {
        Err(serde::de::Error::custom(format!(
            "max_lease_fraction must be in (0, 1], not {f}"
        )))
    }
}
