//! The engine's side of the global store: one lease call per key at a time, sized to demand, a
//! background refill before a busy key's lease runs dry, and leases handed back. Every store call
//! of the engine is made here; every background task is owned by [`Leaser::tasks`].

use std::sync::Arc;
use std::time::Instant;

use sluice_core::config::Mode;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bucket::LeaseBucket;
use crate::debt::Debts;
use crate::decision::EngineSettings;
use crate::ledger::StoreStatus;
use crate::metrics::{EngineMetrics, StoreOp};
use crate::plan::{Charge, Plan};
use crate::store::{GlobalStore, LeaseAsk, StoreError, until};

mod background;
mod outage;
mod rates;
mod turns;

use turns::Turn;

/// Lease returns in flight at once (a sweep or a shutdown may return many).
const RETURNS_AT_ONCE: usize = 256;

/// How many single-flight locks the keys share (a power of two).
const FLIGHTS: usize = 4096;

/// Operator reads of the store (GetQuota, WatchQuota, `/quota`) in flight at once: they share the
/// store's connections with decisions' lease calls and must never crowd them out.
pub(crate) const QUOTA_READS: usize = 8;

/// The engine's side of the global store.
pub(crate) struct Leaser {
    pub(crate) store: Arc<dyn GlobalStore>,
    pub(crate) metrics: EngineMetrics,
    settings: EngineSettings,
    /// Single flight: a store call for a key holds its key's lock, so concurrent requests on an
    /// empty lease wait for that call instead of each calling the store. Keys share a fixed set
    /// of locks (by bucket address) instead of owning one each: a lock per key cost ~70 bytes of
    /// every tracked key. Two keys on one lock only queue their store calls (≤ the store
    /// timeout); each still checks its own lease after the wait.
    flights: Box<[Arc<tokio::sync::Mutex<()>>]>,
    /// Background refills and lease returns: shutdown waits for them before it hands every
    /// lease back, so no refill lands after the last return and strands its tokens.
    pub(crate) tasks: TaskTracker,
    /// Cancelled at shutdown: no new background work starts.
    pub(crate) stopping: CancellationToken,
    /// Places for operator reads of the store ([`QUOTA_READS`]).
    quota_reads: tokio::sync::Semaphore,
    /// Post-paid usage on its way to the store.
    debts: Debts,
    /// The engine's clock: when a lease of rate's answer arrived ([`rates`]).
    clock: Arc<dyn sluice_core::Clock>,
    /// This engine as a holder of reservations ([`rates::next_holder`]).
    holder: u64,
    /// The line a failed lease return writes: a store that refuses every call fails every
    /// return of every sweep (about 1 900 lines in 5 s on one sidecar of a soak, issue 41).
    return_failures: sluice_core::SampledLine,
}

impl Leaser {
    /// A leaser over `store`.
    pub(crate) fn new(
        store: Arc<dyn GlobalStore>,
        metrics: EngineMetrics,
        settings: EngineSettings,
        clock: Arc<dyn sluice_core::Clock>,
    ) -> Self {
        Self {
            debts: Debts::new(&settings),
            clock,
            holder: rates::next_holder(),
            store,
            metrics,
            settings,
            flights: (0..FLIGHTS).map(|_| Arc::default()).collect(),
            tasks: TaskTracker::new(),
            stopping: CancellationToken::new(),
            quota_reads: tokio::sync::Semaphore::new(QUOTA_READS),
            return_failures: sluice_core::SampledLine::new(),
        }
    }

    /// Reads a global bucket for an operator (counted like every store call). Refused at once,
    /// without a store call, while [`QUOTA_READS`] such reads are in flight.
    pub(crate) async fn peek_for_operator(
        &self,
        store_key: &str,
        rate: sluice_core::bucket::Rate,
    ) -> Result<f64, StoreError> {
        let Ok(_place) = self.quota_reads.try_acquire() else {
            return Err(StoreError::Unavailable(
                "too many quota reads in flight; try again".into(),
            ));
        };
        let started = Instant::now();
        let result = self.store.peek(store_key, rate).await;
        self.observe(StoreOp::Peek, started, &result);
        result
    }

    /// A place among the [`QUOTA_READS`] operator reads of the store (`quota top` takes one
    /// too); `None` while they are all in flight.
    pub(crate) fn operator_read(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.quota_reads.try_acquire().ok()
    }

    /// The single-flight lock of `bucket`.
    fn flight(&self, bucket: &LeaseBucket) -> &Arc<tokio::sync::Mutex<()>> {
        // Fibonacci hashing of the allocation address: stable for the bucket's life.
        let h = (bucket.addr() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        &self.flights[(h >> (64 - FLIGHTS.trailing_zeros())) as usize]
    }

    /// Asks the store for tokens where a lease cannot cover a charge (strict, exact), and reads
    /// the global bucket for peeks on keys never read; records each charge's store status. A
    /// request that some bucket can never pay makes no store call at all. Waiting (for another
    /// request's call on the same key, and for its own) ends at `deadline`: the charge is then
    /// decided by its fallback, so a decision never waits longer than the store's timeout.
    pub(crate) async fn ensure(
        &self,
        plan: &mut Plan<'_>,
        now: u64,
        deadline: Option<tokio::time::Instant>,
    ) {
        if plan.hopeless() {
            return;
        }
        match plan.charges.as_mut_slice() {
            [] => {}
            // The common case, without the allocation of a join.
            [charge] => self.ensure_charge(charge, now, deadline).await,
            // Every charge's store call is made at once: a request of ten cold keys waits about
            // one round trip (their calls share a batch), not ten.
            charges => {
                let calls = charges
                    .iter_mut()
                    .map(|charge| self.ensure_charge(charge, now, deadline));
                futures_util::future::join_all(calls).await;
            }
        }
    }

    /// [`ensure`](Self::ensure) for one charge.
    async fn ensure_charge(
        &self,
        charge: &mut Charge<'_>,
        now: u64,
        deadline: Option<tokio::time::Instant>,
    ) {
        // A post-paid bucket only reported to needs nothing before the decision.
        if charge.info.mode == Mode::Local || charge.store != StoreStatus::Up || !charge.checked {
            return;
        }
        let bucket = charge.bucket.clone();
        if self.covered(&bucket, charge.info.mode, charge.hits, now) {
            return;
        }
        // Single flight: one store call per key at a time; the others wait for its result
        // (until the deadline) and then spend from the lease it brought. In exact mode a waiter
        // says what it needs, so the next call asks for every waiter at once.
        let waiting =
            (charge.info.mode == Mode::Exact).then(|| ExactWaiter::new(&bucket, charge.hits));
        let flight = until(deadline, self.flight(&bucket).lock()).await;
        drop(waiting);
        let Some(_flight) = flight else {
            charge.store = down(charge);
            return;
        };
        if self.covered(&bucket, charge.info.mode, charge.hits, now) {
            return;
        }
        let call = async {
            if charge.hits == 0 {
                self.peek(&bucket, charge.store_key(), now).await
            } else {
                self.lease_for(charge, now).await
            }
        };
        // A call cut off here may still take tokens in the store: they are lost for a while
        // (stricter, never looser), as after any store timeout.
        let failed = until(deadline, call)
            .await
            .unwrap_or(Some(StoreError::Timeout));
        if let Some(e) = failed {
            charge.store = match e {
                StoreError::Full => {
                    self.metrics.key_refused("store", now);
                    StoreStatus::NoRoom
                }
                _ => down(charge),
            };
        }
    }

    /// When a decision on this store must be made by, if it began now.
    pub(crate) fn deadline(&self) -> Option<tokio::time::Instant> {
        self.store
            .decision_timeout()
            .map(|t| tokio::time::Instant::now() + t)
    }

    /// Whether no store call is needed: the lease covers `hits`, a starved key waits for
    /// refill, or a peek already knows the global level.
    fn covered(&self, bucket: &LeaseBucket, mode: Mode, hits: u64, now: u64) -> bool {
        let mut state = bucket.lock();
        state.expire(now);
        state.fill(&bucket.rate, now);
        if hits == 0 {
            // A reading older than a lease horizon is read again (others spend meanwhile).
            state.global_known
                && now.saturating_sub(state.global_read_at) < micros(self.settings.lease_horizon)
        } else {
            state.lease >= hits || (mode == Mode::Strict && now < state.retry_at())
        }
    }

    /// Leases what `charge` is missing (and about a lease horizon of demand beyond it, or a cold
    /// lease where the key looks far from its limit, or, at a starved key's turn, the demand it
    /// saw while it waited).
    async fn lease_for(&self, charge: &Charge<'_>, now: u64) -> Option<StoreError> {
        let bucket = &charge.bucket;
        let (missing, demand, cold, queued_demand, denying, rate_leased) = {
            let mut state = bucket.lock();
            state.expire(now);
            state.fill(&bucket.rate, now);
            let seen = state.seen_since_lease();
            // Exact mode: what this request lacks, and what the requests waiting behind it need.
            let waiting = match charge.info.mode {
                Mode::Exact => state.rare().exact_waiting,
                _ => 0,
            };
            (
                charge
                    .hits
                    .saturating_sub(state.lease)
                    .saturating_add(waiting),
                f64::from(state.demand_per_sec),
                state.far_from_limit(&bucket.rate, now),
                (state.queued || state.denied_since_lease > 0).then_some(seen),
                state.denied_since_lease > 0,
                state.rate_leased(now),
            )
        };
        let turn_gap = self.turn_gap(charge.info.mode, &bucket.rate);
        if let (Some(seen), true) = (queued_demand, turn_gap > 0) {
            let turn = Turn {
                seen,
                missing,
                denying,
                gap: turn_gap,
            };
            return self.lease_by_demand(charge, turn, now).await;
        }
        // A lease of rate fills the stock with the key's mean demand: the store is asked only
        // for what a request lacks, and the burst stays in the store for every sidecar.
        if rate_leased {
            let ask = LeaseAsk {
                turn_gap,
                starved_below: missing,
                ..LeaseAsk::exactly(missing)
            };
            return self
                .lease(bucket, charge.store_key(), ask, charge.hits, now)
                .await;
        }
        let mut want = self.lease_size(charge.info.mode, bucket.rate.burst, missing, demand);
        let share = self.fleet_share(bucket.rate.burst, missing);
        // What the lease keeps if the store shows the key is not far from its limit after all,
        // and all it may take from below half the burst: this instance's share of it while it
        // admits everything ([`fleet_share`](Self::fleet_share)). Once it has been denying, the
        // key is starved and the bottom half is what the key's queue of turns shares out: the
        // whole lease, as before, so a grant short of it still means a turn.
        let mut keep = if denying { want } else { want.min(share) };
        // A cold lease: a key far from its limit gets the share even without measured demand,
        // so its next requests on this instance are decided without a store call (it is kept
        // for `cold_lease_ttl`, then what is left goes back). Its extra beyond `keep` comes only
        // from above half the burst ([`lease`](Self::lease)), since the count of live instances
        // can be low (a fleet starting together counts itself as it registers). Not for a
        // concurrency limit: slots taken ahead of demand would sit free here while another
        // sidecar's request is refused.
        let concurrency = bucket.rate.algorithm == sluice_core::bucket::Algorithm::Concurrency;
        if cold && charge.info.mode == Mode::Strict && !self.store.is_in_process() && !concurrency {
            want = want.max(share);
        }
        if bucket.rate.algorithm.is_window() {
            // A window's lease lapses when the window ends: ask for no more than this
            // instance can spend before then (its clock's idea of the end), so few leased
            // tokens go unspent at the edge.
            let left = sluice_core::window::until_window_end(&bucket.rate, now) as f64 / 1e6;
            want = want.min(((demand * left).ceil() as u64).max(missing));
            keep = keep.min(want);
        }
        // Short of what the request needs, or of a lease while this instance has been denying
        // requests: starved fleet-wide, so into the key's queue. A lease merely short of its
        // size is no such sign (under its limit a key's tokens can sit in other sidecars'
        // leases for a while); it waits a lease horizon, as before the queue.
        let starved_below = if denying { keep } else { missing };
        let ask = LeaseAsk {
            want,
            least: keep,
            turn_gap,
            starved_below,
            reserve: None,
        };
        self.lease(bucket, charge.store_key(), ask, charge.hits, now)
            .await
    }

    /// How many tokens to ask for: about `lease_horizon` of demand, at least `missing`, at most
    /// `max_lease_fraction` of the burst (unless `missing` itself is more). Exact mode asks for
    /// exactly what is missing (its own request's and those waiting behind it).
    fn lease_size(&self, mode: Mode, burst: u64, missing: u64, demand_per_sec: f64) -> u64 {
        if mode == Mode::Exact {
            return missing;
        }
        let horizon = (demand_per_sec * self.settings.lease_horizon.as_secs_f64()).ceil() as u64;
        horizon.clamp(missing, self.lease_cap(burst, missing))
    }

    /// This instance's share of half the burst among the live instances, at least `missing`:
    /// what a lease may take from below half the burst ([`LeaseAsk::least`]), and a cold
    /// lease's size. Every instance's leases then hold at most half the burst's bottom half, so
    /// when the whole fleet asks at once (requests in step) each instance gets its request's
    /// token while the burst covers the fleet. Without it, 32 sidecars at 30% of a limit of 124
    /// with a burst of 128, each asking for a lease of 7 in the same millisecond, left 14 with
    /// nothing: 18 false denials of 128 (the fleet simulator's property test,
    /// `crates/fleetsim/tests/properties.rs`). A cold lease used to be at least
    /// `max_lease_fraction` of the burst too: at 1 000 sidecars on a burst of 100 a few cold
    /// leases of 5 held the top half of the burst for 30 s, and the simulator saw 12% of
    /// requests at 80% of the limit denied (0 with the share alone).
    fn fleet_share(&self, burst: u64, missing: u64) -> u64 {
        let share = burst / self.store.live_instances().saturating_mul(2).max(1);
        share.max(missing)
    }

    /// The most a lease may hold: `max_lease_fraction` of the burst, or `missing` if more.
    fn lease_cap(&self, burst: u64, missing: u64) -> u64 {
        ((burst as f64 * self.settings.max_lease_fraction).ceil() as u64).max(missing)
    }

    /// Leases `ask.want` tokens for `bucket` (a request needs `needed` of them, 0 for a refill
    /// ahead), of which all but `ask.least` (the lease the key would have had without a cold
    /// lease) only from above half the burst ([`GlobalStore::lease_asking`]). Without that bound
    /// every sidecar of a fleet that counts itself small (it starts with the others) took a
    /// cold lease of half the burst, the burst sat in leases, and requests under the limit were
    /// denied.
    async fn lease(
        &self,
        bucket: &LeaseBucket,
        store_key: &str,
        ask: LeaseAsk,
        needed: u64,
        now: u64,
    ) -> Option<StoreError> {
        // What the fallback owes for what it spent while the store was down is charged first.
        if let Some(e) = self.charge_owed(bucket, store_key).await {
            return Some(e);
        }
        let want = ask.want;
        let reserve = self.reserve_ask(bucket, now);
        let ask = LeaseAsk { reserve, ..ask };
        let started = Instant::now();
        let result = self.store.lease_asking(store_key, bucket.rate, ask).await;
        self.observe(StoreOp::Lease, started, &result);
        let grant = match result {
            Ok(grant) => grant,
            Err(e) => {
                tracing::debug!(store = self.store.name(), error = %e, "lease failed; the rule's fallback applies");
                return Some(e);
            }
        };
        self.metrics.tokens_granted(grant.granted);
        let arrived = self.clock.now_micros();
        let lost_grant = {
            let mut state = bucket.lock();
            state.expire(now);
            state.fill(&bucket.rate, arrived);
            Self::apply_reserved(&mut state, &bucket.rate, reserve, &grant, now, arrived);
            let window = grant.ends_in.map(|ends_in| (grant.window, ends_in));
            // A concurrency limit's fallback bucket holds slots, which never refill: it keeps what
            // it has (emptied at each grant, as a rate's is, it would refuse everything while the
            // store is down).
            let local = state.local;
            state.add_window_grant(grant.granted, grant.remaining, want, now, window);
            if bucket.rate.algorithm == sluice_core::bucket::Algorithm::Concurrency {
                state.local = local;
            }
            // Free slots go back after `lease_ttl` (never kept as a cold lease): others may wait.
            state.cold_lease = grant.remaining >= bucket.rate.burst as f64 / 2.0
                && bucket.rate.algorithm != sluice_core::bucket::Algorithm::Concurrency;
            state.queued = false;
            // What the store counts as this instance's slots against what it believes it holds.
            let lost_grant = if bucket.rate.algorithm == sluice_core::bucket::Algorithm::Concurrency
                && self.store.counts_holders()
            {
                crate::holds::reconcile(&mut state, grant.window)
            } else {
                0
            };
            // Starved: the store gave this caller a turn in the key's queue, or less than it
            // cannot do without. A grant merely short of the lease's size, with no turn, is no
            // such sign: under its limit a key's tokens can sit in other sidecars' leases for a
            // while, and a refill ahead (which needs nothing now) that found the store empty
            // used to make this sidecar deny its next requests for a lease horizon without
            // asking; the fleet simulator's property test found 3 false denials of 210 that way
            // (7 sidecars in step at 47% of the limit, burst 21). The next request asks instead.
            let starved = grant.turn_in.is_some() || grant.granted < ask.starved_below;
            if grant.granted < ask.least && starved {
                // Starved: global demand is above the limit (we got less than `least`, the lease the
                // key would have had without a cold lease; a cold lease coming up short is no sign
                // of contention). Spend what
                // came, then deny locally while tokens refill in the global bucket (up to the
                // burst, so nothing is lost) instead of asking on every request: a remote store is
                // asked again after one lease horizon, or later if the tokens this request needs
                // take longer to refill; the in-process store as soon as they are due. Never later
                // than `lease_ttl`, so a reset, a returned lease or a rate that never refills is
                // seen again soon, and a key can always lease again (no lockout).
                //
                // A sliding window is the exception: nothing accumulates for later (what a window
                // leaves unused is gone when it ends) while the previous window's hits fade out
                // continuously, so a starved sidecar asks again as soon as a whole lease has faded
                // in, at least a tenth of a horizon apart; waiting a horizon for it capped what all
                // sidecars together could take at their lease size per horizon (90% of L with the
                // defaults and 4 sidecars; a quarter horizon 97.4–97.9%, a tenth 99%: RESULTS.md).
                let sliding =
                    bucket.rate.algorithm == sluice_core::bucket::Algorithm::SlidingWindow;
                let missing = if sliding {
                    want.max(1)
                } else {
                    needed.saturating_sub(state.lease).max(1)
                };
                let horizon = micros(self.settings.lease_horizon);
                // A concurrency limit never refills: its slots come back when requests end, at no
                // time a rate can tell, so it asks again after a horizon.
                let never = if bucket.rate.algorithm == sluice_core::bucket::Algorithm::Concurrency
                {
                    horizon
                } else {
                    u64::MAX
                };
                let until = bucket
                    .rate
                    .micros_until_at(grant.remaining, missing as f64, now)
                    .unwrap_or(never);
                let wait = if self.store.is_in_process() {
                    until.max(1)
                } else if sliding {
                    until.max(horizon / 10)
                } else {
                    until.max(horizon)
                };
                // A turn in the key's queue of starved callers: the fleet's starved sidecars ask
                // one at a time, `turn_gap` apart, so the key costs `starved_calls_per_sec` calls
                // a second however many they are. The wait is bounded by twice the queue every
                // live instance would make, so a store that lost count cannot lock a key out.
                let (wait, most) = match grant.turn_in {
                    Some(turn) => {
                        state.queued = true;
                        (wait.max(turn), self.longest_wait(ask.turn_gap))
                    }
                    None => (wait, self.longest_wait_without_turn()),
                };
                state.set_retry_at(now.saturating_add(wait.min(most)));
            }
            lost_grant
        };
        if lost_grant > 0 {
            let started = Instant::now();
            let result = self
                .store
                .release_slots(store_key, bucket.rate, lost_grant)
                .await;
            self.observe(StoreOp::Release, started, &result);
        }
        None
    }

    /// Reads the global bucket for a peek.
    async fn peek(&self, bucket: &LeaseBucket, store_key: &str, now: u64) -> Option<StoreError> {
        let started = Instant::now();
        let result = self.store.peek(store_key, bucket.rate).await;
        self.observe(StoreOp::Peek, started, &result);
        match result {
            Ok(tokens) => {
                bucket.lock().read_global(tokens, now);
                None
            }
            Err(e) => Some(e),
        }
    }

    /// Counts a store call by operation and outcome, with its latency.
    fn observe<T>(&self, op: StoreOp, started: Instant, result: &Result<T, StoreError>) {
        self.metrics.observe_result(op, started, result);
    }

    /// After a decision: sends the post-paid usage of `plan` that is due (see [`Debts`]).
    pub(crate) async fn flush_debts(
        &self,
        plan: &Plan<'_>,
        now: u64,
        deadline: Option<tokio::time::Instant>,
    ) {
        self.debts
            .flush_after(&*self.store, &self.metrics, plan, now, deadline)
            .await;
    }

    /// The periodic flush of queued post-paid usage (all of it when `all`, at shutdown).
    pub(crate) async fn flush_queued_debts(&self, now: u64, all: bool) {
        self.debts
            .flush_queued(&*self.store, &self.metrics, now, all)
            .await;
    }
}

/// The store status of a charge whose store call failed or ran out of time.
fn down(charge: &Charge<'_>) -> StoreStatus {
    StoreStatus::Down {
        fallback: charge.info.fallback,
        instances: 1,
    }
}

/// A duration in microseconds, saturating (config bounds durations, but never wrap here).
fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// An exact-mode request waiting for another request's store call on its key: its hits count in
/// the key's `exact_waiting` (so the next call asks for them too) until it stops waiting, also
/// when its future is dropped (a client gone), so a count never outlives its waiter.
struct ExactWaiter<'a> {
    bucket: &'a LeaseBucket,
    hits: u64,
}

impl<'a> ExactWaiter<'a> {
    fn new(bucket: &'a LeaseBucket, hits: u64) -> Self {
        let mut state = bucket.lock();
        let waiting = &mut state.rare_mut().exact_waiting;
        *waiting = waiting.saturating_add(hits);
        Self { bucket, hits }
    }
}

impl Drop for ExactWaiter<'_> {
    fn drop(&mut self) {
        let mut state = self.bucket.lock();
        let waiting = &mut state.rare_mut().exact_waiting;
        *waiting = waiting.saturating_sub(self.hits);
    }
}
