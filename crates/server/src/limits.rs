//! Bounds on what one client can hold: connections, streams, watchers, time. sluice sits on every
//! request, so a slow, stuck or hostile client must cost a bounded amount and never starve
//! decisions. The defaults are documented in the README ("Security").

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Limits of the gRPC and admin ports.
#[derive(Debug, Clone)]
pub struct Limits {
    /// gRPC: connections open at once (more wait in the listen backlog).
    pub max_connections: usize,
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
    /// …and on one connection.
    pub max_watchers_per_connection: usize,
    /// Admin HTTP: connections open at once (more wait in the listen backlog).
    pub admin_max_connections: usize,
    /// Admin HTTP: the longest a client may take to send a request's headers, and the longest an
    /// idle keep-alive connection stays open.
    pub admin_header_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            tcp_keepalive: Duration::from_secs(60),
            max_concurrent_streams: 1_024,
            request_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(5),
            max_watchers: 256,
            max_watchers_per_connection: 16,
            admin_max_connections: 64,
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
    by_peer: HashMap<Option<SocketAddr>, usize>,
}

/// One open watcher; dropping it frees its place.
#[derive(Debug)]
pub struct WatcherSlot {
    watchers: Arc<Watchers>,
    peer: Option<SocketAddr>,
}

impl Watchers {
    /// Takes a place for a watcher from `peer`, or says which bound is reached.
    pub fn open(
        self: &Arc<Self>,
        peer: Option<SocketAddr>,
        limits: &Limits,
    ) -> Result<WatcherSlot, &'static str> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.total >= limits.max_watchers {
            return Err("too many WatchQuota streams on this server");
        }
        let mine = open.by_peer.entry(peer).or_default();
        if *mine >= limits.max_watchers_per_connection {
            return Err("too many WatchQuota streams on this connection");
        }
        *mine += 1;
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
        if let Some(n) = open.by_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.by_peer.remove(&self.peer);
            }
        }
    }
}
