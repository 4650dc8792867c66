//! The Lua scripts, loaded once. `redis::Script` sends EVALSHA and, on NOSCRIPT (a restarted or
//! failed-over Redis), loads the script and retries; in a cluster, on the node that owns the key.
//!
//! The bucket scripts share `lua/bucket.lua` (argument parsing and the refill), prepended here.

use std::sync::LazyLock;

use redis::Script;
use sluice_core::bucket::Rate;

/// `lease.lua`: refill and take up to `want` tokens (and give a starved caller a turn); returns
/// `{granted, remaining_millitokens, window, ends_in, turn_in}`.
pub static LEASE: LazyLock<Script> =
    LazyLock::new(|| bucket_script(include_str!("../lua/lease.lua")));
/// `release.lua`: refill and give tokens back (capped at the burst); returns remaining millitokens.
pub static RELEASE: LazyLock<Script> =
    LazyLock::new(|| bucket_script(include_str!("../lua/release.lua")));
/// `peek.lua`: refill without writing; returns remaining millitokens.
pub static PEEK: LazyLock<Script> =
    LazyLock::new(|| bucket_script(include_str!("../lua/peek.lua")));
/// `charge.lua`: refill and charge usage after the fact, into debt down to `-max_debt`; returns
/// `{charged, remaining_millitokens, window, ends_in}`.
pub static CHARGE: LazyLock<Script> =
    LazyLock::new(|| bucket_script(include_str!("../lua/charge.lua")));
/// `close.lua`: close a fixed window if it is still the current one; returns remaining
/// millitokens.
pub static CLOSE: LazyLock<Script> =
    LazyLock::new(|| bucket_script(include_str!("../lua/close.lua")));
/// `demand.lua`: record one client's RLQS demand for a bucket and read every live client's.
pub static DEMAND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/demand.lua")));
/// `heartbeat.lua`: register this instance and count live ones.
pub static HEARTBEAT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/heartbeat.lua")));

/// `top_add.lua`: add one instance's denied hits to a slot of `quota top`'s counts.
pub static TOP_ADD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/top_add.lua")));
/// `top_read.lua`: the summed counts of `quota top`'s slots.
pub static TOP_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/top_read.lua")));

/// A bucket script: `bucket.lua` (shared prelude), then the script's own part.
fn bucket_script(body: &str) -> Script {
    Script::new(&format!("{}\n{body}", include_str!("../lua/bucket.lua")))
}

/// An invocation of a bucket script: KEYS[1] = `key`, ARGV = L, T (µs), B, `now` (empty: Redis
/// TIME), the algorithm's code, then the script's own arguments.
pub fn bucket_call<'a>(
    script: &'a Script,
    key: &str,
    rate: &Rate,
    now_micros: Option<u64>,
    args: &[u64],
) -> redis::ScriptInvocation<'a> {
    let mut inv = script.prepare_invoke();
    inv.key(key)
        .arg(rate.requests_per_unit)
        .arg(rate.period_micros())
        .arg(rate.burst)
        .arg(now_micros.map(|n| n.to_string()).unwrap_or_default())
        .arg(rate.algorithm.code());
    for a in args {
        inv.arg(*a);
    }
    inv
}

/// The same call as [`bucket_call`] with Redis's own `now`, as a plain EVALSHA command for a
/// pipeline (a batch). A Redis that does not know the script answers NOSCRIPT for this call
/// alone; the caller then sends it through [`bucket_call`], which loads the script.
pub fn bucket_cmd(script: &Script, key: &str, rate: &Rate, args: &[u64]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash())
        .arg(1)
        .arg(key)
        .arg(rate.requests_per_unit)
        .arg(rate.period_micros())
        .arg(rate.burst)
        .arg("")
        .arg(rate.algorithm.code());
    for a in args {
        cmd.arg(*a);
    }
    cmd
}
