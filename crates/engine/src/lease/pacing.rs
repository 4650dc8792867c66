//! Starved keys in a fleet: how long a sidecar waits before asking the store again.
//!
//! A key whose global demand is above its limit is *starved*: each sidecar spends what its call
//! brought, then denies locally until it asks again. Asking every lease horizon costs the store
//! about one call per sidecar per horizon, so a starved key's cost grew with the fleet (5·N calls
//! a second with the defaults: 640 at 128 sidecars, more than one per decision).
//!
//! The fleet's call rate on the key can be read from what a call finds: on a key the fleet
//! contends for, calls take about all there is, so a call finds what refilled since the previous
//! call of any sidecar, `L × gap` on average. `L / found` estimates the calls the key gets per
//! second, and each sidecar stretches (or shrinks) its call interval on the key by how far that
//! is from the key's budget ([`fleet_budget`]): at most twice, at least half, per call, so one
//! unlucky reading (calls are random in time) moves it little. N sidecars so settle near
//! `N / budget` seconds apart, and the key costs about its budget whatever N is. Each call then
//! finds about `L / budget` tokens, and a sidecar asks for what it can spend until its next call
//! ([`want`]), so the refill is collected, not left to overflow the burst. A call that leaves
//! the bucket without a whole token (or gets less than it asked) makes the sidecar wait its
//! interval before it asks again; a key under its limit finds its bucket full and is not paced.
//!
//! What it costs: a starved sidecar may wait up to [`MAX_STARVED_WAIT`] before it sees that
//! demand elsewhere went away (until then it denies at its own pace); the bound `B + L·t` is
//! untouched (every token is still leased from the global bucket). Only for a remote store and
//! token buckets: the in-process store is asked as soon as a token is due, and a window's
//! tokens do not accumulate over time, so what a call finds says nothing about the others.

use sluice_core::bucket::{Algorithm, Rate};

/// Store calls per second a starved key may cost the whole fleet (unless its burst is small
/// next to its rate, see [`fleet_budget`]). Ten a second is about what one busy sidecar cost on
/// its own before (a call per lease horizon of 200 ms, plus refills ahead), and below the one
/// call per 100 decisions of any key starved at more than 1 000 requests a second.
pub(crate) const FLEET_CALLS_PER_SEC: f64 = 10.0;

/// The longest a starved sidecar waits before it asks again, in microseconds: two minutes, so a
/// fleet of 1 000 sidecars still settles under [`FLEET_CALLS_PER_SEC`] (100 s apart each).
pub(crate) const MAX_STARVED_WAIT: u64 = 120_000_000;

/// The store calls per second a starved key may cost the fleet: [`FLEET_CALLS_PER_SEC`], or four
/// per time the bucket takes to refill from empty (`B / L`) if that is more, so the calls drain
/// the bucket about four times before it could fill and spill refill that nobody collected.
pub(crate) fn fleet_budget(rate: &Rate) -> f64 {
    let per_sec = per_second(rate);
    if rate.burst == 0 {
        return FLEET_CALLS_PER_SEC;
    }
    FLEET_CALLS_PER_SEC.max(4.0 * per_sec / rate.burst as f64)
}

/// `L` in tokens per second.
fn per_second(rate: &Rate) -> f64 {
    let period = rate.period_micros().max(1) as f64;
    rate.requests_per_unit as f64 * 1e6 / period
}

/// Whether waits on this key follow the fleet: a token bucket on a remote store.
pub(crate) fn applies(rate: &Rate, in_process: bool) -> bool {
    !in_process && rate.algorithm == Algorithm::TokenBucket
}

/// How far apart this sidecar's calls on a key should be, in microseconds, after a call that
/// found `found` tokens in the store: `previous` (0: a lease horizon) stretched by the calls per
/// second the key seems to get over its [`fleet_budget`], at most [`MAX_STARVED_WAIT`]. 0 when
/// that is a horizon or less: the key is not paced (a key under its limit finds its bucket
/// full, and its interval shrinks back by half per call).
pub(crate) fn interval(rate: &Rate, found: f64, previous: u64, horizon: u64) -> u64 {
    let floor = horizon.clamp(1, MAX_STARVED_WAIT);
    let calls_per_sec = per_second(rate) / found.max(1e-3);
    let factor = (calls_per_sec / fleet_budget(rate)).clamp(0.5, 2.0);
    let wait = (previous.clamp(floor, MAX_STARVED_WAIT) as f64 * factor) as u64;
    if wait <= floor {
        0
    } else {
        wait.min(MAX_STARVED_WAIT)
    }
}

/// What a sidecar asks for on a paced key (`interval` > 0): what it can spend until its next
/// call (twice its measured demand over the interval, since on a starved key demand is measured
/// by what it was given), and at least twice what a call finds when the fleet keeps its budget
/// (`L / budget`), so every call empties the bucket and the next one's reading is true; at most
/// the burst. 0 when not paced.
pub(crate) fn want(rate: &Rate, demand_per_sec: f64, interval: u64) -> u64 {
    if interval == 0 {
        return 0;
    }
    let spend = 2.0 * demand_per_sec * interval as f64 / 1e6;
    let found = 2.0 * per_second(rate) / fleet_budget(rate);
    let want = spend.max(found).ceil();
    if want.is_finite() && want > 0.0 {
        (want as u64).min(rate.burst)
    } else {
        rate.burst
    }
}

/// How long a paced key's lease is kept unspent before it goes back: its interval, if longer
/// than `ttl` (a lease is meant to last until the next call).
pub(crate) fn lease_ttl(ttl: u64, interval: u64) -> u64 {
    ttl.max(interval)
}

#[cfg(test)]
mod tests;
