//! Accept loops with a cap on open connections (the gRPC and admin ports): a connection is
//! accepted only while fewer than the cap are open, so the rest wait in the kernel's listen
//! backlog instead of each costing a connection's buffers and a task here. Envoy opens a handful
//! of gRPC connections per worker; the caps are far above that.
//!
//! A cap shared by every client is one a single client can fill, so two more bounds keep one
//! client from shutting a port: no peer address holds more than its share of the places (a
//! connection beyond it is closed as soon as it is accepted, and counted), and on the gRPC port
//! a connection that has not sent the HTTP/2 preface within a deadline is closed ([`FirstBytes`],
//! which `crate::grpc` puts on the stream that carries HTTP/2: the TCP connection, or the TLS
//! stream once its handshake is done). HTTP/2 pings only start after the preface, so a silent
//! connection used to hold its place for good.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use prometheus::IntCounter;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::Stream;
use tokio_util::sync::PollSemaphore;
use tonic::transport::server::{Connected, TcpIncoming};

/// `AsyncWrite` for a wrapper by its `io` field.
macro_rules! delegate_write {
    (impl[$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> AsyncWrite for $ty {
            fn poll_write(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                Pin::new(&mut self.io).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.io.is_write_vectored()
            }

            fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Pin::new(&mut self.io).poll_flush(cx)
            }

            fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Pin::new(&mut self.io).poll_shutdown(cx)
            }
        }
    };
}

/// The HTTP/2 client preface (`PRI * HTTP/2.0…`): what a gRPC client sends first.
pub const H2_PREFACE_BYTES: usize = 24;

/// Accepted connections, at most `max` open at once and `per_peer` from one address.
pub struct CappedIncoming {
    inner: TcpIncoming,
    room: PollSemaphore,
    permit: Option<OwnedSemaphorePermit>,
    peers: Arc<Peers>,
    /// Counts connections closed because their peer address held its share.
    refused: IntCounter,
}

/// Open connections per peer address.
struct Peers {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// A peer's place; dropping it frees the place.
struct PeerSlot {
    peers: Arc<Peers>,
    ip: IpAddr,
}

impl Peers {
    fn take(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_default();
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap_or_else(|p| p.into_inner());
        crate::limits::release(&mut open, &self.ip);
    }
}

impl CappedIncoming {
    /// Accepts on `listener` with TCP_NODELAY (without it Nagle's algorithm and delayed ACKs add
    /// ~40 ms to small gRPC answers) and TCP keepalive (a peer that vanished without a FIN is
    /// found even with HTTP/2 pings off: tonic's own keepalive setting does not apply to an
    /// incoming stream it did not bind).
    /// At most `per_peer` of the `max` places go to one peer address (IPv4-mapped IPv6 counted
    /// as IPv4); beyond it a connection is closed at once, counted in `refused`.
    pub fn new(
        listener: TcpListener,
        (max, per_peer): (usize, usize),
        tcp_keepalive: Duration,
        refused: IntCounter,
    ) -> Self {
        Self {
            inner: TcpIncoming::from(listener)
                .with_nodelay(Some(true))
                .with_keepalive(Some(tcp_keepalive)),
            room: PollSemaphore::new(Arc::new(Semaphore::new(max.max(1)))),
            permit: None,
            peers: Arc::new(Peers {
                max: per_peer.max(1),
                open: Mutex::default(),
            }),
            refused,
        }
    }
}

impl Stream for CappedIncoming {
    type Item = io::Result<Held>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // A place first, then accept: while none is free nothing is accepted.
        if self.permit.is_none() {
            match ready!(self.room.poll_acquire(cx)) {
                Some(permit) => self.permit = Some(permit),
                None => return Poll::Ready(None),
            }
        }
        loop {
            let io = match ready!(Pin::new(&mut self.inner).poll_next(cx)) {
                Some(Ok(io)) => io,
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => return Poll::Ready(None),
            };
            let Some(peer) = io.peer_addr().ok().map(|a| a.ip().to_canonical()) else {
                continue;
            };
            let Some(slot) = self.peers.take(peer) else {
                // Closed at once (dropped): the place stays free for other peers.
                self.refused.inc();
                tracing::debug!(%peer, "connection refused: this address holds its share");
                continue;
            };
            let permit = self.permit.take().expect("acquired above");
            return Poll::Ready(Some(Ok(Held {
                io,
                _peer: slot,
                _permit: permit,
            })));
        }
    }
}

/// An accepted connection holding its places until it is closed.
pub struct Held {
    io: TcpStream,
    _peer: PeerSlot,
    _permit: OwnedSemaphorePermit,
}

impl Connected for Held {
    type ConnectInfo = <TcpStream as Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl AsyncRead for Held {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

delegate_write!(impl[] Held);

/// A stream that must deliver its first `bytes` within a deadline of being wrapped, or its next
/// read fails (and is counted): the gRPC port's HTTP/2 preface, over TCP or after a TLS
/// handshake. HTTP/2 pings only start after the preface, so without this a silent connection
/// held its place for good.
pub struct FirstBytes<IO> {
    io: IO,
    /// Until the first bytes came: how many are still due, and by when.
    due: Option<Due>,
}

struct Due {
    left: usize,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timed_out: IntCounter,
}

impl<IO> FirstBytes<IO> {
    /// `io`, whose first `bytes` must arrive within `deadline`'s time (counted in its counter
    /// if not); no deadline if `None`.
    pub fn new(io: IO, bytes: usize, deadline: Option<(Duration, IntCounter)>) -> Self {
        Self {
            io,
            due: deadline.map(|(timeout, timed_out)| Due {
                left: bytes,
                deadline: Box::pin(tokio::time::sleep(timeout)),
                timed_out,
            }),
        }
    }
}

impl<IO: Connected> Connected for FirstBytes<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for FirstBytes<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        let Some(due) = &mut self.due else {
            return polled;
        };
        match &polled {
            Poll::Ready(Ok(())) => {
                let read = buf.filled().len() - before;
                due.left = due.left.saturating_sub(read);
                // All came, or the peer closed: no deadline any more.
                if due.left == 0 || read == 0 {
                    self.due = None;
                }
            }
            Poll::Ready(Err(_)) => {}
            Poll::Pending => {
                if due.deadline.as_mut().poll(cx).is_ready() {
                    due.timed_out.inc();
                    self.due = None;
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no HTTP/2 preface within the handshake deadline",
                    )));
                }
            }
        }
        polled
    }
}

delegate_write!(impl[IO: AsyncWrite + Unpin] FirstBytes<IO>);
