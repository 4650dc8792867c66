//! Bounds on what one client can hold: connections, streams, watchers, time. sluice sits on every
//! request, so a slow, stuck or hostile client must cost a bounded amount and never starve
//! decisions. The defaults are documented in docs/security.md ("Bounds per client").

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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
    /// `WatchQuota` streams open at once on the whole server…
    pub max_watchers: usize,
    /// …on one connection…
    pub max_watchers_per_connection: usize,
    /// …and from one peer address, over all its connections.
    pub max_watchers_per_peer: usize,
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
            max_watchers: 256,
            max_watchers_per_connection: 16,
            max_watchers_per_peer: 64,
            max_table_scans: 1,
            admin_max_connections: 64,
            admin_max_connections_per_peer: 16,
            admin_header_timeout: Duration::from_secs(5),
        }
    }
}

/// Counts open `WatchQuota` streams, in total and per connection (by peer address).
#[derive(Debug, Default)]
pub struct Watchers {
    open: Mutex<WatcherCounts>,
}

#[derive(Debug, Default)]
struct WatcherCounts {
    total: usize,
    by_connection: HashMap<Option<SocketAddr>, usize>,
    by_ip: HashMap<Option<IpAddr>, usize>,
}

/// One open watcher; dropping it frees its place.
#[derive(Debug)]
pub struct WatcherSlot {
    watchers: Arc<Watchers>,
    peer: Option<SocketAddr>,
}

impl Watchers {
    /// Takes a place for a watcher from `peer`, or says which bound is reached (as
    /// `sluice_refused_total`'s `bound` label, and the message for the client).
    pub fn open(
        self: &Arc<Self>,
        peer: Option<SocketAddr>,
        limits: &Limits,
    ) -> Result<WatcherSlot, (&'static str, &'static str)> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let ip = peer.map(|p| p.ip().to_canonical());
        if open.total >= limits.max_watchers {
            return Err(("watchers", "too many WatchQuota streams on this server"));
        }
        if open.by_connection.get(&peer).copied().unwrap_or(0) >= limits.max_watchers_per_connection
        {
            return Err((
                "watchers_per_connection",
                "too many WatchQuota streams on this connection",
            ));
        }
        if open.by_ip.get(&ip).copied().unwrap_or(0) >= limits.max_watchers_per_peer {
            return Err((
                "watchers_per_peer",
                "too many WatchQuota streams from this address",
            ));
        }
        *open.by_connection.entry(peer).or_default() += 1;
        *open.by_ip.entry(ip).or_default() += 1;
        open.total += 1;
        Ok(WatcherSlot {
            watchers: Arc::clone(self),
            peer,
        })
    }

    /// Watchers open now.
    pub fn count(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).total
    }
}

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        let mut open = self.watchers.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total = open.total.saturating_sub(1);
        release(&mut open.by_connection, &self.peer);
        release(&mut open.by_ip, &self.peer.map(|p| p.ip().to_canonical()));
    }
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
