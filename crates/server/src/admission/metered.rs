//! A request body metered as it arrives ([`Metered`]).
//!
//! tonic's decoder reserves a message's whole declared length as soon as its 5-byte prefix
//! arrives, and keeps what has come in its buffer until the message is complete; a unary call's
//! message is then held until the client ends its half of the stream. [`Metered`] reads the same
//! framing as the bytes pass and charges the call for them first, so a message over its API's
//! size, or over what the call's scopes may hold, is refused before tonic reserves anything.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use tonic::Status;

use super::Charge;
use super::answer::Activity;
use super::call::{COVERED, Call};

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
    /// What is charged for messages now: `kept` plus the unfinished message, beyond what the
    /// call's cost covers ([`COVERED`]).
    charged: usize,
    /// A unary call's data not yet passed on (waiting for the end of the stream).
    held_back: BytesMut,
    /// Refused: the body ends.
    failed: bool,
    /// Touched on every frame of a long-lived call (its idle clock).
    activity: Option<Arc<Activity>>,
}

impl<B> Metered<B> {
    /// `inner`, the body of a `call` charged to `charge`.
    pub fn new(inner: B, call: Call, charge: Charge, activity: Option<Arc<Activity>>) -> Self {
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
        let now = (self.kept + self.framing.unfinished()).saturating_sub(COVERED);
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

#[cfg(test)]
mod tests;
