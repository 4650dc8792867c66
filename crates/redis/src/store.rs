//! [`RedisStore`]: global buckets in Redis, with a circuit breaker, a probe and a heartbeat.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use prometheus::{IntCounter, IntGauge, Registry};
use redis::RedisError;
use sluice_core::bucket::Rate;
use sluice_core::config::RedisSettings;
use sluice_engine::store::StoreFuture;
use sluice_engine::{GlobalStore, LeaseGrant, StoreError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::batch::{Batcher, NotBatched, Waits};
use crate::breaker::Breaker;
use crate::connection::{self, Conn};
use crate::scripts::{self, CHARGE, CLOSE, DEMAND, HEARTBEAT, LEASE, PEEK, RELEASE};

/// The key of the live-instance set (one key, so it works the same on a cluster).
const INSTANCES_KEY: &str = "sluice:{instances}";

/// Redis store metrics.
#[derive(Debug, Clone)]
pub struct RedisMetrics {
    /// `sluice_degraded`: 1 while the store is unavailable and rules use their fallback.
    pub degraded: IntGauge,
    /// `sluice_live_instances`: sidecars seen by the heartbeat (for `local_share`).
    pub live_instances: IntGauge,
    /// `sluice_redis_breaker_opens_total`: times the circuit breaker opened.
    pub breaker_opens: IntCounter,
    /// `sluice_redis_round_trips_total`: requests sent to Redis (a batch of calls is one).
    pub round_trips: IntCounter,
    /// `sluice_redis_batched_calls_total`: script calls sent in batches.
    pub batched_calls: IntCounter,
}

impl RedisMetrics {
    /// Creates and registers the series.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self {
            degraded: IntGauge::new(
                "sluice_degraded",
                "1 while the global store is unavailable (fallbacks apply)",
            )?,
            live_instances: IntGauge::new(
                "sluice_live_instances",
                "sluice instances sharing the global store",
            )?,
            breaker_opens: IntCounter::new(
                "sluice_redis_breaker_opens_total",
                "Times the Redis circuit breaker opened",
            )?,
            round_trips: IntCounter::new(
                "sluice_redis_round_trips_total",
                "Requests sent to Redis: a single call, or a batch of calls to one node",
            )?,
            batched_calls: IntCounter::new(
                "sluice_redis_batched_calls_total",
                "Script calls sent to Redis in batches (with round trips: the mean batch size)",
            )?,
        };
        registry.register(Box::new(m.degraded.clone()))?;
        registry.register(Box::new(m.live_instances.clone()))?;
        registry.register(Box::new(m.breaker_opens.clone()))?;
        registry.register(Box::new(m.round_trips.clone()))?;
        registry.register(Box::new(m.batched_calls.clone()))?;
        Ok(m)
    }

    /// Metrics in a private registry (tests).
    pub fn unregistered() -> Self {
        Self::register(&Registry::new()).unwrap_or_else(|e| unreachable!("fresh registry: {e}"))
    }
}

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
    live: AtomicU64,
    metrics: RedisMetrics,
    /// The probe and heartbeat tasks: [`shutdown`](RedisStore::shutdown) stops and awaits them.
    tasks: TaskTracker,
    stop: CancellationToken,
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
        let id = format!(
            "{}-{}-{:016x}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "sluice".into()),
            std::process::id(),
            foldhash::fast::RandomState::default().hash_one(std::process::id())
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
            instance_id: id,
            live: AtomicU64::new(1),
            metrics,
            tasks,
            stop,
        });
        store
            .metrics
            .degraded
            .set(i64::from(!store.breaker.is_closed()));
        store.spawn_until_stopped(probe_loop(Arc::downgrade(&store)));
        store.spawn_until_stopped(heartbeat_loop(Arc::downgrade(&store)));
        Ok(store)
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

    /// Lease with an explicit `now` (tests and the conformance suite); `None` uses Redis TIME.
    pub async fn lease_at(
        &self,
        key: &str,
        rate: Rate,
        want: u64,
        now: Option<u64>,
    ) -> Result<LeaseGrant, StoreError> {
        self.grant(&scripts::bucket_call(&LEASE, key, &rate, now, &[want]))
            .await
    }

    /// Charge with an explicit `now` (tests and the conformance suite); `None` uses Redis TIME.
    pub async fn charge_at(
        &self,
        key: &str,
        rate: Rate,
        tokens: u64,
        max_debt: u64,
        now: Option<u64>,
    ) -> Result<LeaseGrant, StoreError> {
        self.grant(&scripts::bucket_call(
            &CHARGE,
            key,
            &rate,
            now,
            &[tokens, max_debt],
        ))
        .await
    }

    /// Runs a script that answers `{tokens, remaining_millitokens, window, ends_in}` (lease,
    /// charge; `ends_in` is -1 for a token bucket, whose tokens never lapse).
    async fn grant(&self, inv: &redis::ScriptInvocation<'_>) -> Result<LeaseGrant, StoreError> {
        self.call(inv).await.map(grant_of)
    }

    /// Release (into `window`, the grant's) with an explicit `now`; returns the tokens left.
    pub async fn release_at(
        &self,
        key: &str,
        rate: Rate,
        tokens: u64,
        window: u64,
        now: Option<u64>,
    ) -> Result<f64, StoreError> {
        let inv = scripts::bucket_call(&RELEASE, key, &rate, now, &[tokens, window]);
        let milli: i64 = self.call(&inv).await?;
        Ok(milli as f64 / 1000.0)
    }

    /// Close window `window` of a fixed window with an explicit `now`; returns the tokens left.
    pub async fn close_at(
        &self,
        key: &str,
        rate: Rate,
        window: u64,
        now: Option<u64>,
    ) -> Result<f64, StoreError> {
        let inv = scripts::bucket_call(&CLOSE, key, &rate, now, &[window]);
        let milli: i64 = self.call(&inv).await?;
        Ok(milli as f64 / 1000.0)
    }

    /// Peek with an explicit `now`.
    pub async fn peek_at(
        &self,
        key: &str,
        rate: Rate,
        now: Option<u64>,
    ) -> Result<f64, StoreError> {
        let inv = scripts::bucket_call(&PEEK, key, &rate, now, &[]);
        let milli: i64 = self.call(&inv).await?;
        Ok(milli as f64 / 1000.0)
    }

    /// At shutdown, after the engine returned its leases: stops the probe and heartbeat tasks
    /// (waiting for them), then removes this instance from the live set.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        let _ = self.heartbeat(true).await;
    }

    async fn heartbeat(&self, leave: bool) -> Result<u64, StoreError> {
        let ttl_ms = (self.settings.heartbeat_interval.0 * 3).as_millis() as u64;
        let mut inv = HEARTBEAT.prepare_invoke();
        inv.key(INSTANCES_KEY)
            .arg(&self.instance_id)
            .arg(ttl_ms)
            .arg(if leave { "leave" } else { "" });
        self.call(&inv).await
    }

    /// One script call: refused at once while the breaker is open, bounded by the timeout.
    async fn call<T: redis::FromRedisValue>(
        &self,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        if !self.breaker.is_closed() {
            return Err(StoreError::Unavailable("circuit open".into()));
        }
        let Some(conn) = self.conn.load_full() else {
            return Err(StoreError::Unavailable("not connected".into()));
        };
        self.metrics.round_trips.inc();
        let answer = tokio::time::timeout(self.settings.timeout.0, conn.invoke(inv)).await;
        self.settle(answer.map_err(|_| StoreError::Timeout))
    }

    /// A bucket script call on `key` without an explicit `now`, sent in a batch with other keys'
    /// calls ([`crate::batch`]). A call the batch could not run (queue full, NOSCRIPT, MOVED, ASK,
    /// TRYAGAIN) is sent again alone through [`call`](Self::call), which loads scripts and
    /// follows redirections. The whole wait, batch and retry, is bounded by one timeout each.
    async fn batched<T: redis::FromRedisValue>(
        &self,
        script: &'static redis::Script,
        key: &str,
        rate: &Rate,
        args: &[u64],
    ) -> Result<T, StoreError> {
        if !self.breaker.is_closed() {
            return Err(StoreError::Unavailable("circuit open".into()));
        }
        let cmd = scripts::bucket_cmd(script, key, rate, args);
        let alone = || scripts::bucket_call(script, key, rate, None, args);
        let answer = match tokio::time::timeout(
            self.settings.timeout.0,
            self.batcher.call(cmd, key),
        )
        .await
        {
            Err(_) => Err(StoreError::Timeout),
            Ok(Err(NotBatched::Busy)) => return self.call(&alone()).await,
            Ok(Ok(Ok(redis::Value::ServerError(e)))) if retry_alone(e.code()) => {
                return self.call(&alone()).await;
            }
            // Any other error of this call alone (CLUSTERDOWN, LOADING, …) keeps its code, so it
            // is classified as the same error outside a batch would be.
            Ok(Ok(Ok(redis::Value::ServerError(e)))) => Ok(Err(RedisError::from(e))),
            Ok(Ok(answer)) => Ok(answer.and_then(|v| Ok(redis::from_redis_value(v)?))),
        };
        self.settle(answer)
    }

    /// Counts a call's outcome in the circuit breaker and maps its error.
    fn settle<T>(
        &self,
        answer: Result<Result<T, RedisError>, StoreError>,
    ) -> Result<T, StoreError> {
        let mut trips = true;
        let result = match answer {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                trips = trips_breaker(&e);
                Err(classify(&e))
            }
            Err(e) => Err(e),
        };
        match &result {
            Ok(_) => self.breaker.success(),
            // Redis answered: it is up, only this call failed.
            Err(_) if !trips => {}
            Err(e) => {
                if self.breaker.failure() {
                    self.metrics.breaker_opens.inc();
                    self.metrics.degraded.set(1);
                    tracing::warn!(error = %e, "Redis circuit breaker open: rules use their fallback until Redis answers");
                }
            }
        }
        result
    }
}

impl GlobalStore for RedisStore {
    fn lease<'a>(&'a self, key: &'a str, rate: Rate, want: u64) -> StoreFuture<'a, LeaseGrant> {
        Box::pin(async move {
            let answer = self.batched(&LEASE, key, &rate, &[want]).await;
            answer.map(grant_of)
        })
    }

    fn charge<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        max_debt: u64,
    ) -> StoreFuture<'a, LeaseGrant> {
        Box::pin(self.charge_at(key, rate, tokens, max_debt, None))
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        window: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.batched::<i64>(&RELEASE, key, &rate, &[tokens, window])
                .await
                .map(|_| ())
        })
    }

    fn peek<'a>(&'a self, key: &'a str, rate: Rate) -> StoreFuture<'a, f64> {
        Box::pin(self.peek_at(key, rate, None))
    }

    fn close_window<'a>(&'a self, key: &'a str, rate: Rate, window: u64) -> StoreFuture<'a, ()> {
        Box::pin(async move { self.close_at(key, rate, window, None).await.map(|_| ()) })
    }

    fn reset<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let Some(conn) = self.conn.load_full() else {
                return Err(StoreError::Unavailable("not connected".into()));
            };
            match tokio::time::timeout(self.settings.connect_timeout.0, conn.del(key)).await {
                Ok(r) => r.map_err(|e| classify(&e)),
                Err(_) => Err(StoreError::Timeout),
            }
        })
    }

    fn demand<'a>(
        &'a self,
        key: &'a str,
        client: u64,
        milli_rps: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, Vec<u64>> {
        Box::pin(async move {
            let mut inv = DEMAND.prepare_invoke();
            inv.key(demand_key(key))
                .arg(format!("{}/{client}", self.instance_id))
                .arg(milli_rps)
                .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
            self.call(&inv).await
        })
    }

    fn degraded(&self) -> bool {
        !self.breaker.is_closed()
    }

    fn decision_timeout(&self) -> Option<Duration> {
        Some(self.settings.timeout.0)
    }

    fn live_instances(&self) -> u64 {
        self.live.load(Ordering::Relaxed).max(1)
    }

    fn name(&self) -> &'static str {
        if self.cluster {
            "redis-cluster"
        } else {
            "redis"
        }
    }
}

/// A grant from a script's answer `{tokens, remaining_millitokens, window, ends_in}`.
fn grant_of((granted, milli, window, ends_in): (u64, i64, u64, i64)) -> LeaseGrant {
    LeaseGrant {
        granted,
        remaining: milli as f64 / 1000.0,
        window,
        ends_in: u64::try_from(ends_in).ok(),
    }
}

/// Whether a call a batch could not run is sent again alone: the script is not loaded yet
/// (NOSCRIPT), or the key's slot is elsewhere or moving (MOVED, ASK, TRYAGAIN).
fn retry_alone(code: &str) -> bool {
    matches!(code, "NOSCRIPT" | "MOVED" | "ASK" | "TRYAGAIN")
}

/// The key holding RLQS demands for the bucket at `key`: the bucket key with `sluice:rlqs:` in
/// place of `sluice:`, so it keeps the bucket's hash tag (one cluster slot) and no bucket key
/// (always `sluice:{…`) can be spelled the same.
fn demand_key(key: &str) -> String {
    match key.strip_prefix("sluice:") {
        Some(rest) => format!("sluice:rlqs:{rest}"),
        None => format!("sluice:rlqs:{key}"),
    }
}

/// Maps a Redis error to the engine's kinds. Cluster states that pass (CLUSTERDOWN during
/// failover, TRYAGAIN and ASK/MOVED storms during resharding, LOADING after a restart) are
/// `Unavailable`, so rules fall back and the breaker can open; anything else is a protocol error.
fn classify(e: &RedisError) -> StoreError {
    const TRANSIENT: &[&str] = &[
        "NOSCRIPT",
        "CLUSTERDOWN",
        "TRYAGAIN",
        "MASTERDOWN",
        "LOADING",
        "BUSY",
        "READONLY",
        "MOVED",
        "ASK",
    ];
    if e.is_timeout() {
        StoreError::Timeout
    } else if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.code().is_some_and(|c| TRANSIENT.contains(&c))
    {
        StoreError::Unavailable(safe(e))
    } else {
        StoreError::Protocol(safe(e))
    }
}

/// Whether an error says Redis may be down (and counts toward opening the breaker). A script that
/// Redis no longer knows (NOSCRIPT: restarted or failed over, and the reload raced) is an answer
/// from a Redis that is up: the next call loads the script again.
fn trips_breaker(e: &RedisError) -> bool {
    e.code() != Some("NOSCRIPT")
}

/// An error's text without anything that could carry credentials.
fn safe(e: &RedisError) -> String {
    e.code()
        .map_or_else(|| format!("{:?}", e.kind()), str::to_string)
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
        if store.conn.load().is_none() {
            match connection::cluster(&store.settings).await {
                Ok(conn) => store.conn.store(Some(Arc::new(conn))),
                Err(e) => {
                    tracing::debug!(error = %safe(&e), "Redis Cluster not reachable yet");
                    continue;
                }
            }
        }
        let Some(conn) = store.conn.load_full() else {
            continue;
        };
        let timeout = store.settings.timeout.0.max(Duration::from_millis(100));
        if let Ok(Ok(())) = tokio::time::timeout(timeout, conn.ping()).await {
            store.breaker.close();
            store.metrics.degraded.set(0);
            tracing::info!(
                store = store.name(),
                "Redis answers again: global enforcement resumed"
            );
        }
    }
}

/// Announces this instance and reads how many are live.
async fn heartbeat_loop(store: Weak<RedisStore>) {
    let interval = match store.upgrade() {
        Some(s) => s.settings.heartbeat_interval.0,
        None => return,
    };
    loop {
        if let Some(s) = store.upgrade() {
            if s.breaker.is_closed()
                && let Ok(n) = s.heartbeat(false).await
            {
                s.live.store(n.max(1), Ordering::Relaxed);
                s.metrics.live_instances.set(n as i64);
            }
        } else {
            return;
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{ErrorKind, ServerErrorKind};

    #[test]
    fn noscript_is_transient_and_never_opens_the_breaker() {
        let noscript = RedisError::from((
            ErrorKind::Server(ServerErrorKind::NoScript),
            "NOSCRIPT",
            "No matching script".to_string(),
        ));
        assert!(!trips_breaker(&noscript), "{noscript:?}");
        assert!(matches!(classify(&noscript), StoreError::Unavailable(_)));
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(trips_breaker(&io));
    }
}
