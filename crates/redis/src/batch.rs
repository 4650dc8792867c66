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
//! reads with `CLUSTER SLOTS` (at start, every [`TOPOLOGY_EVERY`], and after a MOVED). A stale map
//! only costs single retries: each pipeline is routed by redis-rs to the node serving its first
//! call's slot, and calls the node does not serve answer MOVED.

use std::collections::HashMap;
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

/// How often a cluster's slot map is read again even without a MOVED.
const TOPOLOGY_EVERY: Duration = Duration::from_secs(5);
/// Calls waiting for a batch at most; beyond it a call goes alone (never blocks a decision).
const QUEUE: usize = 16 * 1024;

/// One queued script call.
struct Item {
    cmd: Cmd,
    slot: u16,
    reply: oneshot::Sender<Result<Value, RedisError>>,
}

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
                let c = c.clone();
                let flight = in_flight.start();
                tasks.spawn(async move {
                    let _flight = flight;
                    let mut c = c;
                    send(batch, |pipe, n| async move {
                        redis::aio::ConnectionLike::req_packed_commands(&mut c, &pipe, 0, n).await
                    })
                    .await;
                });
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

/// Sends `batch` as one pipeline through `run` and hands each call its answer; returns whether
/// any call answered MOVED (the slot map is stale).
async fn send<F, Fut>(batch: Vec<Item>, run: F) -> bool
where
    F: FnOnce(redis::Pipeline, usize) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Value>, RedisError>>,
{
    let mut pipe = redis::pipe();
    let mut replies = Vec::with_capacity(batch.len());
    for item in batch {
        pipe.add_command(item.cmd);
        replies.push(item.reply);
    }
    let n = replies.len();
    match run(pipe, n).await {
        Ok(values) if values.len() == n => {
            let mut moved = false;
            for (reply, value) in replies.into_iter().zip(values) {
                if let Value::ServerError(e) = &value {
                    moved |= matches!(e.code(), "MOVED" | "ASK");
                }
                let _ = reply.send(Ok(value));
            }
            moved
        }
        Ok(values) => {
            let e = RedisError::from((
                redis::ErrorKind::Parse,
                "pipeline answer of the wrong length",
                format!("{} answers to {n} calls", values.len()),
            ));
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
            false
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
            false
        }
    }
}

/// Answers every call of `batch` with an I/O error saying `why`.
fn fail(batch: Vec<Item>, why: &'static str) {
    for item in batch {
        let e = RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, why));
        let _ = item.reply.send(Err(e));
    }
}

/// Which node serves each slot, as `CLUSTER SLOTS` last said.
struct SlotMap {
    /// Node index per slot; `u16::MAX`: unknown. Written by the refresh task, so a slow or
    /// failing `CLUSTER SLOTS` never holds batches up (a stale map only costs single retries).
    node: Arc<std::sync::RwLock<Box<[u16]>>>,
    read_at: Option<tokio::time::Instant>,
    /// Set by a batch that met a MOVED: read the map again before the next batch.
    moved: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for SlotMap {
    fn default() -> Self {
        Self {
            node: Arc::new(std::sync::RwLock::new(
                vec![u16::MAX; 16384].into_boxed_slice(),
            )),
            read_at: None,
            moved: Arc::default(),
        }
    }
}

impl SlotMap {
    fn stale(&self) -> bool {
        self.moved.load(std::sync::atomic::Ordering::Relaxed)
            || self.read_at.is_none_or(|at| at.elapsed() >= TOPOLOGY_EVERY)
    }

    /// Reads `CLUSTER SLOTS` in the background (on `tasks`); on failure the old map stays.
    fn refresh_later(
        &mut self,
        conn: &redis::cluster_async::ClusterConnection,
        tasks: &TaskTracker,
    ) {
        self.read_at = Some(tokio::time::Instant::now());
        self.moved
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let mut c = conn.clone();
        let node = Arc::clone(&self.node);
        tasks.spawn(async move {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SLOTS");
            let read = cmd.query_async::<Value>(&mut c);
            if let Ok(Ok(Value::Array(ranges))) =
                tokio::time::timeout(Duration::from_secs(1), read).await
                && let Some(map) = parse_slots(ranges)
            {
                *node
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = map;
            }
        });
    }

    /// Splits `batch` by the node serving each call's slot (unknown slots: by slot).
    fn by_node(&self, batch: Vec<Item>) -> Vec<Vec<Item>> {
        let node = self
            .node
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut groups: HashMap<u32, Vec<Item>> = HashMap::new();
        for item in batch {
            let index = node[usize::from(item.slot)];
            let group = if index == u16::MAX {
                0x1_0000 | u32::from(item.slot)
            } else {
                u32::from(index)
            };
            groups.entry(group).or_default().push(item);
        }
        groups.into_values().collect()
    }
}

/// A node index per slot from a `CLUSTER SLOTS` answer (`[start, end, [host, port, …], …]` per
/// range); `None` if it names no range.
fn parse_slots(ranges: Vec<Value>) -> Option<Box<[u16]>> {
    let mut map = vec![u16::MAX; 16384].into_boxed_slice();
    let mut nodes: HashMap<(String, i64), u16> = HashMap::new();
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => continue,
        };
        let Some(Value::Int(port)) = master.get(1) else {
            continue;
        };
        let next = nodes.len() as u16;
        let index = *nodes.entry((host, *port)).or_insert(next);
        let (start, end) = ((*start).clamp(0, 16383), (*end).clamp(0, 16383));
        for slot in start..=end {
            map[slot as usize] = index;
        }
    }
    (!nodes.is_empty()).then_some(map)
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag, or of the whole key, mod 16384 (as
/// Redis Cluster and redis-rs compute it; redis-rs keeps its own function private).
fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|b| *b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(bytes)) % 16384
}

#[cfg(test)]
mod tests {
    use super::{parse_slots, slot_of};
    use redis::Value;

    fn range(start: i64, end: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(start),
            Value::Int(end),
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
            ]),
        ])
    }

    #[test]
    fn cluster_slots_map_every_slot_to_its_master() {
        let map = parse_slots(vec![
            range(0, 5460, "127.0.0.1", 7000),
            range(5461, 10922, "127.0.0.1", 7001),
            range(10923, 16383, "127.0.0.1", 7002),
            // Anything else in the answer is skipped.
            Value::Int(3),
        ])
        .expect("a map");
        assert_eq!((map[0], map[5460], map[5461], map[16383]), (0, 0, 1, 2));
        let moved = parse_slots(vec![
            range(0, 99, "127.0.0.1", 7001),
            range(100, 16383, "127.0.0.1", 7000),
        ])
        .expect("a map");
        assert_eq!((moved[99], moved[100]), (0, 1));
        assert!(parse_slots(vec![Value::Nil]).is_none(), "no range: no map");
    }

    #[test]
    fn slots_match_redis_cluster() {
        // CLUSTER KEYSLOT answers of a real Redis 7.0 (an empty tag is no tag; the first wins).
        for (key, slot) in [
            ("foo", 12182),
            ("{}x", 10595),
            ("a{}b", 13694),
            ("user:{42}:profile", 8000),
            ("sluice:{abc:def}", 4987),
            ("{a}{b}", 15495),
        ] {
            assert_eq!(slot_of(key), slot, "{key}");
        }
    }
}
