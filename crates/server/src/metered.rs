//! Each gRPC call under [`crate::admission`]: what kind of call its path is ([`Call::of`]), its
//! request body metered as it arrives ([`Metered`]), and a long-lived call's answer closed when
//! the call idles ([`Tended`]).
//!
//! tonic's decoder reserves a message's whole declared length as soon as its 5-byte prefix
//! arrives, and keeps what has come in its buffer until the message is complete; a unary call's
//! message is then held until the client ends its half of the stream. [`Metered`] reads the same
//! framing as the bytes pass and charges the call for them first, so a message over its API's
//! size, or over what the call's scopes may hold, is refused before tonic reserves anything.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tonic::Status;

use crate::admission::{Admission, Charge, LongKind, LongSlot};

/// What kind of call a path is: the largest message it takes, what it costs held open, and
/// whether it is long-lived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// The largest request message the call takes (its API's decode limit).
    pub max_message: usize,
    /// What the call costs held open beyond its headers and messages: the stream's state in
    /// HTTP/2, hyper and tonic and its handler's future (measured by `loadtest/pin-memory.sh`,
    /// rounded up).
    pub cost: usize,
    /// A long-lived call's kind; `None` for a call answered once.
    pub long: Option<LongKind>,
}

const KIB: usize = 1024;

impl Call {
    /// The call `path` (`/package.Service/Method`) is.
    pub fn of(path: &str) -> Call {
        let unary = |max_message| Call {
            max_message,
            cost: 16 * KIB,
            long: None,
        };
        let long = |kind, max_message, cost| Call {
            max_message,
            cost,
            long: Some(kind),
        };
        let (service, method) = path
            .strip_prefix('/')
            .and_then(|p| p.split_once('/'))
            .unwrap_or(("", ""));
        match (service, method) {
            // Envoy's descriptors and a request's headers: KiBs (Envoy's own header limit is
            // 60 KiB by default).
            ("envoy.service.ratelimit.v3.RateLimitService", _) => unary(128 * KIB),
            ("envoy.service.auth.v3.Authorization", _) => unary(256 * KIB),
            ("envoy.service.rate_limit_quota.v3.RateLimitQuotaService", _) => {
                long(LongKind::Rlqs, 1024 * KIB, 24 * KIB)
            }
            ("sluice.v1.Quota", "WatchQuota") => long(LongKind::WatchQuota, 64 * KIB, 16 * KIB),
            ("grpc.health.v1.Health", "Watch") => long(LongKind::HealthWatch, 4 * KIB, 16 * KIB),
            ("grpc.health.v1.Health", _) => unary(4 * KIB),
            (
                "grpc.reflection.v1.ServerReflection" | "grpc.reflection.v1alpha.ServerReflection",
                _,
            ) => long(LongKind::Reflection, 16 * KIB, 24 * KIB),
            ("sluice.v1.Quota" | "sluice.v1.Usage" | "sluice.v1.Holds", _) => unary(64 * KIB),
            // Answered UNIMPLEMENTED by tonic.
            _ => unary(4 * KIB),
        }
    }

    /// Whether a completed message stays charged until the call ends (a unary call's message
    /// lives in its handler) or is given back at once (a stream's handler takes one message at a
    /// time).
    fn keeps_messages(self) -> bool {
        self.long.is_none()
    }
}

/// The bytes of a request's header list as HTTP/2 counts them (name, value and 32 bytes each).
pub fn header_bytes(headers: &http::HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 32)
        .sum()
}

/// Where a request body is in gRPC's framing: messages of `[flag: u8][length: u32 BE][bytes]`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Framing {
    /// The current message's prefix, as far as it has come.
    prefix: [u8; 5],
    prefix_len: usize,
    /// The current message's declared length once its prefix is complete.
    declared: Option<usize>,
    /// Bytes of the current message still due.
    due: usize,
}

/// What one chunk of a body did to its framing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fed {
    /// Prefix and message bytes of the messages the chunk completed.
    pub completed: usize,
}

impl Framing {
    /// Reads `data`; an error carries a declared length over `max`.
    pub(crate) fn feed(&mut self, mut data: &[u8], max: usize) -> Result<Fed, usize> {
        let mut fed = Fed::default();
        while !data.is_empty() {
            match self.declared {
                None => {
                    let n = (5 - self.prefix_len).min(data.len());
                    self.prefix[self.prefix_len..self.prefix_len + n].copy_from_slice(&data[..n]);
                    self.prefix_len += n;
                    data = &data[n..];
                    if self.prefix_len == 5 {
                        let len = u32::from_be_bytes([
                            self.prefix[1],
                            self.prefix[2],
                            self.prefix[3],
                            self.prefix[4],
                        ]) as usize;
                        if len > max {
                            return Err(len);
                        }
                        self.declared = Some(len);
                        self.due = len;
                    }
                }
                Some(_) => {
                    let n = self.due.min(data.len());
                    self.due -= n;
                    data = &data[n..];
                }
            }
            if let Some(len) = self.declared
                && self.due == 0
            {
                fed.completed += 5 + len;
                *self = Framing::default();
            }
        }
        Ok(fed)
    }

    /// What the unfinished message holds in the decoder: its prefix and whole declared length
    /// (reserved when the prefix arrives), or the part of a prefix seen so far.
    pub(crate) fn unfinished(&self) -> usize {
        match self.declared {
            Some(len) => 5 + len,
            None => self.prefix_len,
        }
    }
}

/// A request body charged for what it holds: an unfinished message at its declared length, a
/// unary call's completed messages until the call ends. A message over the call's
/// [`Call::max_message`], or bytes its scopes have no room for, end the body with
/// `RESOURCE_EXHAUSTED` before the decoder sees them.
///
/// A unary call's last data is held back until its client ends the stream (Envoy's one DATA
/// frame carries END_STREAM, so nothing waits then): tonic decodes a unary message as soon as it
/// is complete and holds it until the end of the stream, and a message decodes to many times its
/// size (an empty descriptor is 2 bytes on the wire and a hundred in memory).
pub struct Metered<B> {
    inner: B,
    call: Call,
    charge: Charge,
    framing: Framing,
    /// Completed messages' bytes still charged (unary calls).
    kept: usize,
    /// What is charged for messages now: `kept` plus the unfinished message.
    charged: usize,
    /// A unary call's data not yet passed on (waiting for the end of the stream).
    held_back: BytesMut,
    /// Refused: the body ends.
    failed: bool,
    /// Touched on every frame of a long-lived call (its idle clock).
    activity: Option<std::sync::Arc<Activity>>,
}

impl<B> Metered<B> {
    /// `inner`, the body of a `call` charged to `charge`.
    pub fn new(
        inner: B,
        call: Call,
        charge: Charge,
        activity: Option<std::sync::Arc<Activity>>,
    ) -> Self {
        Self {
            inner,
            call,
            charge,
            framing: Framing::default(),
            kept: 0,
            charged: 0,
            held_back: BytesMut::new(),
            failed: false,
            activity,
        }
    }

    /// Charges `data`, or says why not.
    fn meter(&mut self, data: &[u8]) -> Result<(), Status> {
        let fed = self
            .framing
            .feed(data, self.call.max_message)
            .map_err(|len| {
                self.charge.scopes().admission().refuse_too_large();
                Status::resource_exhausted(format!(
                    "a message of {len} bytes; this method takes at most {} (docs/security.md)",
                    self.call.max_message
                ))
            })?;
        if self.call.keeps_messages() {
            self.kept += fed.completed;
        }
        let now = self.kept + self.framing.unfinished();
        if now > self.charged {
            self.charge.grow(now - self.charged)?;
        } else {
            self.charge.shrink(self.charged - now);
        }
        self.charged = now;
        Ok(())
    }
}

impl<B> Body for Metered<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        loop {
            if this.failed {
                return Poll::Ready(None);
            }
            let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => return Poll::Ready(Some(Err(Status::from_error(e.into())))),
                None if this.held_back.is_empty() => return Poll::Ready(None),
                None => return Poll::Ready(Some(Ok(Frame::data(this.held_back.split().freeze())))),
            };
            if let Some(activity) = &this.activity {
                activity.touch();
            }
            let data = match frame.into_data() {
                Ok(data) => data,
                // Trailers: pass on what was held back first (tonic reads trailers after the
                // message), the trailers are dropped (a request's trailers carry nothing sluice
                // reads).
                Err(_) if !this.held_back.is_empty() => {
                    return Poll::Ready(Some(Ok(Frame::data(this.held_back.split().freeze()))));
                }
                Err(_) => continue,
            };
            if let Err(status) = this.meter(&data) {
                this.failed = true;
                return Poll::Ready(Some(Err(status)));
            }
            if !this.call.keeps_messages() {
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            if this.held_back.is_empty() && this.inner.is_end_stream() {
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            this.held_back.extend_from_slice(&data);
            if this.inner.is_end_stream() {
                return Poll::Ready(Some(Ok(Frame::data(this.held_back.split().freeze()))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || (self.held_back.is_empty() && self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// When a long-lived call last carried a message either way.
#[derive(Debug)]
pub struct Activity {
    origin: Instant,
    /// Milliseconds since `origin`.
    last: std::sync::atomic::AtomicU64,
}

impl Activity {
    /// A clock that starts now.
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            origin: Instant::now(),
            last: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn touch(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last
            .fetch_max(ms, std::sync::atomic::Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.origin + Duration::from_millis(self.last.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// A long-lived call's answer: holds the call's place and charge while it is open, and ends it
/// with `UNAVAILABLE` (counted) once it has carried no message either way for its kind's idle
/// time. The client's next call opens a new stream.
pub struct Tended<B> {
    inner: B,
    _slot: LongSlot,
    _charge: Charge,
    admission: std::sync::Arc<Admission>,
    activity: std::sync::Arc<Activity>,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
    closed: bool,
}

impl<B> Tended<B> {
    /// `inner`, the answer of a call holding `slot` and `charge`, idle after `idle`.
    pub fn new(
        inner: B,
        (slot, charge): (LongSlot, Charge),
        admission: std::sync::Arc<Admission>,
        activity: std::sync::Arc<Activity>,
        idle: Duration,
    ) -> Self {
        Self {
            inner,
            _slot: slot,
            _charge: charge,
            admission,
            activity,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
            closed: false,
        }
    }
}

impl<B> Body for Tended<B>
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
            this.activity.touch();
            return Poll::Ready(frame);
        }
        while this.timer.as_mut().poll(cx).is_ready() {
            let due = this.activity.last() + this.idle;
            if due > Instant::now() {
                this.timer.as_mut().reset(due);
                continue;
            }
            this.closed = true;
            this.admission.closed_idle(this._slot.kind());
            let status = Status::unavailable(format!(
                "closed after {:?} without a message either way; open a new stream",
                this.idle
            ));
            let mut trailers = http::HeaderMap::new();
            if status.add_header(&mut trailers).is_err() {
                return Poll::Ready(None);
            }
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
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
