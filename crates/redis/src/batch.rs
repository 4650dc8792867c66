//! Batching: script calls of many keys share one round trip per Redis node.
//!
//! A cold key gets nothing from leasing (its next request comes after its lease went back), so at
//! internet scale most decisions would each cost a round trip. Instead, concurrent lease and
//! release calls queue here; one task collects them and sends each node's share as one
//! pipeline. A call goes at once when no batch is on its way; while one is, later calls wait for
//! it to be answered, for at most `linger` (or until `max` are queued), and go together: batches
//! grow with the load, and a quiet instance adds no wait. An operator who prefers fewer round
//! trips to latency sets `min_wait`: every batch then gathers for that long first. Every call is still its own EVALSHA on
//! its own key (atomic, one key per script, as without batching); only the round trip is
//! shared. A call the pipeline could not run (NOSCRIPT after a restart, MOVED/ASK while slots
//! move) comes back as an error value, and the store repeats it alone, the way redis-rs does.
//!
//! A cluster's calls are grouped by the node that serves their slot, from a slot map this task
//! reads with `CLUSTER SLOTS` (at start, every `TOPOLOGY_EVERY`, and after a MOVED). A stale map
//! only costs single retries: each pipeline is routed by redis-rs to the node serving its first
//! call's slot, and calls the node does not serve answer MOVED.
//!
//! # Layout
//! - this file: the [`Batcher`] handle and the task that collects calls into batches.
//! - `pipeline`: one batch on the wire: its calls sent as one pipeline, each handed its answer.
//! - `slots`: which cluster node serves each call's slot, to group a batch by node.

mod pipeline;
mod slots;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use prometheus::IntCounter;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, RedisError, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::connection::Conn;
use pipeline::{Item, fail, send};
use slots::{SlotMap, slot_of};

/// Calls waiting for a batch at most; beyond it a call goes alone (never blocks a decision).
const QUEUE: usize = 16 * 1024;

/// How long calls wait for a batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waits {
    /// While a batch is on its way, how long later calls wait for it (`redis.batch_linger`).
    pub(crate) linger: Duration,
    /// How long every batch gathers calls, even with nothing on its way
    /// (`redis.batch_min_wait`; Kafka's `linger.ms`): fewer round trips for that much more
    /// latency on each cold decision.
    pub(crate) min_wait: Option<Duration>,
    /// Most calls per batch (at least 1).
    pub(crate) max: usize,
}

/// Why a call did not go through a batch (the caller sends it alone).
#[derive(Debug)]
pub(crate) enum NotBatched {
    /// The queue is full or the batching task has stopped.
    Busy,
}

/// The handle through which calls join batches.
pub(crate) struct Batcher {
    tx: mpsc::Sender<Item>,
}

impl Batcher {
    /// Starts the batching task on `tasks` (it ends when `stop` is cancelled), batching as
    /// `waits` says.
    pub(crate) fn start(
        conn: Arc<ArcSwapOption<Conn>>,
        waits: Waits,
        counters: (IntCounter, IntCounter),
        tasks: &TaskTracker,
        stop: CancellationToken,
    ) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let batches = tasks.clone();
        tasks.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = collect(rx, conn, waits, counters, batches) => {}
            }
        });
        Self { tx }
    }

    /// Sends `cmd` (a call on a key in `slot`) in the next batch and waits for its answer (the
    /// caller bounds the wait). A server error for this call alone comes back as `Ok` of
    /// [`Value::ServerError`].
    pub(crate) async fn call(
        &self,
        cmd: Cmd,
        key: &str,
    ) -> Result<Result<Value, RedisError>, NotBatched> {
        let (reply, answer) = oneshot::channel();
        let slot = slot_of(key);
        self.tx
            .try_send(Item { cmd, slot, reply })
            .map_err(|_| NotBatched::Busy)?;
        answer.await.map_err(|_| NotBatched::Busy)
    }
}

/// The batching task: collects calls into batches and sends each node's share as a pipeline.
async fn collect(
    mut rx: mpsc::Receiver<Item>,
    conn: Arc<ArcSwapOption<Conn>>,
    waits: Waits,
    (round_trips, calls): (IntCounter, IntCounter),
    tasks: TaskTracker,
) {
    let Waits {
        linger,
        min_wait,
        max,
    } = waits;
    let mut slots = SlotMap::default();
    let in_flight = Arc::new(InFlight::default());
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let started = tokio::time::Instant::now();
        let until = started + linger;
        // Every batch gathers for `min_wait`, if set, even with nothing on its way.
        let gather_until = started + min_wait.unwrap_or_default();
        while batch.len() < max {
            let next = if min_wait.is_some() {
                tokio::time::timeout_at(gather_until, rx.recv())
                    .await
                    .ok()
                    .flatten()
            } else {
                rx.try_recv().ok()
            };
            match next {
                Some(item) => batch.push(item),
                None => break,
            }
        }
        // While an earlier batch is on its way, later calls join this one, for at most `linger`:
        // under load batches grow with the load, and a call on a quiet instance goes at once.
        while batch.len() < max && in_flight.busy() {
            tokio::select! {
                item = rx.recv() => match item {
                    Some(item) => batch.push(item),
                    None => break,
                },
                () = in_flight.idle.notified() => {}
                () = tokio::time::sleep_until(until) => break,
            }
        }
        let Some(conn) = conn.load_full() else {
            fail(batch, "not connected");
            continue;
        };
        calls.inc_by(batch.len() as u64);
        match &*conn {
            Conn::Single(c) => {
                round_trips.inc();
                tasks.spawn(one_node(batch, c.clone(), in_flight.start()));
            }
            Conn::Sentinel(c) => {
                round_trips.inc();
                tasks.spawn(one_node(batch, c.clone(), in_flight.start()));
            }
            Conn::Cluster(c) => {
                if slots.stale() {
                    slots.refresh_later(c, &tasks);
                }
                for group in slots.by_node(batch) {
                    round_trips.inc();
                    let mut c = c.clone();
                    let moved = slots.moved.clone();
                    let flight = in_flight.start();
                    tasks.spawn(async move {
                        let _flight = flight;
                        let route = Route::new(group[0].slot, SlotAddr::Master);
                        let any_moved = send(group, |pipe, n| async move {
                            c.route_pipeline(pipe, 0, n, SingleNodeRoutingInfo::SpecificNode(route))
                                .await
                        })
                        .await;
                        if any_moved {
                            moved.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                    });
                }
            }
        }
    }
}

/// One batch to a standalone Redis (or Sentinel's master) as one pipeline; `flight` counts it on
/// its way until it is answered.
async fn one_node(
    batch: Vec<Item>,
    mut conn: impl redis::aio::ConnectionLike + Send,
    flight: FlightGuard,
) {
    let _flight = flight;
    send(batch, |pipe, n| async move {
        conn.req_packed_commands(&pipe, 0, n).await
    })
    .await;
}

/// Batches on their way to Redis.
#[derive(Default)]
struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    /// Told when the last batch on its way is answered.
    idle: tokio::sync::Notify,
}

impl InFlight {
    fn busy(&self) -> bool {
        self.count.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    /// Counts a batch on its way until the guard is dropped.
    fn start(self: &Arc<Self>) -> FlightGuard {
        self.count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        FlightGuard(Arc::clone(self))
    }
}

/// One batch on its way (see [`InFlight::start`]).
struct FlightGuard(Arc<InFlight>);

impl Drop for FlightGuard {
    fn drop(&mut self) {
        if self
            .0
            .count
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            // A stored permit if the collector is not waiting yet: it then looks again at once.
            self.0.idle.notify_one();
        }
    }
}
