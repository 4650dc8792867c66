//! A call's answer under admission ([`Answer`]): the call stays charged until its answer is
//! written out, and a long-lived call is closed when it idles.
//!
//! A client that never reads keeps every answer it asked for in memory (hyper holds the first
//! chunk until the client's window lets it go), and frees none of its streams: without the
//! charge, a call's budget came back the moment its handler returned, so one connection could
//! hold 1 024 unread answers and open more elsewhere.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tonic::Status;

use super::call::COVERED;
use super::{Charge, LongSlot};

/// When a long-lived call last carried a message either way.
#[derive(Debug)]
pub struct Activity {
    origin: Instant,
    /// Milliseconds since `origin`.
    last: AtomicU64,
}

impl Activity {
    /// A clock that starts now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            origin: Instant::now(),
            last: AtomicU64::new(0),
        })
    }

    /// Something passed, either way.
    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.fetch_max(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.origin + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }
}

/// What a long-lived call holds besides its charge, and when it idles.
pub struct Lasting {
    /// Its place among the long-lived calls.
    pub slot: LongSlot,
    /// Its idle clock (the request body touches it too).
    pub activity: Arc<Activity>,
    /// How long it may carry nothing.
    pub idle: Duration,
}

/// An answer that holds its call's [`Charge`] until it ends. A unary answer's bytes beyond what
/// the call's cost covers are charged as they go out (one over what the call's scopes have room
/// for ends the answer with `RESOURCE_EXHAUSTED`); a long-lived answer's are not (what it has
/// queued is bounded per stream by the HTTP/2 send buffer and its handler's queue, and the
/// streams are counted), and it ends with `UNAVAILABLE` (counted) once it has carried no
/// message either way for its kind's idle time: the client's next call opens a new stream.
pub struct Answer<B> {
    inner: B,
    charge: Charge,
    /// Answer bytes so far (unary).
    sent: usize,
    lasting: Option<(Lasting, Pin<Box<Sleep>>)>,
    closed: bool,
}

impl<B> Answer<B> {
    /// `inner`, the answer of a call charged to `charge`, long-lived if `lasting`.
    pub fn new(inner: B, charge: Charge, lasting: Option<Lasting>) -> Self {
        Self {
            inner,
            charge,
            sent: 0,
            lasting: lasting.map(|l| {
                let timer = Box::pin(tokio::time::sleep(l.idle));
                (l, timer)
            }),
            closed: false,
        }
    }

    /// Trailers that end the answer with `status`.
    fn end_with(&mut self, status: &Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.closed = true;
        let mut trailers = http::HeaderMap::new();
        match status.add_header(&mut trailers) {
            Ok(()) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Err(_) => Poll::Ready(None),
        }
    }

    /// How long the long-lived call has idled if it has idled out (counted), re-arming its
    /// timer if not.
    fn idled(&mut self, cx: &mut Context<'_>) -> Option<Duration> {
        let (lasting, timer) = self.lasting.as_mut()?;
        while timer.as_mut().poll(cx).is_ready() {
            let due = lasting.activity.last() + lasting.idle;
            if due > Instant::now() {
                timer.as_mut().reset(due);
                continue;
            }
            lasting.slot.admission().closed_idle(lasting.slot.kind());
            return Some(lasting.idle);
        }
        None
    }
}

impl<B> Body for Answer<B>
where
    B: Body<Data = Bytes, Error = Status> + Unpin,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if this.closed {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            match &this.lasting {
                Some((lasting, _)) => lasting.activity.touch(),
                None => {
                    if let Some(Ok(data)) = frame.as_ref().map(|f| f.as_ref().map(Frame::data_ref))
                        && let Some(data) = data
                    {
                        let before = this.sent.saturating_sub(COVERED);
                        this.sent += data.len();
                        let grown = this.sent.saturating_sub(COVERED) - before;
                        if let Err(status) = this.charge.grow(grown) {
                            return this.end_with(&status);
                        }
                    }
                }
            }
            return Poll::Ready(frame);
        }
        if let Some(idle) = this.idled(cx) {
            let status = Status::unavailable(format!(
                "closed after {idle:?} without a message either way; open a new stream"
            ));
            return this.end_with(&status);
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.closed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
