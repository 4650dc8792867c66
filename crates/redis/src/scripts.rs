//! The Lua scripts, loaded once. `redis::Script` sends EVALSHA and, on NOSCRIPT (a restarted or
//! failed-over Redis), loads the script and retries; in a cluster, on the node that owns the key.

use std::sync::LazyLock;

use redis::Script;
use sluice_core::bucket::Rate;

/// `lease.lua`: refill and take up to `want` tokens; returns `{granted, remaining_millitokens}`.
pub static LEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/lease.lua")));
/// `release.lua`: refill and give tokens back (capped at the burst); returns remaining millitokens.
pub static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/release.lua")));
/// `peek.lua`: refill without writing; returns remaining millitokens.
pub static PEEK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/peek.lua")));
/// `heartbeat.lua`: register this instance and count live ones.
pub static HEARTBEAT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/heartbeat.lua")));

/// The rate arguments every bucket script takes first: `L`, `T` in microseconds, `B`.
pub fn rate_args(rate: &Rate) -> [u64; 3] {
    [rate.requests_per_unit, rate.unit.micros(), rate.burst]
}

/// The optional `now` argument: empty means "use Redis TIME".
pub fn now_arg(now_micros: Option<u64>) -> String {
    now_micros.map(|n| n.to_string()).unwrap_or_default()
}
