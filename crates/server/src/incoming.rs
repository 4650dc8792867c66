//! Accept loops with a cap on open connections (the gRPC and admin ports): a connection is
//! accepted only while fewer than the cap are open, so the rest wait in the kernel's listen
//! backlog instead of each costing a connection's buffers and a task here. Envoy opens a handful
//! of gRPC connections per worker; the caps are far above that.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::Stream;
use tokio_util::sync::PollSemaphore;
use tonic::transport::server::{Connected, TcpIncoming};

/// Accepted connections, at most `max` open at once.
pub struct CappedIncoming {
    inner: TcpIncoming,
    room: PollSemaphore,
    permit: Option<OwnedSemaphorePermit>,
}

impl CappedIncoming {
    /// Accepts on `listener` with TCP_NODELAY (without it Nagle's algorithm and delayed ACKs add
    /// ~40 ms to small gRPC answers) and TCP keepalive (a peer that vanished without a FIN is
    /// found even with HTTP/2 pings off: tonic's own keepalive setting does not apply to an
    /// incoming stream it did not bind).
    pub fn new(listener: TcpListener, max: usize, tcp_keepalive: Duration) -> Self {
        Self {
            inner: TcpIncoming::from(listener)
                .with_nodelay(Some(true))
                .with_keepalive(Some(tcp_keepalive)),
            room: PollSemaphore::new(Arc::new(Semaphore::new(max.max(1)))),
            permit: None,
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
        match ready!(Pin::new(&mut self.inner).poll_next(cx)) {
            Some(Ok(io)) => {
                let permit = self.permit.take().expect("acquired above");
                Poll::Ready(Some(Ok(Held {
                    io,
                    _permit: permit,
                })))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None => Poll::Ready(None),
        }
    }
}

/// An accepted connection holding its place until it is closed.
pub struct Held {
    io: TcpStream,
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

impl AsyncWrite for Held {
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
