//! A cluster's slot map: which node serves each slot, read with `CLUSTER SLOTS` in the
//! background, so that a batch is split into one pipeline per node; and a key's slot.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio_util::task::TaskTracker;

use super::pipeline::Item;

/// How often a cluster's slot map is read again even without a MOVED.
const TOPOLOGY_EVERY: Duration = Duration::from_secs(5);

/// Which node serves each slot, as `CLUSTER SLOTS` last said.
pub(super) struct SlotMap {
    /// Node index per slot; `u16::MAX`: unknown. Written by the refresh task, so a slow or
    /// failing `CLUSTER SLOTS` never holds batches up (a stale map only costs single retries).
    node: Arc<std::sync::RwLock<Box<[u16]>>>,
    read_at: Option<tokio::time::Instant>,
    /// Set by a batch that met a MOVED: read the map again before the next batch.
    pub(super) moved: Arc<std::sync::atomic::AtomicBool>,
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
    pub(super) fn stale(&self) -> bool {
        self.moved.load(std::sync::atomic::Ordering::Relaxed)
            || self.read_at.is_none_or(|at| at.elapsed() >= TOPOLOGY_EVERY)
    }

    /// Reads `CLUSTER SLOTS` in the background (on `tasks`); on failure the old map stays.
    pub(super) fn refresh_later(
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
    pub(super) fn by_node(&self, batch: Vec<Item>) -> Vec<Vec<Item>> {
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
pub(super) fn slot_of(key: &str) -> u16 {
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
