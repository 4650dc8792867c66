//! Ports for the listeners tests start: never from the kernel's ephemeral range.
//!
//! A port from `bind(":0")` is free only until the listener is dropped, and it comes from the
//! ephemeral range (32768–60999 here), the same range every outgoing connection's source port and
//! Docker's own proxy draw from. Between the pick and the bind, any connection the test suite opens
//! (to Docker, to Redis, Envoy's upstream calls) can take it: CI once failed with Docker's proxy
//! unable to bind `0.0.0.0:44803`. So a test port comes from below that range, each handed out at
//! most once per process (a counter, not the kernel's choice, so two tests running at once never
//! share one), and is checked free before it is returned. Cluster nodes get their own range, with
//! their bus ports (`+10000`) still below the ephemeral range.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// Single listeners: 10000..20000.
const SINGLE: (u16, u16) = (10_000, 20_000);
/// Blocks of consecutive ports (clusters, sentinels): bases in 20000..22700, so a block of up to 64
/// and its bus ports end below 32768.
const BLOCKS: (u16, u16) = (20_000, 22_700);

static NEXT_SINGLE: AtomicU32 = AtomicU32::new(0);
static NEXT_BLOCK: AtomicU32 = AtomicU32::new(0);

/// A port that is free now and that this process has not handed out before (until it has
/// handed out the whole range: then one whose listener is gone, as the probe finds).
pub fn free_port() -> u16 {
    pick(&NEXT_SINGLE, SINGLE, 1, 1, false)
}

/// A base port `P` with `P..P+count` and their cluster bus ports `P+10000..` all free, not handed
/// out by this process before (42 blocks; after those, one whose servers are gone).
pub fn free_block(count: u16) -> u16 {
    assert!(count <= 64, "a block of at most 64 ports");
    pick(&NEXT_BLOCK, BLOCKS, count, 64, true)
}

/// Walks `range` from a start that differs between processes (so two test binaries running at once
/// rarely probe the same ports), in steps of `stride`, returning the first base whose `count` ports
/// (and bus ports, if `bus`) all bind.
fn pick(next: &AtomicU32, (low, high): (u16, u16), count: u16, stride: u16, bus: bool) -> u16 {
    let slots = u32::from((high - low) / stride);
    let offset = std::process::id() % slots;
    for _ in 0..slots {
        let slot = (offset + next.fetch_add(1, Ordering::Relaxed)) % slots;
        let base = low + (slot as u16) * stride;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if (0..count).all(|k| free(base + k) && (!bus || free(base + k + 10_000))) {
            return base;
        }
    }
    panic!("no free port in {low}..{high}")
}

/// Whether a container failed to start only because its host port was taken meanwhile (then a
/// fresh port is worth one more try).
pub fn taken(error: &impl std::fmt::Display) -> bool {
    let text = error.to_string();
    text.contains("address already in use") || text.contains("port is already allocated")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_and_never_handed_out_twice() {
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "a port handed out twice");
        assert!(ports.iter().all(|p| (SINGLE.0..SINGLE.1).contains(p)));
    }

    #[test]
    fn a_block_and_its_bus_ports_stay_below_the_ephemeral_range() {
        let a = free_block(6);
        let b = free_block(6);
        assert_ne!(a, b);
        for base in [a, b] {
            assert!(
                base + 6 + 10_000 <= 32_768,
                "bus ports reach {}",
                base + 10_006
            );
        }
    }

    #[test]
    fn a_taken_port_is_told_apart_from_other_failures() {
        assert!(taken(
            &"Error starting userland proxy: listen tcp4 0.0.0.0:44803: bind: address already in use"
        ));
        assert!(!taken(&"No such image: redis:7.0"));
    }
}
