//! `redis:`, `engine:` and `response:`: settings with defaults, each field checked where it is
//! written (the checks across fields are the loader's).

use std::time::Duration;

use serde::Deserialize;

use super::duration::HumanDuration;

/// `redis:`: where global buckets live.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSettings {
    /// A standalone Redis: `redis://[user:password@]host:port[/db]` or `rediss://…` for TLS.
    pub url: Option<String>,
    /// A Redis Cluster: seed nodes, each `redis://host:port` (or `rediss://`).
    #[serde(default)]
    pub cluster_nodes: Vec<String>,
    /// A Redis behind Redis Sentinel: the master the sentinels name, asked again after a
    /// failover.
    pub sentinel: Option<SentinelSettings>,
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
    /// Whether a reset is pushed to every sluice sharing this Redis (pub/sub channel
    /// `sluice:{bus}:resets`), so each drops its lease of the key at once rather than within
    /// `lease_ttl`. Off: Redis users without pub/sub rights (ACL `&sluice:*`, `+publish`,
    /// `+subscribe`) keep the `lease_ttl` bound.
    #[serde(default = "default_push_resets")]
    pub push_resets: bool,
    /// Put before every key sluice writes to Redis (buckets, RLQS demands, the live-instance
    /// set, `quota top`'s counts) and before the reset channel's name, so fleets with different
    /// prefixes share one Redis (and can each have an ACL of their own, `~prefix*`) without
    /// counting each other's buckets or instances. envoyproxy/ratelimit's `CACHE_KEY_PREFIX`.
    /// At most 64 bytes of visible ASCII, without `{` or `}` (a Redis Cluster hash tag must stay
    /// the bucket's own). Unset: the keys as without it.
    #[serde(default)]
    pub key_prefix: Option<String>,
}

/// `redis.sentinel`: where the sentinels are and which master of theirs holds the buckets.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelSettings {
    /// The name the sentinels monitor the master under (`mymaster`), or a URL whose host is
    /// that name and which carries what connecting to the master needs besides its address:
    /// `rediss://user:password@mymaster/2` (TLS, an ACL user and password, a database). No
    /// port: the sentinels give it.
    pub master: String,
    /// The sentinels, each `redis://host:port` (`rediss://` for TLS, with credentials if they
    /// require them). Bare-name masters are reached over TLS when the sentinels are.
    pub nodes: Vec<String>,
}

fn default_push_resets() -> bool {
    true
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

/// `engine:` tuning.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
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
    /// Lease calls a second that a starved key (more demand than its limit) costs a remote
    /// store, however many sidecars share it: its starved sidecars take turns, one per
    /// `1/starved_calls_per_sec`. In [1, 1000000].
    #[serde(deserialize_with = "starved_calls_per_sec")]
    pub starved_calls_per_sec: u32,
    /// Holds of concurrency limits kept at once across keys (at least 1): a request that would
    /// take one more is refused as `no_room_for_key`, so holds never released cannot grow
    /// memory without bound (each lapses at its rule's `hold_timeout`).
    #[serde(deserialize_with = "max_holds")]
    pub max_holds: usize,
    /// Leases of rate (docs/global-quotas.md, "Leases of rate"): each sidecar also reserves a
    /// share of a strict token bucket's rate on the remote store, by the demand it measured,
    /// for at least this long (renewed before it ends). In [1s, 1h], default 10s; `off` leases
    /// tokens only (`None`).
    #[serde(deserialize_with = "rate_lease_ttl")]
    pub rate_lease_ttl: Option<HumanDuration>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_keys: 1_000_000,
            idle_timeout: HumanDuration(Duration::from_secs(600)),
            lease_horizon: HumanDuration(Duration::from_millis(200)),
            max_lease_fraction: 0.05,
            lease_ttl: HumanDuration(Duration::from_secs(1)),
            cold_lease_ttl: HumanDuration(Duration::from_secs(30)),
            starved_calls_per_sec: 10,
            max_holds: 1_000_000,
            rate_lease_ttl: Some(HumanDuration(DEFAULT_RATE_LEASE_TTL)),
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
    /// Three headers on every RLS answer with a limit (`response_headers_to_add`, which Envoy's
    /// rate-limit filter puts on the response), as envoyproxy/ratelimit's
    /// `LIMIT_RESPONSE_HEADERS_ENABLED` does: the tightest limit's requests per window, what
    /// remains of it, and seconds until it is whole again. Unset: none (Envoy's own
    /// `enable_x_ratelimit_headers` can write them instead).
    #[serde(deserialize_with = "rls_headers")]
    pub rls_headers: Option<RlsHeaders>,
}

impl Default for ResponseSettings {
    fn default() -> Self {
        Self {
            ratelimit_headers: true,
            legacy_x_ratelimit_headers: false,
            rls_dynamic_metadata: false,
            rls_headers: None,
        }
    }
}

/// `response.rls_headers`: the three headers' names (`LIMIT_LIMIT_HEADER`,
/// `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`), upstream's by default.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RlsHeaders {
    /// The limit's requests per window.
    pub limit: String,
    /// What remains of it.
    pub remaining: String,
    /// Seconds until it is whole again.
    pub reset: String,
}

impl Default for RlsHeaders {
    fn default() -> Self {
        Self {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

/// Why `name` cannot be one of `response.rls_headers`, if it cannot: not an HTTP token of 1 to
/// 128 bytes, or a header that frames the message or belongs to one hop (Envoy would refuse
/// it or the response would break).
pub fn check_header_name(name: &str) -> Result<(), String> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || name.len() > 128 || !name.bytes().all(token) {
        let shown = if name.len() > 128 {
            format!("a name of {} bytes", name.len())
        } else {
            format!("{name:?}")
        };
        return Err(format!(
            "{shown} is not a header name (1 to 128 letters, digits and !#$%&'*+-.^_`|~)"
        ));
    }
    const NOT_OURS: &[&str] = &[
        "connection",
        "content-length",
        "host",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ];
    if NOT_OURS.iter().any(|n| n.eq_ignore_ascii_case(name)) {
        return Err(format!(
            "{name:?} frames the response or belongs to one hop: name another header"
        ));
    }
    Ok(())
}

/// `response.rls_headers`: names Envoy takes (an HTTP token, not a `:` pseudo-header), three
/// different ones.
fn rls_headers<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<RlsHeaders>, D::Error> {
    let Some(names) = Option::<RlsHeaders>::deserialize(d)? else {
        return Ok(None);
    };
    for name in [&names.limit, &names.remaining, &names.reset] {
        check_header_name(name)
            .map_err(|why| serde::de::Error::custom(format!("rls_headers: {why}")))?;
    }
    let lower = |n: &String| n.to_ascii_lowercase();
    if lower(&names.limit) == lower(&names.remaining)
        || lower(&names.limit) == lower(&names.reset)
        || lower(&names.remaining) == lower(&names.reset)
    {
        return Err(serde::de::Error::custom(
            "rls_headers: the three names must differ",
        ));
    }
    Ok(Some(names))
}

/// `engine.max_holds`: at least 1.
fn max_holds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    match usize::deserialize(d)? {
        0 => Err(serde::de::Error::custom("max_holds must be at least 1")),
        n => Ok(n),
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

/// `engine.starved_calls_per_sec`: in [1, 1000000].
fn starved_calls_per_sec<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = u64::deserialize(d)?;
    match u32::try_from(n) {
        Ok(n @ 1..=1_000_000) => Ok(n),
        _ => Err(serde::de::Error::custom(format!(
            "starved_calls_per_sec must be in [1, 1000000], not {n}"
        ))),
    }
}

/// `engine.rate_lease_ttl` unless set: long enough that renewals (in a reservation's last
/// quarter) cost a sidecar a call every 7.5 s, short enough that a pod that left without ending
/// its reservation holds its share for 10 s (longer in a fleet of more than
/// `10 · starved_calls_per_sec` sidecars: `live / starved_calls_per_sec` seconds).
pub const DEFAULT_RATE_LEASE_TTL: Duration = Duration::from_secs(10);

/// `engine.rate_lease_ttl`: `off`, or in [1s, 1h] (the store keeps a reservation at most
/// [`crate::reserve::MAX_TTL_MICROS`], an hour).
fn rate_lease_ttl<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<HumanDuration>, D::Error> {
    let text = String::deserialize(d)?;
    if text.trim() == "off" {
        return Ok(None);
    }
    let ttl: HumanDuration = text.parse().map_err(|e| {
        serde::de::Error::custom(format!("rate_lease_ttl is `off` or a duration: {e}"))
    })?;
    let longest = Duration::from_micros(crate::reserve::MAX_TTL_MICROS);
    if (Duration::from_secs(1)..=longest).contains(&ttl.0) {
        Ok(Some(ttl))
    } else {
        Err(serde::de::Error::custom(format!(
            "rate_lease_ttl must be from 1s to 1h, not {ttl}"
        )))
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
