//! The engine's one test double of a global store: the real in-memory store, forwarded to
//! through a switch (up, down, full), an optional delay per operation (a remote store's round
//! trip) and a call log (calls, calls in flight, tokens granted, per operation and key). Tests
//! that need a slow, failing, full or observed store all use it; none hand-writes a store.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_core::ManualClock;
use sluice_core::bucket::Rate;

use crate::memory::MemoryStore;
use crate::store::{GlobalStore, LeaseAsk, LeaseGrant, StoreError, StoreFuture};

/// What the store does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Mode {
    /// Answers, from the in-memory store.
    Up = 0,
    /// Fails as an unreachable Redis would (and reports itself degraded).
    Down = 1,
    /// Has no room for any key (`StoreError::Full`).
    Full = 2,
    /// Fails as a stalled Redis does once the store's own timeout fires (`StoreError::Timeout`:
    /// whether the call was applied is unknown to the caller).
    TimedOut = 3,
}

/// A store operation, as the log counts them (one per [`GlobalStore`] call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Call {
    Lease,
    Charge,
    Release,
    Close,
    Peek,
    Reset,
    Demand,
}

/// What the log knows of one operation (on one key, or on all of them).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tally {
    /// Calls made (counted when made, before any delay).
    pub(crate) calls: u64,
    /// Tokens granted by the calls that answered (leases and charges).
    pub(crate) granted: u128,
    /// Calls answering now.
    pub(crate) in_flight: usize,
    /// The most calls that were answering at once.
    pub(crate) most_in_flight: usize,
}

/// The in-memory store (real) behind a switch, a delay and a log. While not [`Mode::Up`] the
/// store is not touched: the in-memory store's calls act when made, not when awaited. It
/// reports `instances` live sidecars (for `local_share`).
pub(crate) struct Forwarding {
    pub(crate) inner: Arc<MemoryStore<ManualClock>>,
    mode: AtomicU8,
    instances: u64,
    /// Whether it says it is in process (as the embedded store) rather than remote (as Redis).
    in_process: AtomicBool,
    /// The time an operation's answer takes (none: at once).
    delays: Mutex<HashMap<Call, Duration>>,
    /// What it reports as its decision timeout (a remote store's bound on waiting).
    timeout: Mutex<Option<Duration>>,
    /// Per operation, per key (`None`: every key).
    log: Mutex<HashMap<(Call, Option<String>), Tally>>,
    /// Resets pushed to every engine on the store (its own included), as Redis pub/sub does.
    bus: tokio::sync::broadcast::Sender<crate::store::PushedReset>,
}

impl Forwarding {
    /// A store over a fresh in-memory store on `clock`, remote as far as the engine can tell.
    pub(crate) fn new(clock: &ManualClock, mode: Mode, instances: u64) -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryStore::new(clock.clone()),
            mode: AtomicU8::new(mode as u8),
            instances,
            in_process: AtomicBool::new(false),
            delays: Mutex::default(),
            timeout: Mutex::default(),
            log: Mutex::default(),
            bus: tokio::sync::broadcast::channel(64).0,
        })
    }

    /// Up, one sidecar: the in-memory store, observed.
    pub(crate) fn up(clock: &ManualClock) -> Arc<Self> {
        Self::new(clock, Mode::Up, 1)
    }

    pub(crate) fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// Every later `op` call answers after `delay` (tokio time).
    pub(crate) fn delay(&self, op: Call, delay: Duration) {
        lock(&self.delays).insert(op, delay);
    }

    /// Reports `timeout` as the store's decision timeout.
    pub(crate) fn set_timeout(&self, timeout: Option<Duration>) {
        *lock(&self.timeout) = timeout;
    }

    /// Says it is in process (the engine then leases as on the embedded store) or remote (the
    /// default: as on Redis).
    pub(crate) fn set_in_process(&self, in_process: bool) {
        self.in_process.store(in_process, Ordering::SeqCst);
    }

    /// What the log knows of `op` over every key.
    pub(crate) fn tally(&self, op: Call) -> Tally {
        lock(&self.log)
            .get(&(op, None))
            .copied()
            .unwrap_or_default()
    }

    /// The most `op` calls on any one key that were answering at once.
    pub(crate) fn most_in_flight_per_key(&self, op: Call) -> usize {
        self.per_key(op)
            .values()
            .map(|t| t.most_in_flight)
            .max()
            .unwrap_or(0)
    }

    /// What the log knows of `op`, key by key.
    pub(crate) fn per_key(&self, op: Call) -> BTreeMap<String, Tally> {
        lock(&self.log)
            .iter()
            .filter(|((o, _), _)| *o == op)
            .filter_map(|((_, key), t)| Some((key.clone()?, *t)))
            .collect()
    }

    fn mode(&self) -> u8 {
        self.mode.load(Ordering::SeqCst)
    }

    /// Applies `f` to both tallies of `op`: every key's, and `key`'s.
    fn note(&self, op: Call, key: &str, f: impl Fn(&mut Tally)) {
        let mut log = lock(&self.log);
        f(log.entry((op, None)).or_default());
        f(log.entry((op, Some(key.to_string()))).or_default());
    }

    fn call<'a, T: Granted + Send + 'a>(
        &'a self,
        op: Call,
        key: &'a str,
        call: impl FnOnce(&'a MemoryStore<ManualClock>) -> StoreFuture<'a, T> + Send + 'a,
    ) -> StoreFuture<'a, T> {
        self.note(op, key, |t| t.calls += 1);
        match self.mode() {
            m if m == Mode::Up as u8 => {}
            m if m == Mode::Down as u8 => {
                return Box::pin(async {
                    Err(StoreError::Unavailable("connection refused".into()))
                });
            }
            m if m == Mode::TimedOut as u8 => {
                return Box::pin(async { Err(StoreError::Timeout) });
            }
            _ => return Box::pin(async { Err(StoreError::Full) }),
        }
        let delay = lock(&self.delays).get(&op).copied();
        Box::pin(async move {
            self.note(op, key, |t| {
                t.in_flight += 1;
                t.most_in_flight = t.most_in_flight.max(t.in_flight);
            });
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            let result = call(&self.inner).await;
            let granted = result.as_ref().map_or(0, Granted::granted);
            self.note(op, key, |t| {
                t.in_flight -= 1;
                t.granted += u128::from(granted);
            });
            result
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Tokens an answer granted (for the log).
trait Granted {
    fn granted(&self) -> u64 {
        0
    }
}
impl Granted for LeaseGrant {
    fn granted(&self) -> u64 {
        self.granted
    }
}
impl Granted for () {}
impl Granted for f64 {}
impl Granted for Vec<u64> {}

impl GlobalStore for Forwarding {
    fn lease_asking<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        ask: LeaseAsk,
    ) -> StoreFuture<'a, LeaseGrant> {
        self.call(Call::Lease, key, move |s| s.lease_asking(key, rate, ask))
    }
    fn charge<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        max_debt: u64,
    ) -> StoreFuture<'a, LeaseGrant> {
        self.call(Call::Charge, key, move |s| {
            s.charge(key, rate, tokens, max_debt)
        })
    }
    fn release<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        window: u64,
    ) -> StoreFuture<'a, ()> {
        // A failed return loses tokens: stricter, never looser.
        self.call(Call::Release, key, move |s| {
            s.release(key, rate, tokens, window)
        })
    }
    fn close_window<'a>(&'a self, key: &'a str, rate: Rate, window: u64) -> StoreFuture<'a, ()> {
        self.call(Call::Close, key, move |s| s.close_window(key, rate, window))
    }
    fn peek<'a>(&'a self, key: &'a str, rate: Rate) -> StoreFuture<'a, f64> {
        self.call(Call::Peek, key, move |s| s.peek(key, rate))
    }
    fn reset<'a>(&'a self, key: &'a str, local: &'a [u8]) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.call(Call::Reset, key, move |s| s.reset(key, local))
                .await?;
            // No receiver (no engine listening) is no error.
            let _ = self.bus.send(local.into());
            Ok(())
        })
    }
    fn pushed_resets(&self) -> Option<tokio::sync::broadcast::Receiver<crate::store::PushedReset>> {
        Some(self.bus.subscribe())
    }
    fn add_denied<'a>(&'a self, slot: u64, counts: &'a [(String, u64)]) -> StoreFuture<'a, ()> {
        self.inner.add_denied(slot, counts)
    }
    fn top_denied<'a>(&'a self, from: u64, to: u64) -> StoreFuture<'a, Vec<(String, u64)>> {
        self.inner.top_denied(from, to)
    }
    fn demand<'a>(
        &'a self,
        key: &'a str,
        client: u64,
        milli_rps: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, Vec<u64>> {
        self.call(Call::Demand, key, move |s| {
            s.demand(key, client, milli_rps, ttl)
        })
    }
    fn is_in_process(&self) -> bool {
        self.in_process.load(Ordering::SeqCst)
    }
    fn name(&self) -> &'static str {
        "forwarding"
    }
    fn degraded(&self) -> bool {
        self.mode() == Mode::Down as u8 || self.mode() == Mode::TimedOut as u8
    }
    fn live_instances(&self) -> u64 {
        self.instances
    }
    fn decision_timeout(&self) -> Option<Duration> {
        *lock(&self.timeout)
    }
}

/// The log lines written while it is a thread's default subscriber
/// (`tracing::subscriber::set_default`), each as its message and its
/// `unlogged_since_last_line` (0 if it has none): what an operator's log would hold.
#[derive(Debug, Clone, Default)]
pub(crate) struct LogLines(Arc<Mutex<Vec<(String, u64)>>>);

impl LogLines {
    /// The lines whose message starts with `message`, each with what it says it held back.
    pub(crate) fn starting_with(&self, message: &str) -> Vec<u64> {
        lock(&self.0)
            .iter()
            .filter(|(m, _)| m.starts_with(message))
            .map(|(_, held_back)| *held_back)
            .collect()
    }
}

/// One event's message and count, as it is read field by field.
#[derive(Default)]
struct Line(String, u64);

impl tracing::field::Visit for Line {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        if field.name() == "unlogged_since_last_line" {
            self.1 = value;
        }
    }
}

impl tracing::Subscriber for LogLines {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = Line::default();
        event.record(&mut line);
        lock(&self.0).push((line.0, line.1));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
