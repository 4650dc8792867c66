//! The engine's side of the global store: one lease call per key at a time, sized to demand, a
//! background refill before a busy key's lease runs dry, and leases handed back. Every store call
//! of the engine is made here; every background task is owned by [`Leaser::tasks`]. What a call
//! asks for and what its answer does to the key is [`Policy`]'s, a synchronous step with no
//! store I/O (`policy.rs`, `grant.rs`); here are the calls around it.

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
mod grant;
mod outage;
mod policy;
mod rates;
mod turns;
mod waiting;

use policy::Next;
pub(crate) use policy::Policy;
use waiting::{Waiter, waited_for_a_short_answer};

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
            debts: Debts::new(&settings, Arc::clone(&clock)),
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
        // (until the deadline) and then spend from the lease it brought. In exact mode, and
        // in strict mode while the bucket showed slack at the last answer (not for a
        // concurrency limit), a waiter says what it needs, so the next call asks for every
        // waiter at once ([`waiting::counts`]).
        let waiting = Waiter::counted(&bucket, charge.hits, charge.info.mode);
        let answered_before = bucket.lock().global_read_at;
        let flight = until(deadline, self.flight(&bucket).lock()).await;
        drop(waiting);
        let Some(_flight) = flight else {
            charge.store = down(charge);
            return;
        };
        // The call is timed from when it is sent, not from when its request came: a starved
        // key's next ask (`retry_at`) is counted from it. Counted from a request that had
        // waited for the calls before it, the wait was over before it began, and every request
        // queued behind the lock made a call of its own in turn: a lone sidecar at 4× a burst
        // of 1 (324/s, a store call 2 ms away) made 500 calls a second, a fifth of its requests
        // waited out the store's timeout, and the calls it cut off lost their tokens (64% of
        // `B + L·t` admitted; 70% now, with no timeout; simulated).
        let locked = self.clock.now_micros().max(now);
        if self.covered(&bucket, charge.info.mode, charge.hits, now)
            || waited_for_a_short_answer(&bucket, charge, answered_before, now, locked)
        {
            return;
        }
        let now = locked;
        let call = async {
            if charge.hits == 0 {
                self.peek(&bucket, charge.store_key(), now).await
            } else {
                self.lease_for(charge, now).await
            }
        };
        // A call cut off here may still take tokens in the store: they are lost for a while
        // (stricter, never looser), as after any store timeout. A lease call's stock of rate
        // fills on (`RateLease::failed`), as after any failed one (a peek reserves nothing).
        let failed = match until(deadline, call).await {
            Some(failed) => failed,
            None => {
                if charge.hits > 0 {
                    bucket.lock().rate_lease_failed();
                }
                Some(StoreError::Timeout)
            }
        };
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
    /// refill or its turn (but for one call before the turn,
    /// [`LeaseState::early_call_due`](crate::ledger::LeaseState::early_call_due)),
    /// or a peek already knows the global level.
    fn covered(&self, bucket: &LeaseBucket, mode: Mode, hits: u64, now: u64) -> bool {
        let mut state = bucket.lock();
        state.expire(now);
        state.fill(&bucket.rate, now);
        if hits == 0 {
            // A reading older than a lease horizon is read again (others spend meanwhile).
            state.global_known()
                && now.saturating_sub(state.global_read_at) < micros(self.settings.lease_horizon)
        } else {
            let waits = now < state.retry_at() && !state.early_call_due(now);
            state.lease >= hits || (mode == Mode::Strict && waits)
        }
    }

    /// Leases what `charge` is missing, as the policy sizes it ([`Policy::next`]).
    async fn lease_for(&self, charge: &Charge<'_>, now: u64) -> Option<StoreError> {
        let bucket = &charge.bucket;
        let policy = self.policy();
        let next = policy.next(
            &mut bucket.lock(),
            &bucket.rate,
            charge.info.mode,
            charge.hits,
            now,
        );
        match next {
            Next::ByDemand(turn) => self.lease_by_demand(&policy, charge, turn, now).await,
            Next::Ask(ask) => {
                self.lease(&policy, bucket, charge.store_key(), ask, charge.hits, now)
                    .await
            }
            Next::Early(ask) => {
                let failed = self
                    .lease(&policy, bucket, charge.store_key(), ask, charge.hits, now)
                    .await;
                Policy::after_early(&mut bucket.lock());
                failed
            }
        }
    }

    /// The lease policy over what the store knows of the fleet now ([`policy`]): read once
    /// per store call, so its ask and what its answer does to the key see the same fleet.
    pub(crate) fn policy(&self) -> Policy<'_> {
        Policy {
            settings: &self.settings,
            live: self.store.live_instances(),
            in_process: self.store.is_in_process(),
            counts_holders: self.store.counts_holders(),
        }
    }

    /// Leases `ask.want` tokens for `bucket` (a request needs `needed` of them, 0 for a refill
    /// ahead), of which all but `ask.least` (the lease the key would have had without a cold
    /// lease) only from above half the burst ([`GlobalStore::lease_asking`]). Without that bound
    /// every sidecar of a fleet that counts itself small (it starts with the others) took a
    /// cold lease of half the burst, the burst sat in leases, and requests under the limit were
    /// denied. `policy` sized `ask` and applies the answer.
    async fn lease(
        &self,
        policy: &Policy<'_>,
        bucket: &LeaseBucket,
        store_key: &str,
        ask: LeaseAsk,
        needed: u64,
        now: u64,
    ) -> Option<StoreError> {
        // What the fallback owes for what it spent while the store was down is charged first.
        // Failed, it is a failed lease call to the stock too (`RateLease::failed`): else a key
        // still owing when the store went down again kept restarting its fallback's local
        // bucket at each fill, and its fallback admitted next to nothing.
        if let Some(e) = self.charge_owed(bucket, store_key).await {
            bucket.lock().rate_lease_failed();
            return Some(e);
        }
        let reserve = self.reserve_ask(policy, bucket, now);
        let ask = LeaseAsk { reserve, ..ask };
        let started = Instant::now();
        let result = self.store.lease_asking(store_key, bucket.rate, ask).await;
        self.observe(StoreOp::Lease, started, &result);
        let grant = match result {
            Ok(grant) => grant,
            Err(e) => {
                tracing::debug!(store = self.store.name(), error = %e, "lease failed; the rule's fallback applies");
                bucket.lock().rate_lease_failed();
                return Some(e);
            }
        };
        self.metrics.tokens_granted(grant.granted);
        let arrived = self.clock.now_micros();
        let lost_grant = policy.apply(
            &mut bucket.lock(),
            &bucket.rate,
            &ask,
            &grant,
            needed,
            now,
            arrived,
        );
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
