//! Bounds on what one client can hold: connections, streams, request bytes, long-lived calls,
//! time. sluice sits on every
//! request, so a slow, stuck or hostile client must cost a bounded amount and never starve
//! decisions. The defaults are documented in docs/security.md ("Bounds per client").

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Limits of the gRPC and admin ports.
#[derive(Debug, Clone)]
pub struct Limits {
    /// gRPC: connections open at once (more wait in the listen backlog)…
    pub max_connections: usize,
    /// …and from one peer address (more are closed as soon as they are accepted).
    pub max_connections_per_peer: usize,
    /// gRPC: the longest a new connection may take to send the HTTP/2 preface (it is closed
    /// then): a silent connection would otherwise hold its place for good.
    pub preface_timeout: Duration,
    /// gRPC and admin: TCP keepalive idle time on accepted connections.
    pub tcp_keepalive: Duration,
    /// gRPC: concurrent HTTP/2 streams one connection may open (Envoy queues beyond it).
    pub max_concurrent_streams: u32,
    /// gRPC: longest a request handler may run before it is answered `DEADLINE_EXCEEDED`
    /// (a decision waits at most the store timeout; this bounds anything stuck).
    pub request_timeout: Duration,
    /// gRPC: an HTTP/2 ping every this long on idle connections…
    pub keepalive_interval: Duration,
    /// …and the connection is closed if it is not answered within this long.
    pub keepalive_timeout: Duration,
    /// gRPC with TLS: the longest a handshake may take.
    pub tls_handshake_timeout: Duration,
    /// gRPC: HTTP/2 stream flow-control window: request bytes a call may have in flight
    /// before the server has read them (what a handler that stops reading leaves buffered).
    pub stream_window: u32,
    /// gRPC: the same for a whole connection (all its calls' unread bytes together).
    pub connection_window: u32,
    /// gRPC: answer bytes one call may have queued for a client that reads slowly.
    pub send_buffer: usize,
    /// gRPC: the largest header list a call may send (HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE`).
    pub max_header_list: u32,
    /// gRPC: request bytes held open ([`crate::admission`]) by all clients together…
    pub request_bytes: usize,
    /// …by one peer address, over all its connections…
    pub request_bytes_per_peer: usize,
    /// …and by one connection.
    pub request_bytes_per_connection: usize,
    /// `WatchQuota` streams.
    pub watch_quota: StreamCaps,
    /// RLQS streams (`StreamRateLimitQuotas`).
    pub rlqs_streams: StreamCaps,
    /// `grpc.health.v1.Health/Watch` streams.
    pub health_watches: StreamCaps,
    /// Reflection streams (v1 and v1alpha together).
    pub reflection_streams: StreamCaps,
    /// `ListQuotas` pages being listed at once: each walks every tracked key on a blocking
    /// thread, so more would take the cores decisions need (refused beyond, counted).
    pub max_table_scans: usize,
    /// Admin HTTP: connections open at once (more wait in the listen backlog)…
    pub admin_max_connections: usize,
    /// …and from one peer address, so that one client's half-sent requests cannot keep the
    /// kubelet's probes waiting.
    pub admin_max_connections_per_peer: usize,
    /// Admin HTTP: the longest a client may take to send a request's headers, and the longest an
    /// idle keep-alive connection stays open.
    pub admin_header_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            max_connections_per_peer: 128,
            preface_timeout: Duration::from_secs(5),
            tcp_keepalive: Duration::from_secs(60),
            max_concurrent_streams: 1_024,
            request_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(5),
            stream_window: 64 * 1024,
            connection_window: 128 * 1024,
            send_buffer: 64 * 1024,
            max_header_list: 16 * 1024,
            request_bytes: 32 << 20,
            request_bytes_per_peer: 24 << 20,
            request_bytes_per_connection: 16 << 20,
            watch_quota: StreamCaps {
                total: 256,
                per_peer: 64,
                per_connection: 16,
                // Longer than the longest interval (1 h): a watch sends a state every interval.
                idle: Duration::from_secs(7_200),
            },
            rlqs_streams: StreamCaps {
                total: 64,
                per_peer: 32,
                per_connection: 16,
                idle: Duration::from_secs(600),
            },
            health_watches: StreamCaps {
                total: 64,
                per_peer: 16,
                per_connection: 8,
                idle: Duration::from_secs(1_800),
            },
            reflection_streams: StreamCaps {
                total: 16,
                per_peer: 8,
                per_connection: 4,
                idle: Duration::from_secs(60),
            },
            max_table_scans: 1,
            admin_max_connections: 64,
            admin_max_connections_per_peer: 16,
            admin_header_timeout: Duration::from_secs(5),
        }
    }
}

/// Bounds on one kind of long-lived call ([`crate::admission::LongKind`]).
#[derive(Debug, Clone)]
pub struct StreamCaps {
    /// Open at once on the whole server…
    pub total: usize,
    /// …from one peer address, over all its connections…
    pub per_peer: usize,
    /// …and on one connection.
    pub per_connection: usize,
    /// Closed (`UNAVAILABLE`, counted) after this long without a message either way; the
    /// client's next call opens a new one.
    pub idle: Duration,
}

/// One place of `key` given back (the entry goes with its last place).
pub(crate) fn release<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
        }
    }
}

/// Counts `ListQuotas` pages being listed ([`Limits::max_table_scans`]).
#[derive(Debug, Default)]
pub struct TableScans {
    running: AtomicUsize,
}

/// One page being listed; dropping it frees its place.
#[derive(Debug)]
pub struct ScanSlot {
    scans: Arc<TableScans>,
}

impl TableScans {
    /// A place for one more walk of the table, or `None` while `limits.max_table_scans` run.
    pub fn start(self: &Arc<Self>, limits: &Limits) -> Option<ScanSlot> {
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limits.max_table_scans).then_some(n + 1)
            })
            .ok()?;
        Some(ScanSlot {
            scans: Arc::clone(self),
        })
    }
}

impl Drop for ScanSlot {
    fn drop(&mut self) {
        self.scans.running.fetch_sub(1, Ordering::AcqRel);
    }
}
