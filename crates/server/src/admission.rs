//! What gRPC clients may hold while their calls are open, counted in three scopes: the call's
//! connection, its peer address (every connection from it), and all clients together.
//!
//! - **Request bytes**: every open call is charged what it costs held open (a fixed cost per
//!   kind of call, measured, plus its headers), the message it is sending while unfinished (at
//!   the length its prefix declares: that is what tonic's decoder reserves the moment the prefix
//!   arrives, [`metered`]), a unary call's message and answer until the answer is written out
//!   ([`answer`]), a decision's descriptors (`crate::handler`), and what an RLQS stream keeps per
//!   bucket. One connection used to pin 4 MiB per stream this way, 1 024 streams at a time
//!   (issue 41).
//! - **Long-lived calls** of each [`LongKind`] are counted apart, like `WatchQuota` always was,
//!   and each is closed after a time with no message either way ([`answer::Answer`]).
//!
//! # Layout
//! - this module: the scopes, their bounds, [`Charge`] and [`LongSlot`];
//! - [`call`]: what kind of call a path is (decode limit, cost, long-lived or not: [`LongKind`]);
//! - `gauges`: [`Gauges`], what is held now, for `/metrics`.
//! - [`metered`]: request bodies, charged as they arrive;
//! - [`answer`]: answers, holding their call's charge until written out; idle long-lived calls.
//!
//! Beyond any bound the call is refused with `RESOURCE_EXHAUSTED` and counted in
//! `sluice_refused_total{bound}`; docs/security.md ("Memory a client can hold") has every bound
//! and what it costs at most.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use prometheus::{IntCounter, IntCounterVec};
use tonic::Status;

use crate::limits::{Limits, StreamCaps};

pub mod answer;
pub mod call;
mod gauges;
pub mod metered;

pub use call::LongKind;
pub use gauges::Gauges;

/// Where a bound was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The call's connection.
    Connection,
    /// Every connection from the call's peer address.
    Peer,
    /// All clients together.
    All,
}

impl Scope {
    const ALL: [Scope; 3] = [Scope::Connection, Scope::Peer, Scope::All];

    fn suffix(self) -> &'static str {
        match self {
            Scope::Connection => "_per_connection",
            Scope::Peer => "_per_peer",
            Scope::All => "",
        }
    }

    fn whose(self) -> &'static str {
        match self {
            Scope::Connection => "on this connection",
            Scope::Peer => "from this address",
            Scope::All => "on this server",
        }
    }
}

/// One bound: what is in use (calls, or bytes), and the most there may be.
#[derive(Debug)]
struct Level {
    used: AtomicUsize,
    max: usize,
}

impl Level {
    fn new(max: usize) -> Self {
        Self {
            used: AtomicUsize::new(0),
            max,
        }
    }

    fn take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&t| t <= self.max)
            })
            .is_ok()
    }

    fn give(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// What one scope holds.
#[derive(Debug)]
pub struct Usage {
    bytes: Level,
    long: [Level; 4],
}

impl Usage {
    fn new(scope: Scope, limits: &Limits) -> Self {
        let pick = |caps: &StreamCaps| match scope {
            Scope::Connection => caps.per_connection,
            Scope::Peer => caps.per_peer,
            Scope::All => caps.total,
        };
        let bytes = match scope {
            Scope::Connection => limits.request_bytes_per_connection,
            Scope::Peer => limits.request_bytes_per_peer,
            Scope::All => limits.request_bytes,
        };
        Self {
            bytes: Level::new(bytes),
            long: LongKind::ALL.map(|k| Level::new(pick(k.caps(limits)))),
        }
    }

    /// Request bytes held now.
    pub fn bytes(&self) -> usize {
        self.bytes.used.load(Ordering::Acquire)
    }

    /// Long-lived calls of `kind` open now.
    pub fn long(&self, kind: LongKind) -> usize {
        self.long[kind.index()].used.load(Ordering::Acquire)
    }
}

/// A peer address's [`Usage`], shared by its connections; it leaves the table with the last.
#[derive(Debug)]
struct PeerUsage {
    usage: Usage,
    ip: Option<IpAddr>,
    table: Weak<Admission>,
}

impl Drop for PeerUsage {
    fn drop(&mut self) {
        if let Some(table) = self.table.upgrade() {
            let mut peers = table.peers.lock().unwrap_or_else(|p| p.into_inner());
            // Another connection from the address may have put a new entry there already.
            if peers.get(&self.ip).is_some_and(|w| w.strong_count() == 0) {
                peers.remove(&self.ip);
            }
        }
    }
}

/// The server-wide side: the limits, all clients' usage and every peer address's.
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    all: Usage,
    peers: Mutex<HashMap<Option<IpAddr>, Weak<PeerUsage>>>,
    refused: Refusals,
}

/// `sluice_refused_total` counters, resolved once.
#[derive(Debug)]
struct Refusals {
    /// Request bytes, by [`Scope`].
    bytes: [IntCounter; 3],
    /// Long-lived calls, by kind then scope.
    long: [[IntCounter; 3]; 4],
    /// Messages over their API's size.
    too_large: IntCounter,
    /// Long-lived calls closed for idling, by kind.
    idle: [IntCounter; 4],
}

impl Admission {
    /// Admission under `limits`, counting refusals in `refused` (`sluice_refused_total`).
    pub fn new(limits: &Limits, refused: &IntCounterVec) -> Arc<Self> {
        let counter = |bound: String| refused.with_label_values(&[bound.as_str()]);
        let refusals = Refusals {
            bytes: Scope::ALL.map(|s| counter(format!("request_bytes{}", s.suffix()))),
            long: LongKind::ALL
                .map(|k| Scope::ALL.map(|s| counter(format!("{}{}", k.label(), s.suffix())))),
            too_large: counter("grpc_message_size".into()),
            idle: LongKind::ALL.map(|k| counter(format!("{}_idle", k.label()))),
        };
        Arc::new(Self {
            limits: limits.clone(),
            all: Usage::new(Scope::All, limits),
            peers: Mutex::default(),
            refused: refusals,
        })
    }

    /// The limits admission applies.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What all clients hold now.
    pub fn usage(&self) -> &Usage {
        &self.all
    }

    /// The scopes of a new connection from `peer`.
    pub fn connection(self: &Arc<Self>, peer: Option<IpAddr>) -> Scopes {
        let peer = peer.map(|ip| ip.to_canonical());
        let shared = {
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            match peers.get(&peer).and_then(Weak::upgrade) {
                Some(shared) => shared,
                None => {
                    let shared = Arc::new(PeerUsage {
                        usage: Usage::new(Scope::Peer, &self.limits),
                        ip: peer,
                        table: Arc::downgrade(self),
                    });
                    peers.insert(peer, Arc::downgrade(&shared));
                    shared
                }
            }
        };
        Scopes(Arc::new(ConnectionScopes {
            admission: Arc::clone(self),
            connection: Usage::new(Scope::Connection, &self.limits),
            peer: shared,
        }))
    }

    /// Counts a message refused for its size.
    pub(crate) fn refuse_too_large(&self) {
        self.refused.too_large.inc();
    }

    /// Counts a long-lived call of `kind` closed for idling.
    pub(crate) fn closed_idle(&self, kind: LongKind) {
        self.refused.idle[kind.index()].inc();
    }
}

/// One connection's three scopes; cheap to clone (one per call).
#[derive(Debug, Clone)]
pub struct Scopes(Arc<ConnectionScopes>);

#[derive(Debug)]
struct ConnectionScopes {
    admission: Arc<Admission>,
    connection: Usage,
    peer: Arc<PeerUsage>,
}

impl Scopes {
    fn levels(&self) -> [&Usage; 3] {
        [
            &self.0.connection,
            &self.0.peer.usage,
            &self.0.admission.all,
        ]
    }

    /// Takes `n` from the level `pick` chooses in every scope, or from none: the first scope
    /// without room, else `Ok`.
    fn take(&self, n: usize, pick: impl Fn(&Usage) -> &Level) -> Result<(), Scope> {
        let levels = self.levels();
        for (i, usage) in levels.iter().enumerate() {
            if !pick(usage).take(n) {
                for taken in &levels[..i] {
                    pick(taken).give(n);
                }
                return Err(Scope::ALL[i]);
            }
        }
        Ok(())
    }

    fn give(&self, n: usize, pick: impl Fn(&Usage) -> &Level) {
        for usage in self.levels() {
            pick(usage).give(n);
        }
    }

    /// The admission these scopes belong to.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.0.admission
    }

    /// Opens a call costing `bytes` held open: its [`Charge`], or the refusal to answer with.
    pub fn charge(&self, bytes: usize) -> Result<Charge, Status> {
        let charge = Charge(Arc::new(Held {
            scopes: self.clone(),
            bytes: AtomicUsize::new(0),
        }));
        charge.grow(bytes)?;
        Ok(charge)
    }

    /// A place for a long-lived call of `kind`, or the refusal to answer with.
    pub fn open_long(&self, kind: LongKind) -> Result<LongSlot, Status> {
        let i = kind.index();
        match self.take(1, |u| &u.long[i]) {
            Ok(()) => Ok(LongSlot {
                scopes: self.clone(),
                kind,
            }),
            Err(scope) => {
                self.admission().refused.long[i][scope as usize].inc();
                Err(Status::resource_exhausted(format!(
                    "too many {} {}",
                    kind.describe(),
                    scope.whose()
                )))
            }
        }
    }
}

/// The bytes one call holds, grown and shrunk as it goes; all given back when the last clone
/// is dropped (the call's future, its request body, and a long-lived call's answer each hold
/// one).
#[derive(Debug, Clone)]
pub struct Charge(Arc<Held>);

#[derive(Debug)]
struct Held {
    scopes: Scopes,
    bytes: AtomicUsize,
}

impl Charge {
    /// Holds `n` more bytes, or refuses (counted) if a scope has no room.
    pub fn grow(&self, n: usize) -> Result<(), Status> {
        if n == 0 {
            return Ok(());
        }
        let scopes = &self.0.scopes;
        match scopes.take(n, |u| &u.bytes) {
            Ok(()) => {
                self.0.bytes.fetch_add(n, Ordering::AcqRel);
                Ok(())
            }
            Err(scope) => {
                scopes.admission().refused.bytes[scope as usize].inc();
                Err(Status::resource_exhausted(format!(
                    "the request bytes held open {} are at their bound (docs/security.md, \
                     \"Memory a client can hold\")",
                    scope.whose()
                )))
            }
        }
    }

    /// Gives `n` of the bytes held back (never more than are held).
    pub fn shrink(&self, n: usize) {
        let held = self
            .0
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| Some(h - h.min(n)))
            .unwrap_or_else(|h| h);
        self.0.scopes.give(held.min(n), |u| &u.bytes);
    }

    /// The scopes charged.
    pub fn scopes(&self) -> &Scopes {
        &self.0.scopes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let n = *self.bytes.get_mut();
        self.scopes.give(n, |u| &u.bytes);
    }
}

/// A long-lived call's place; dropping it frees the place.
#[derive(Debug)]
pub struct LongSlot {
    scopes: Scopes,
    kind: LongKind,
}

impl LongSlot {
    /// The kind of call.
    pub fn kind(&self) -> LongKind {
        self.kind
    }

    /// The admission it was taken from.
    pub fn admission(&self) -> &Arc<Admission> {
        self.scopes.admission()
    }
}

impl Drop for LongSlot {
    fn drop(&mut self) {
        let i = self.kind.index();
        self.scopes.give(1, |u| &u.long[i]);
    }
}

#[cfg(test)]
mod tests;
