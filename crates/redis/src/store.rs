//! [`RedisStore`]: global buckets in Redis, with a circuit breaker, a probe and a heartbeat.
//!
//! # Layout
//! - this file: the store, its start and shutdown, and its two background tasks (the breaker's
//!   probe and the instance heartbeat).
//! - `calls`: every script call, alone or batched, through the breaker and the timeout (and the
//!   explicit-`now` calls of tests and the conformance suite).
//! - `global`: the [`GlobalStore`] implementation on those calls.
//! - `errors`: what a Redis error means for the engine and the breaker, and what of it may be
//!   printed.
//! - `bus`: resets pushed to and from the other instances sharing the Redis (pub/sub).
//! - `top`: `quota top`'s fleet-wide counts of denied hits.
//! - `metrics`: [`RedisMetrics`].

mod bus;
mod calls;
mod errors;
mod global;
mod metrics;
mod top;

use std::borrow::Cow;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use sluice_core::config::RedisSettings;
use sluice_engine::{GlobalStore, StoreError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::batch::{Batcher, Waits};
use crate::breaker::Breaker;
use crate::connection::{self, Conn};
use crate::scripts::HEARTBEAT;
use errors::safe;
pub use metrics::RedisMetrics;

/// The key of the live-instance set (one key, so it works the same on a cluster). Scored by
/// deadline; the set before it (`sluice:{instances}`, scored by last heartbeat) is another key,
/// so a rolling upgrade's two versions each count their own kind instead of trimming the other's.
const INSTANCES_KEY: &str = "sluice:{instances}:until";

/// `key` as this fleet writes it: after `redis.key_prefix`, if one is set (checked when the
/// config loads: no `{` or `}`, so a bucket's hash tag still picks its cluster slot).
fn prefixed<'k>(settings: &RedisSettings, key: &'k str) -> Cow<'k, str> {
    match &settings.key_prefix {
        Some(prefix) => Cow::Owned(format!("{prefix}{key}")),
        None => Cow::Borrowed(key),
    }
}

/// Heartbeats a second a whole fleet sends: past `heartbeat_interval × this` instances, each
/// beats every `live / this` seconds instead (told by `heartbeat.lua`), so a fleet of 1 000
/// costs Redis 20 calls a second, not 1 000. The price: the live count notices an instance
/// gone up to three of those intervals late (150 s at 1 000 instances).
const FLEET_HEARTBEATS_PER_SEC: u64 = 20;

/// The gap after an instance's first heartbeat; it doubles up to the configured interval
/// ([`heartbeat_loop`]).
const FIRST_BEAT_GAP: Duration = Duration::from_millis(100);

/// The longest wait between two heartbeats of one instance, however large the fleet.
const LONGEST_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(60);

/// Global buckets in Redis or Redis Cluster.
pub struct RedisStore {
    /// `None` until a cluster connection is established (standalone connects lazily). Shared
    /// with the batching task.
    conn: Arc<ArcSwapOption<Conn>>,
    /// Lease and release calls of concurrent decisions share round trips ([`crate::batch`]).
    batcher: Batcher,
    breaker: Breaker,
    settings: RedisSettings,
    cluster: bool,
    instance_id: String,
    /// This instance as a holder of concurrency slots (`bucket.lua`'s `holders`): a number from
    /// `instance_id`, so a restarted process is a new holder and the old one's slots lapse.
    holder: u64,
    live: AtomicU64,
    metrics: RedisMetrics,
    /// Log lines a fault or a client can repeat, each at most once a second: an error of one
    /// key (a hot corrupt key fails every call), the breaker opening and Redis answering again
    /// (a flapping Redis), a reset not pushed to the others (an operator's resets in a loop).
    logs: Logs,
    /// Resets other instances pushed, for the engine ([`bus`]).
    pushed: tokio::sync::broadcast::Sender<sluice_engine::PushedReset>,
    /// The probe and heartbeat tasks: [`shutdown`](RedisStore::shutdown) stops and awaits them.
    tasks: TaskTracker,
    stop: CancellationToken,
}

/// The store's log lines that a fault or a client can repeat ([`sluice_core::SampledLine`]).
#[derive(Debug, Default)]
struct Logs {
    /// A call failed on its key's data.
    key_error: sluice_core::SampledLine,
    /// The circuit breaker opened.
    breaker_open: sluice_core::SampledLine,
    /// The probe found Redis answering again.
    answers_again: sluice_core::SampledLine,
    /// A reset was not pushed to the other instances.
    reset_not_pushed: sluice_core::SampledLine,
}

impl std::fmt::Debug for RedisStore {
    // Settings hold URLs, which may hold passwords: never print them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("cluster", &self.cluster)
            .field("breaker_closed", &self.breaker.is_closed())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Creates the store and starts its probe and heartbeat tasks (call inside a Tokio runtime).
    /// It does not wait for Redis: a store that cannot connect yet starts degraded.
    pub fn start(settings: RedisSettings, metrics: RedisMetrics) -> Result<Arc<Self>, StoreError> {
        let cluster = connection::is_cluster(&settings);
        let (conn, breaker) = if cluster {
            (None, Breaker::new_open(settings.breaker_failures))
        } else {
            let conn =
                connection::standalone(&settings).map_err(|e| StoreError::Protocol(safe(&e)))?;
            (
                Some(Arc::new(conn)),
                Breaker::new(settings.breaker_failures),
            )
        };
        // Unique per store, also with several in one process (tests run fleets in one).
        static STORES: AtomicU64 = AtomicU64::new(0);
        let id = format!(
            "{}-{}-{:016x}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "sluice".into()),
            std::process::id(),
            foldhash::fast::RandomState::default().hash_one(std::process::id()),
            STORES.fetch_add(1, Ordering::Relaxed)
        );
        let conn = Arc::new(ArcSwapOption::new(conn));
        let (tasks, stop) = (TaskTracker::new(), CancellationToken::new());
        let batcher = Batcher::start(
            Arc::clone(&conn),
            Waits {
                linger: settings.batch_linger.0,
                min_wait: settings.batch_min_wait.map(|d| d.0),
                max: settings.batch_max.max(1) as usize,
            },
            (metrics.round_trips.clone(), metrics.batched_calls.clone()),
            &tasks,
            stop.clone(),
        );
        let store = Arc::new(Self {
            conn,
            batcher,
            breaker,
            settings,
            cluster,
            holder: sluice_core::hash::fnv1a_of(id.as_bytes()),
            instance_id: id,
            live: AtomicU64::new(1),
            metrics,
            logs: Logs::default(),
            // Resets are an operator's act: a listener 64 behind has stalled, and skips.
            pushed: tokio::sync::broadcast::channel(64).0,
            tasks,
            stop,
        });
        store
            .metrics
            .degraded
            .set(i64::from(!store.breaker.is_closed()));
        store.spawn_until_stopped(first_contact(Arc::downgrade(&store)));
        store.spawn_until_stopped(probe_loop(Arc::downgrade(&store)));
        store.spawn_until_stopped(heartbeat_loop(Arc::downgrade(&store)));
        if store.settings.push_resets {
            store.spawn_until_stopped(bus::listen(
                store.settings.clone(),
                store.instance_id.clone(),
                store.pushed.clone(),
                store.metrics.clone(),
            ));
        }
        Ok(store)
    }

    /// `key` as stored: after `redis.key_prefix`, if one is set. Every key this store sends
    /// goes through it (the engine's store keys, the live-instance set, `quota top`'s sets),
    /// and the reset channel's name too.
    pub(crate) fn at<'k>(&self, key: &'k str) -> Cow<'k, str> {
        prefixed(&self.settings, key)
    }

    /// Runs `task` on the store's tracker until [`shutdown`](Self::shutdown).
    fn spawn_until_stopped(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let stop = self.stop.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = task => {}
            }
        });
    }

    /// At shutdown, after the engine returned its leases: stops the probe and heartbeat tasks
    /// (waiting for them), then removes this instance from the live set.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        let _ = self.heartbeat(true).await;
    }

    /// The connection; a cluster's is made on first use (a standalone one connects by itself)
    /// and kept for every call.
    async fn connection(&self) -> Result<Arc<Conn>, redis::RedisError> {
        if let Some(conn) = self.conn.load_full() {
            return Ok(conn);
        }
        let conn = Arc::new(connection::cluster(&self.settings).await?);
        self.conn.store(Some(Arc::clone(&conn)));
        Ok(conn)
    }

    /// Announces this instance (or, `leave`, removes it); returns the live instances and how
    /// long to wait before the next heartbeat.
    async fn heartbeat(&self, leave: bool) -> Result<(u64, Duration), StoreError> {
        let interval_ms = self.settings.heartbeat_interval.0.as_millis().max(1) as u64;
        let mut inv = HEARTBEAT.prepare_invoke();
        inv.key(&*self.at(INSTANCES_KEY))
            .arg(&self.instance_id)
            .arg(interval_ms)
            .arg(if leave { "leave" } else { "" })
            .arg(FLEET_HEARTBEATS_PER_SEC);
        let (live, next_ms): (u64, u64) = self.call(&inv).await?;
        // Never sooner than configured, never later than the longest wait (or the configured
        // interval, where an operator set a longer one).
        let configured = self.settings.heartbeat_interval.0;
        let next = Duration::from_millis(next_ms)
            .min(LONGEST_HEARTBEAT_INTERVAL)
            .max(configured);
        Ok((live, next))
    }
}

/// At start, says at once whether Redis answers, naming where it was asked and, if it did not,
/// the error (the OS's, such as `Connection refused`). Unanswered, the breaker opens now: rules
/// use their fallback from the first decision instead of after `breaker_failures` timeouts, and
/// the probe takes over. A cluster's connection, made here, is kept for every call.
async fn first_contact(store: Weak<RedisStore>) {
    let Some(s) = store.upgrade() else { return };
    let at = connection::endpoints(&s.settings);
    let wait = s.settings.connect_timeout.0 + s.settings.timeout.0;
    // A PING slower than `timeout` on a busy machine is asked again until `wait` is up: only no
    // connection, or no answer at all, opens the breaker.
    let answer = tokio::time::timeout(wait, async {
        loop {
            match s.connection().await?.ping().await {
                Err(e) if e.is_timeout() => tokio::time::sleep(Duration::from_millis(20)).await,
                answer => return answer,
            }
        }
    })
    .await;
    let why = match answer {
        Ok(Ok(())) => {
            // A cluster's breaker starts open (no connection yet): this is its connection.
            s.breaker.close();
            s.metrics.degraded.set(0);
            tracing::info!(redis = %at, store = s.name(), "Redis answers");
            return;
        }
        Ok(Err(e)) => connection::explain(&e, &s.settings),
        Err(_) => format!("no answer within {wait:?} (connect_timeout + timeout)"),
    };
    s.breaker.open();
    s.metrics.degraded.set(1);
    tracing::warn!(
        redis = %at,
        error = %why,
        "Redis is not reachable: sluice runs degraded, each rule's fallback applies, until it answers (checked every probe_interval)"
    );
}

/// While the breaker is open: connect if needed, PING, close the breaker when Redis answers.
async fn probe_loop(store: Weak<RedisStore>) {
    let interval = match store.upgrade() {
        Some(s) => s.settings.probe_interval.0,
        None => return,
    };
    loop {
        tokio::time::sleep(interval).await;
        let Some(store) = store.upgrade() else { return };
        if store.breaker.is_closed() {
            store.metrics.degraded.set(0);
            continue;
        }
        store.metrics.degraded.set(1);
        let conn = match store.connection().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::debug!(error = %safe(&e), "Redis Cluster not reachable yet");
                continue;
            }
        };
        let timeout = store.settings.timeout.0.max(Duration::from_millis(100));
        if let Ok(Ok(())) = tokio::time::timeout(timeout, conn.ping()).await {
            store.breaker.close();
            store.metrics.degraded.set(0);
            if let Some(unlogged) = store.logs.answers_again.sample_now() {
                tracing::info!(
                    store = store.name(),
                    unlogged_since_last_line = unlogged,
                    "Redis answers again: global enforcement resumed (sampled: at most one line a second)"
                );
            }
        }
    }
}

/// Announces this instance and reads how many are live, as often as the store says (the
/// configured interval, longer in a large fleet: [`FLEET_HEARTBEATS_PER_SEC`]). The first beats
/// come quickly ([`FIRST_BEAT_GAP`], doubling up to the configured interval: four more calls
/// per start with the default 1 s): a fleet that starts together counts itself as it
/// registers, and an instance that read 3 live while 32 were starting sized its share of the
/// burst (`fleet_share`) for 3 until its next beat. 32 sidecars in step at 80% of the limit,
/// with traffic from the moment each reached Redis, denied 24 of 800 requests in 10 s that way;
/// with these beats, none (`accuracy --cold-count`).
async fn heartbeat_loop(store: Weak<RedisStore>) {
    let configured = match store.upgrade() {
        Some(s) => s.settings.heartbeat_interval.0,
        None => return,
    };
    let mut interval = configured;
    let mut quick = FIRST_BEAT_GAP;
    loop {
        if let Some(s) = store.upgrade() {
            if s.breaker.is_closed()
                && let Ok((n, next)) = s.heartbeat(false).await
            {
                s.live.store(n.max(1), Ordering::Relaxed);
                s.metrics.live_instances.set(n as i64);
                interval = next;
            }
        } else {
            return;
        }
        let wait = if quick < configured {
            quick = quick.saturating_mul(2);
            quick / 2
        } else {
            interval
        };
        tokio::time::sleep(wait).await;
    }
}
