//! The checks of `redis:` that look across its fields or at the environment (each field checks
//! itself where it is written; the Redis client's own URL parser runs at the edge).

use super::reader::ConfigReader;
use super::secrets::At;
use crate::error::ConfigError;
use crate::schema::{RedisSettings, SentinelSettings};

/// Checks `redis:`: exactly one of `url`, `cluster_nodes` and `sentinel`, with Redis URL
/// schemes (the Redis client parses the rest at the edge:
/// [`Config::redis_error`](super::load::Config::redis_error)), and a set `password_env`.
pub(super) fn validate_redis(
    source: &dyn ConfigReader,
    at: At<'_>,
    redis: &RedisSettings,
) -> Result<(), ConfigError> {
    let bad = |m: String| Err(at.error(format!("redis: {m}")));
    let given = [
        redis.url.is_some(),
        !redis.cluster_nodes.is_empty(),
        redis.sentinel.is_some(),
    ];
    match given.iter().filter(|&&g| g).count() {
        0 => {
            return bad(
                "needs `url` (standalone), `cluster_nodes` (Redis Cluster) or `sentinel` (Redis Sentinel)"
                    .into(),
            );
        }
        1 => {}
        _ => return bad("give one of `url`, `cluster_nodes` and `sentinel`".into()),
    }
    let sentinels = redis.sentinel.iter().flat_map(|s| &s.nodes);
    let urls: Vec<&String> = redis
        .url
        .iter()
        .chain(&redis.cluster_nodes)
        .chain(sentinels)
        .collect();
    for u in urls {
        if !(u.starts_with("redis://") || u.starts_with("rediss://")) {
            // Never echo the URL: it may hold a password.
            return bad("every address must start with redis:// or rediss://".into());
        }
    }
    if let Some(sentinel) = &redis.sentinel
        && let Err(why) = check_sentinel(sentinel)
    {
        return bad(format!("sentinel: {why}"));
    }
    if redis.batch_linger.0 >= redis.timeout.0 {
        return bad(format!(
            "batch_linger ({}) must be shorter than timeout ({}): a call waits for its batch within the timeout",
            redis.batch_linger, redis.timeout
        ));
    }
    if let Some(wait) = redis.batch_min_wait
        && wait.0 >= redis.timeout.0
    {
        return bad(format!(
            "batch_min_wait ({wait}) must be shorter than timeout ({}): a call waits for its batch within the timeout",
            redis.timeout
        ));
    }
    if let Some(prefix) = &redis.key_prefix
        && let Err(why) = check_key_prefix(prefix)
    {
        return bad(format!("key_prefix: {why}"));
    }
    if let Some(var) = &redis.password_env
        && source.env(var).is_none()
    {
        return bad(format!("password_env names {var}, which is not set"));
    }
    Ok(())
}

/// `redis.sentinel` on its own: a master's name (or a URL without a port whose host is one),
/// and at least one sentinel, all over TLS or none (the master is reached as they are).
fn check_sentinel(sentinel: &SentinelSettings) -> Result<(), String> {
    if sentinel.nodes.is_empty() {
        return Err("`nodes` lists no sentinel".into());
    }
    let tls = |u: &str| u.starts_with("rediss://");
    if sentinel
        .nodes
        .iter()
        .any(|u| tls(u) != tls(&sentinel.nodes[0]))
    {
        return Err("`nodes` mixes redis:// and rediss://: give every sentinel the same".into());
    }
    let master = sentinel.master.as_str();
    if let Some((scheme, rest)) = master.split_once("://") {
        if scheme != "redis" && scheme != "rediss" {
            return Err("`master` is a name or a redis:// or rediss:// URL".into());
        }
        // Never echo it: it may hold a password.
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        if host.is_empty() {
            return Err("`master`: the URL's host is the master's name, and it has none".into());
        }
        if host.contains(':') {
            return Err("`master`: no port (the sentinels give the master's address)".into());
        }
    } else if master.is_empty() || !master.chars().all(|c| c.is_ascii_graphic()) {
        return Err("`master` must be the name the sentinels monitor it under".into());
    }
    Ok(())
}

/// The most bytes `redis.key_prefix` may have: it goes into every key and every call.
pub const MAX_KEY_PREFIX: usize = 64;

/// Why `prefix` cannot be put before sluice's Redis keys, if it cannot: empty, longer than
/// [`MAX_KEY_PREFIX`], a byte that is not visible ASCII (a space or a control byte would be
/// hard to see in `redis-cli` and in an ACL), or a `{` or `}`, which would make Redis Cluster
/// hash the prefix instead of the bucket's own tag and put every key of the fleet in one slot.
pub fn check_key_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        return Err("empty (leave it out for no prefix)".into());
    }
    if prefix.len() > MAX_KEY_PREFIX {
        return Err(format!("{} bytes, at most {MAX_KEY_PREFIX}", prefix.len()));
    }
    if let Some(c) = prefix.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!("{c:?} is not visible ASCII"));
    }
    if prefix.contains(['{', '}']) {
        return Err("no `{` or `}`: Redis Cluster would hash the prefix, not the bucket".into());
    }
    Ok(())
}
