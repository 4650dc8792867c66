//! Requests waiting for their key's single flight (`Leaser::flights`): what a waiter adds to
//! the next call's ask ([`Waiter`]), and when a strict-mode waiter needs no call of its own.

use sluice_core::bucket::{Algorithm, Rate};
use sluice_core::config::Mode;

use crate::bucket::LeaseBucket;
use crate::ledger::LeaseState;
use crate::plan::Charge;

/// Whether a strict-mode charge that asked at `asked` and got its key's lock at `locked` waited
/// for a call on its key (one sent after `answered_before`) whose answer leaves it short: the
/// store, when it judged that call (taken as halfway between its send and `locked`), held less
/// than the charge needs, and would still have at `asked`. The charge is then denied as an exact
/// limiter would deny it, without a call of its own. Each waiter calling in turn, one round trip
/// after another, made a convoy on a starved hot key whose requests come faster than a round
/// trip: 3 sidecars at 4.8× a limit of 364 a second, one hot, a store 3 ms away with 2.8 ms of
/// jitter, and 5 055 of 8 824 decisions waited out the store's timeout, the calls it cut off
/// lost their tokens, and the fallback admitted beyond `B + L·t` (16 over; the fleet
/// simulator's property test). A waiter that came after the store's tokens were there still
/// calls. The price: a waiter is judged on the call before it, a store's round trip behind
/// an exact limiter, not on a call of its own another round trip later, and one sidecar on a
/// burst of 1 at 80% of 324 a second is denied 0.59% of the requests an exact limiter admits,
/// not 0.25% (simulated). A concurrency limit's slots come back at no time a rate can tell:
/// its waiters call as before.
pub(super) fn waited_for_a_short_answer(
    bucket: &LeaseBucket,
    charge: &Charge<'_>,
    answered_before: u64,
    asked: u64,
    locked: u64,
) -> bool {
    let rate = &bucket.rate;
    if charge.info.mode != Mode::Strict || rate.algorithm == Algorithm::Concurrency {
        return false;
    }
    let state = bucket.lock();
    state.global_read_at > answered_before
        && short_at(
            rate,
            state.global_remaining,
            state.global_read_at,
            locked,
            charge.hits,
            asked,
        )
}

/// Whether a bucket of `rate` that held `remaining` after a call sent at `sent` and answered by
/// `locked` (judged halfway between) held fewer than `hits` at `asked`, with what refilled from
/// the judging to `asked`.
fn short_at(rate: &Rate, remaining: f64, sent: u64, locked: u64, hits: u64, asked: u64) -> bool {
    if remaining >= hits as f64 {
        return false;
    }
    let judged = sent + locked.saturating_sub(sent) / 2;
    match rate.micros_until_at(remaining, hits as f64, judged) {
        Some(wait) => judged.saturating_add(wait) > asked,
        None => true,
    }
}

/// A request waiting for another request's store call on its key, when its waiters [`counts`]
/// (exact mode; strict while the bucket showed slack at the last answer, but for a
/// concurrency limit): its hits count in the key's `waiting` (so the next call asks for them
/// too) until it stops waiting, also when its future is dropped (a client gone), so a count
/// never outlives its waiter. In strict mode
/// a lease can be a single token (`B = n`) or, with a lease of rate, what a request lacks: each
/// waiter asking for its own in turn, a hot pod's requests behind a chain of round trips waited
/// out the store's timeout (43 sidecars at 67% of 296 a second on a burst of 43, one hot: 14 of
/// 666 decisions timed out, none now; simulated). Nearer the limit one call for every waiter
/// found the bucket short where calls a round trip apart found a token (a hot pod at 100% of
/// `L` on a burst of 21: 19 → 41 of 5 600 denied that an exact limiter admits).
pub(super) struct Waiter<'a> {
    bucket: &'a LeaseBucket,
    hits: u64,
}

/// Whether requests waiting for a store call on a key in `state` (a bucket of `rate`, `mode`)
/// count toward the next call's ask ([`Waiter`]): in exact mode always; in strict mode while
/// the bucket showed slack at the last reading (or none is kept: a key not read here since it
/// gave its tokens back), except for a concurrency limit, whose slots taken for a waiter that
/// gave up would sit in this instance's lease while another's request is refused. Asked when
/// a request starts to wait and again when the next call is sized.
pub(super) fn counts(state: &LeaseState, rate: &Rate, mode: Mode) -> bool {
    match mode {
        Mode::Exact => true,
        Mode::Strict => rate.algorithm != Algorithm::Concurrency && state.showed_slack(rate),
        _ => false,
    }
}

impl<'a> Waiter<'a> {
    /// A waiter for `hits` on `bucket` in `mode`, if its key's waiters [`counts`]: judged and
    /// counted under one lock of the key.
    pub(super) fn counted(bucket: &'a LeaseBucket, hits: u64, mode: Mode) -> Option<Self> {
        let mut state = bucket.lock();
        if !counts(&state, &bucket.rate, mode) {
            return None;
        }
        let waiting = &mut state.rare_mut().waiting;
        *waiting = waiting.saturating_add(hits);
        Some(Self { bucket, hits })
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let mut state = self.bucket.lock();
        let waiting = &mut state.rare_mut().waiting;
        *waiting = waiting.saturating_sub(self.hits);
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::Unit;
    use sluice_core::bucket::Rate;

    use super::{Waiter, short_at};
    use crate::bucket::LeaseBucket;
    use sluice_core::config::Mode;

    /// 100 a second: a token every 10 ms.
    fn rate() -> Rate {
        Rate {
            burst: 10,
            ..Rate::per_unit(100, Unit::Second)
        }
    }

    #[test]
    fn a_store_that_could_pay_is_never_short() {
        assert!(!short_at(&rate(), 1.0, 0, 4_000, 1, 0));
        assert!(!short_at(&rate(), 3.5, 0, 4_000, 3, 100_000));
    }

    #[test]
    fn a_request_that_came_before_the_store_judged_a_short_call_is_short() {
        // Sent at 0, answered by 4 ms, judged at 2 ms with 0.5 of a token left.
        assert!(short_at(&rate(), 0.5, 0, 4_000, 1, 1_000));
        assert!(short_at(&rate(), 0.5, 0, 4_000, 1, 2_000));
    }

    #[test]
    fn a_request_that_came_once_its_tokens_had_refilled_is_not_short() {
        // Half a token short at 2 ms: the token is there at 7 ms, not at 6.
        assert!(short_at(&rate(), 0.5, 0, 4_000, 1, 6_000));
        assert!(!short_at(&rate(), 0.5, 0, 4_000, 1, 7_000));
        // Two tokens short of 3: there at 22 ms.
        assert!(short_at(&rate(), 1.0, 0, 4_000, 3, 21_000));
        assert!(!short_at(&rate(), 1.0, 0, 4_000, 3, 22_000));
    }

    #[test]
    fn a_request_the_bucket_can_never_pay_is_short() {
        assert!(short_at(&rate(), 0.0, 0, 4_000, 11, u64::MAX));
    }

    /// A waiter's hits count while it waits and leave with it, also when a client vanishes and
    /// its request's future (and so its waiter) is dropped first; a strict key whose bucket
    /// showed no slack counts none, an exact one always.
    #[test]
    fn waiters_count_while_they_wait_and_leave_with_their_clients() {
        let waiting = |b: &LeaseBucket| b.lock().rare().waiting;
        let strict = LeaseBucket::new(b"k", rate(), Mode::Strict, 1, 0);
        let a = Waiter::counted(&strict, 2, Mode::Strict).expect("never read: counted");
        let b = Waiter::counted(&strict, 3, Mode::Strict).expect("counted");
        assert_eq!(waiting(&strict), 5);
        drop(a); // the first client is gone
        assert_eq!(waiting(&strict), 3);
        drop(b);
        assert_eq!(waiting(&strict), 0);
        strict.lock().read_global(7.0, 0); // under three quarters of 10
        assert!(Waiter::counted(&strict, 1, Mode::Strict).is_none());
        assert_eq!(waiting(&strict), 0);
        let exact = LeaseBucket::new(b"k", rate(), Mode::Exact, 1, 0);
        exact.lock().read_global(0.0, 0);
        let c = Waiter::counted(&exact, 4, Mode::Exact).expect("exact: always");
        assert_eq!(waiting(&exact), 4);
        drop(c);
        assert_eq!(waiting(&exact), 0);
    }
}
