//! The global store: where each key's global token bucket lives.

use std::future::Future;
use std::pin::Pin;

use sluice_core::bucket::{Algorithm, Rate};

/// A boxed future returned by [`GlobalStore`] methods (leases are off the hot path, so one box per
/// call is cheap next to the call itself).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// What a lease call returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseGrant {
    /// Tokens granted: `min(want, whole tokens available)`.
    pub granted: u64,
    /// Tokens left in the global bucket after the grant (fractional).
    pub remaining: f64,
    /// Windows (`fixed_window`, `sliding_window`): the window the tokens were taken from
    /// ([`Rate::window`](sluice_core::bucket::Rate::window); 0 for a token bucket), which a
    /// release must name. A concurrency limit on a store that
    /// [counts holders](GlobalStore::counts_holders): the slots the caller holds after the call.
    pub window: u64,
    /// Windows: microseconds until that window ends, by the store's clock. Leased tokens must
    /// be spent before then (a later window has its own `L`); `None` for a token bucket, whose
    /// leased tokens never lapse.
    pub ends_in: Option<u64>,
    /// A starved lease that asked for a turn ([`LeaseAsk::turn_gap`]): microseconds until the
    /// caller's turn to ask again, by the store's clock. `None` when no turn was asked for, or
    /// the grant was short neither of `starved_below` nor (while turns are to come) of
    /// `queue_below`.
    pub turn_in: Option<u64>,
    /// A lease that asked for a reservation ([`LeaseAsk::reserve`]): the thousandths of a token
    /// per period granted ([`sluice_core::reserve`]), from the store's answer on until the
    /// call's send time plus the ttl. `None`: none was asked for, or the store keeps none.
    pub reserved: Option<u64>,
    /// Every live reservation of the bucket after the call, summed (`R`, thousandths of a token
    /// per period): the store refills the bucket at `L − R`, which is what a `local_share`
    /// fallback shares and is charged against after an outage. 0 where nothing is reserved.
    pub reserved_all: u64,
    /// Microseconds from the store's now until every reservation of the bucket has lapsed, at
    /// the latest (`Reservations::ends_in`; 0 with none): `R` holds no longer than that.
    pub reserved_ends_in: u64,
}

impl LeaseGrant {
    /// A grant of `granted` tokens leaving `remaining`, from the bucket `state` of `rate` at
    /// `now` (the window it names, and when that ends).
    pub fn of(granted: u64, remaining: f64, rate: &Rate, now: u64) -> Self {
        Self {
            granted,
            remaining,
            window: rate.window(now),
            ends_in: rate
                .algorithm
                .is_window()
                .then(|| sluice_core::window::until_window_end(rate, now)),
            turn_in: None,
            reserved: None,
            reserved_all: 0,
            reserved_ends_in: 0,
        }
    }
}

/// What a lease call asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseAsk {
    /// Tokens wanted.
    pub want: u64,
    /// Of the grant, only `least` may leave the bucket below half its burst (a cold lease takes
    /// its extra only from a bucket far from its limit; `want` for any other lease).
    pub least: u64,
    /// The caller's place in the key's queue of starved callers, µs; 0: no turn. A caller
    /// granted fewer than `starved_below` tokens, or fewer than `queue_below` while the queue
    /// has turns to come, gets the next free turn, this long after the one before it
    /// ([`next_turn`]): the policy's turn gap, so starved sidecars ask about `1e6 / gap` times a
    /// second in all, however many they are, or less for a caller whose ask refills sooner
    /// (`lease::policy::queue_gap`).
    pub turn_gap: u64,
    /// See `turn_gap`: what the caller cannot do without (what its request needs now, or all it
    /// asked for at its turn). A grant short of `least` but not of this, with no queue, is no
    /// sign that the key is starved fleet-wide: under its limit, tokens may sit in other
    /// sidecars' leases for a while.
    pub starved_below: u64,
    /// A lease of rate asked for in the same call: see [`ReserveAsk`].
    pub reserve: Option<ReserveAsk>,
    /// See `turn_gap`: a grant short of this while others wait for their turns joins the queue
    /// (the lease the caller would have without a cold lease). A caller that got what its
    /// request needs but less than its lease while others wait spends what came and then waits
    /// for its turn, sized by its demand: else a thin slice (its lease one token, its share of
    /// half the burst) asked the store for each of its requests, and took the tokens that
    /// refilled between turns before the starved callers' turns came (128 sidecars in step at
    /// 4× the limit: a call for each admitted request, simulated).
    pub queue_below: u64,
    /// See `turn_gap`: at most what the caller's next request lacks. The first turn of a queue
    /// that has run out comes when the bucket holds what the caller lacks of `starved_below`,
    /// or this much if less ([`LeaseAsk::lacking`]): a sidecar asking by demand below its
    /// limit (a Poisson clump of 3 requests on a burst of 3, at 61% of its limit) waited for
    /// all the demand it had seen, and denied a request an exact limiter admits. `u64::MAX`:
    /// all it lacks (a sidecar alone over its limit, whose wait for its whole ask loses
    /// nothing: every token that refills is its own).
    pub next_needs: u64,
}

/// A reservation of part of a key's rate `L` (issue 42, [`sluice_core::reserve`]): the store
/// refills the key's bucket at `L − R` while it lasts, and the caller fills a stock of its own
/// at what it was granted, from the answer until its send time plus `ttl_micros`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReserveAsk {
    /// The caller as a holder (an instance's number; a Redis store uses its own instance's).
    pub holder: u64,
    /// Thousandths of a token per period asked for (0 gives the reservation back).
    pub per_mille: u64,
    /// How long it lasts, µs (at most [`sluice_core::reserve::MAX_TTL_MICROS`]).
    pub ttl_micros: u64,
    /// Thousandths of a token given back to the bucket (capped at the burst) before anything is
    /// taken: what the caller's stock could not hold since its last call (it was full), and
    /// the fraction of a token an empty stock had filled: rate the fleet would otherwise lose
    /// or get late. Token buckets only.
    pub give_back_milli: u64,
}

impl LeaseAsk {
    /// Exactly `want` tokens (or as many as there are), no turn.
    pub fn exactly(want: u64) -> Self {
        Self {
            want,
            least: want,
            turn_gap: 0,
            starved_below: 0,
            reserve: None,
            queue_below: want,
            next_needs: u64::MAX,
        }
    }

    /// What a caller granted `granted` tokens still lacks, as the first turn of a queue that
    /// has run out waits for it: of `starved_below`, and no more than `next_needs`.
    pub fn lacking(&self, granted: u64) -> u64 {
        self.starved_below
            .saturating_sub(granted)
            .min(self.next_needs)
    }
}

/// The queue of a key's starved callers, as `lease.lua` keeps it: `queue_end` is the last turn
/// given (0: none). While turns are still to come (`queue_end` after `now`), a caller starved at
/// `now` gets the turn `gap` after the last one. Once the queue has run out, the caller is first
/// in it, and its turn comes when the bucket holds what it lacks, `ready_in` µs from now (at
/// least 1 µs and at most `gap`): a whole `gap` from now denied what an exact limiter admits
/// once the bucket had the tokens (a lone sidecar on a burst of 1 at 50% of its limit: 5.4% of
/// requests, 1.7% with this; the fleet simulator, RESULTS.md). Returns the new turn (the queue's
/// new end), a time by the store's clock: the caller may ask again from then on.
pub fn next_turn(queue_end: u64, now: u64, gap: u64, ready_in: u64) -> u64 {
    if queue_end > now {
        queue_end.saturating_add(gap)
    } else {
        now.saturating_add(ready_in.clamp(1, gap.max(1)))
    }
}

/// µs until a token bucket holding `available` (after a grant) holds the `lacking` tokens a
/// caller still lacks ([`LeaseAsk::lacking`]; [`next_turn`]'s `ready_in`, as `lease.lua`
/// computes it); `u64::MAX` when no refill can tell (windows, slots, a zero rate, more than the
/// burst).
pub fn ready_in(rate: &Rate, available: f64, lacking: u64) -> u64 {
    if rate.algorithm != Algorithm::TokenBucket {
        return u64::MAX;
    }
    rate.micros_until(available, lacking as f64)
        .unwrap_or(u64::MAX)
}

/// A reset another instance pushed: the encoded table key ([`crate::key::encode_into`]) whose
/// state to drop.
pub type PushedReset = std::sync::Arc<[u8]>;

/// A global store failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store did not answer within its timeout.
    #[error("global store timed out")]
    Timeout,
    /// The store cannot be reached (connection refused, circuit open, cluster down).
    #[error("global store unavailable: {0}")]
    Unavailable(String),
    /// The store answered with something this version does not understand.
    #[error("global store protocol error: {0}")]
    Protocol(String),
    /// The store holds as many buckets as it may and none can be dropped without resetting a
    /// limit (the embedded store's `max_keys`): a new key cannot be tracked now.
    #[error("global store full: no room for a new key")]
    Full,
}

/// The global token buckets, shared by every sluice instance (Redis), or by one (in memory).
///
/// Every method acts on exactly one key, atomically: the refill to the store's own "now" and the
/// change happen as one step, so concurrent instances never see a half-applied bucket. A key that
/// does not exist is a full bucket. Errors leave the bucket unchanged, except [`StoreError::Timeout`],
/// after which the caller cannot know whether the call was applied (a lease may be lost, never
/// granted twice: strict mode stays under the limit).
pub trait GlobalStore: Send + Sync + 'static {
    /// Refills the bucket at `key` and takes `min(want, whole tokens)`. A store with bounded
    /// room answers [`StoreError::Full`] for a key it cannot hold.
    fn lease<'a>(&'a self, key: &'a str, rate: Rate, want: u64) -> StoreFuture<'a, LeaseGrant> {
        self.lease_asking(key, rate, LeaseAsk::exactly(want))
    }

    /// [`lease`](Self::lease), except that only `ask.least` of the grant may leave the bucket
    /// below half its burst: `min(want, whole tokens, max(least, whole tokens above half the
    /// burst))` (`BucketState::take_keeping_half`). A cold lease asks this way, so it takes its
    /// tokens ahead of demand only from a bucket far from its limit, however many sidecars ask
    /// at once. With a `turn_gap`, a grant short of `starved_below` (or of `queue_below` while turns
    /// are to come) also gets a turn in the key's queue of starved callers ([`next_turn`],
    /// [`LeaseGrant::turn_in`]); a store whose callers never wait for one may give none.
    fn lease_asking<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        ask: LeaseAsk,
    ) -> StoreFuture<'a, LeaseGrant>;

    /// Refills the bucket at `key` and charges `tokens` used after the fact, whatever is left:
    /// the balance may go down to `-max_debt` (post-paid usage must not be lost). `granted` is
    /// what was charged (less than `tokens` only where the debt bound clamps it), `remaining`
    /// the balance after it (negative in debt).
    fn charge<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        max_debt: u64,
    ) -> StoreFuture<'a, LeaseGrant>;

    /// Refills the bucket at `key` and puts `tokens` back, capped at the burst (an absent bucket
    /// is full: nothing changes). For a window, only if `window` (the grant's) is still the
    /// current one: tokens of a window that is over are dropped, never given to the next.
    fn release<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        window: u64,
    ) -> StoreFuture<'a, ()>;

    /// A concurrency limit ([`Algorithm::Concurrency`](sluice_core::bucket::Algorithm)): gives
    /// back `slots` of those this instance holds at `key`. A store shared by instances
    /// ([`counts_holders`](Self::counts_holders)) counts each one's slots, lets a holder give
    /// back only what it holds, and frees an instance's slots a hold timeout (the rate's period)
    /// after its last call. By default [`release`](Self::release) (one instance).
    fn release_slots<'a>(&'a self, key: &'a str, rate: Rate, slots: u64) -> StoreFuture<'a, ()> {
        self.release(key, rate, slots, 0)
    }

    /// Whether the store counts each instance's concurrency slots: its lease answers for a
    /// concurrency limit then carry, in [`LeaseGrant::window`], the slots this instance holds
    /// there after the call.
    fn counts_holders(&self) -> bool {
        false
    }

    /// Closes window `window` of the fixed-window bucket at `key` (no token left in it) if it is
    /// still the current window; does nothing otherwise, nor to an absent bucket. A fixed
    /// window counting denials calls it when it denies (`count_denied`). By default a no-op.
    fn close_window<'a>(&'a self, key: &'a str, rate: Rate, window: u64) -> StoreFuture<'a, ()> {
        let _ = (key, rate, window);
        Box::pin(std::future::ready(Ok(())))
    }

    /// The bucket's tokens after a refill, without changing it.
    fn peek<'a>(&'a self, key: &'a str, rate: Rate) -> StoreFuture<'a, f64>;

    /// Forgets the bucket at `key`, so it is full again, and tells every other instance sharing
    /// the store to drop its own state of the bucket, `local` (its table key, see
    /// [`pushed_resets`](Self::pushed_resets)): their leases of the old bucket would otherwise
    /// keep deciding until `lease_ttl`. The reset is done once the bucket is forgotten: a message
    /// that cannot be sent is logged, and each instance converges within `lease_ttl` as before.
    fn reset<'a>(&'a self, key: &'a str, local: &'a [u8]) -> StoreFuture<'a, ()>;

    /// The table keys other instances sharing the store reset ([`reset`](Self::reset)'s `local`),
    /// as they arrive; `None` where no other instance shares the store (in memory). The engine
    /// drops its state of each. A receiver that falls behind skips messages (and those keys
    /// converge within `lease_ttl`).
    fn pushed_resets(&self) -> Option<tokio::sync::broadcast::Receiver<PushedReset>> {
        None
    }

    /// Adds `counts` (`(store key, denied hits)`, one instance's since its last flush) into the
    /// fleet's count of `slot`, keeping the slot's [`KEEP_PER_SLOT`](crate::top::KEEP_PER_SLOT)
    /// heaviest members for [`WINDOW_SLOTS`](crate::top::WINDOW_SLOTS) slots
    /// ([`crate::top::merge_into`]).
    fn add_denied<'a>(&'a self, slot: u64, counts: &'a [(String, u64)]) -> StoreFuture<'a, ()>;

    /// The counts of slots `from..=to` summed, as `(store key, denied hits)`, in no order.
    fn top_denied<'a>(&'a self, from: u64, to: u64) -> StoreFuture<'a, Vec<(String, u64)>>;

    /// Records `client`'s demand (milli-requests per second; 0 withdraws it) on the bucket at
    /// `key` for `ttl`, and returns every live client's demand, this one's included, in no
    /// particular order (RLQS sizes each Envoy's share from all of them). A store shared by one
    /// process only sees its own clients; by default a store keeps none but the caller's.
    fn demand<'a>(
        &'a self,
        key: &'a str,
        client: u64,
        milli_rps: u64,
        ttl: std::time::Duration,
    ) -> StoreFuture<'a, Vec<u64>> {
        let _ = (key, client, ttl);
        Box::pin(std::future::ready(Ok(vec![milli_rps])))
    }

    /// Whether the store is known to be unavailable (circuit open, not connected): decisions use
    /// each rule's fallback. Reported in `/readyz` and `sluice_degraded`.
    fn degraded(&self) -> bool {
        false
    }

    /// Live sluice instances sharing this store (for `fallback: local_share`); at least 1.
    fn live_instances(&self) -> u64 {
        1
    }

    /// The longest a decision may wait for this store in all (queueing behind another call for
    /// the same key, a call, a second lease), after which the rule's fallback decides; `None`:
    /// no bound (the in-process store answers at once).
    fn decision_timeout(&self) -> Option<std::time::Duration> {
        None
    }

    /// Whether calls are in-process and cheap (the memory store): a starved key may then ask
    /// again as soon as a token is due instead of waiting a lease horizon.
    fn is_in_process(&self) -> bool {
        false
    }

    /// Periodic upkeep (dropping idle state); called by the engine's maintenance loop.
    fn housekeeping(&self) {}

    /// A short name for logs and metrics (`memory`, `redis`, `redis-cluster`).
    fn name(&self) -> &'static str;
}

/// `f`'s output (a store call, or a wait for one), or `None` if `deadline` passes first.
pub(crate) async fn until<T>(
    deadline: Option<tokio::time::Instant>,
    f: impl Future<Output = T>,
) -> Option<T> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, f).await.ok(),
        None => Some(f.await),
    }
}
