use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt as _, StreamBody};
use prometheus::IntCounterVec;
use proptest::prelude::*;
use tokio::sync::mpsc;

use super::*;
use crate::admission::{Admission, LongKind};
use crate::limits::Limits;

fn message(len: usize) -> Bytes {
    let mut out = BytesMut::new();
    out.put_u8(0);
    out.put_u32(len as u32);
    out.put_bytes(7, len);
    out.freeze()
}

proptest! {
    /// However messages are cut into chunks, the framing completes each once, at its last byte,
    /// and holds the declared length of the one unfinished between.
    #[test]
    fn framing_follows_any_chunking(
        lens in prop::collection::vec(0..300usize, 1..8),
        cuts in prop::collection::vec(1..97usize, 1..40),
    ) {
        let wire: Vec<u8> = lens.iter().flat_map(|&l| message(l)).collect();
        let mut framing = Framing::default();
        let (mut at, mut completed, mut cut) = (0, 0, cuts.iter().cycle());
        while at < wire.len() {
            let end = (at + cut.next().expect("cycle")).min(wire.len());
            completed += framing.feed(&wire[at..end], 300).expect("within max").completed;
            at = end;
            // What is complete so far, message by message.
            let mut whole = 0;
            let mut starts = 0;
            for &l in &lens {
                if starts + 5 + l <= at {
                    whole += 5 + l;
                    starts += 5 + l;
                } else {
                    let seen = at - starts;
                    let expect = if seen >= 5 { 5 + l } else { seen };
                    prop_assert_eq!(framing.unfinished(), expect);
                    break;
                }
            }
            prop_assert_eq!(completed, whole);
        }
        prop_assert_eq!(framing.unfinished(), 0);
        prop_assert_eq!(completed, wire.len());
    }
}

#[test]
fn a_declared_length_over_the_max_is_refused_at_its_prefix() {
    let mut framing = Framing::default();
    let wire = message(301);
    assert_eq!(framing.feed(&wire[..3], 300), Ok(Fed::default()));
    assert_eq!(framing.feed(&wire[3..5], 300), Err(301));
    let mut framing = Framing::default();
    assert_eq!(framing.feed(&message(300)[..5], 300), Ok(Fed::default()));
}

fn admission(limits: Limits) -> (Arc<Admission>, IntCounterVec) {
    let refused = IntCounterVec::new(prometheus::Opts::new("r", "r"), &["bound"]).expect("metric");
    (Admission::new(&limits, &refused), refused)
}

type Chunk = Result<Frame<Bytes>, std::convert::Infallible>;
type Chunks = mpsc::UnboundedSender<Chunk>;
type TestBody = StreamBody<tokio_stream::wrappers::UnboundedReceiverStream<Chunk>>;

/// A request body fed by the test: each send is a chunk, dropping the sender ends it.
fn body() -> (Chunks, TestBody) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        tx,
        StreamBody::new(tokio_stream::wrappers::UnboundedReceiverStream::new(rx)),
    )
}

fn unary() -> Call {
    Call::of("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
}

/// A unary call's message is charged while it is held, reaches the decoder only once the client
/// ends the stream, and every byte is given back with the call.
#[tokio::test]
async fn a_unary_message_waits_for_the_end_of_its_stream() {
    let (admission, _) = admission(Limits::default());
    let scopes = admission.connection(Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let charge = scopes.charge(unary().cost).expect("room");
    let (tx, inner) = body();
    let mut metered = Metered::new(inner, unary(), charge.clone(), None);
    tx.send(Ok(Frame::data(message(3_000)))).expect("open");
    let polled = futures_util::poll!(metered.frame());
    assert!(polled.is_pending(), "held back until the stream ends");
    assert_eq!(
        admission.usage().bytes(),
        unary().cost + 3_005 - COVERED,
        "the bytes beyond what the call's cost covers"
    );
    drop(tx);
    let data = metered
        .frame()
        .await
        .expect("a frame")
        .expect("ok")
        .into_data()
        .expect("data");
    assert_eq!(data, message(3_000));
    assert!(metered.frame().await.is_none());
    drop((metered, charge));
    assert_eq!(admission.usage().bytes(), 0);
}

/// A message over its API's size is refused at its prefix, before the decoder reserves it.
#[tokio::test]
async fn an_oversized_message_is_refused_at_its_prefix() {
    let (admission, refused) = admission(Limits::default());
    let scopes = admission.connection(None);
    let (tx, inner) = body();
    let mut metered = Metered::new(inner, unary(), scopes.charge(0).expect("room"), None);
    tx.send(Ok(Frame::data(message(4 << 20).slice(..5))))
        .expect("open");
    let err = metered
        .frame()
        .await
        .expect("a frame")
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(err.message().contains("at most 131072"), "{err}");
    assert!(metered.frame().await.is_none(), "the body ends");
    assert_eq!(refused.with_label_values(&["grpc_message_size"]).get(), 1);
}

/// A message its connection has no room for is refused when its prefix declares it; a stream's
/// completed messages are given back at once.
#[tokio::test]
async fn unfinished_messages_are_charged_at_their_declared_length() {
    let limits = Limits {
        request_bytes_per_connection: 100 * 1024,
        ..Limits::default()
    };
    let (admission, _) = admission(limits);
    let scopes = admission.connection(None);
    let rlqs =
        Call::of("/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas");
    let (tx, inner) = body();
    let mut metered = Metered::new(inner, rlqs, scopes.charge(0).expect("room"), None);
    let big = message(60 * 1024);
    tx.send(Ok(Frame::data(big.slice(..100)))).expect("open");
    let first = metered
        .frame()
        .await
        .expect("a frame")
        .expect("within bounds");
    assert_eq!(
        first.into_data().expect("data").len(),
        100,
        "a stream's bytes pass at once"
    );
    assert_eq!(admission.usage().bytes(), 5 + 60 * 1024 - COVERED);
    tx.send(Ok(Frame::data(big.slice(100..)))).expect("open");
    metered.frame().await.expect("a frame").expect("the rest");
    assert_eq!(
        admission.usage().bytes(),
        0,
        "a stream's message is given back when complete"
    );
    tx.send(Ok(Frame::data(message(200 * 1024).slice(..5))))
        .expect("open");
    let err = metered
        .frame()
        .await
        .expect("a frame")
        .expect_err("no room");
    assert!(err.message().contains("on this connection"), "{err}");
    assert_eq!(admission.usage().bytes(), 0);
}

#[test]
fn calls_by_path() {
    assert_eq!(unary().long, None);
    assert_eq!(unary().max_message, 128 * 1024);
    assert_eq!(
        Call::of("/grpc.health.v1.Health/Watch").long,
        Some(LongKind::HealthWatch)
    );
    assert_eq!(Call::of("/grpc.health.v1.Health/Check").long, None);
    assert_eq!(
        Call::of("/sluice.v1.Quota/WatchQuota").long,
        Some(LongKind::WatchQuota)
    );
    assert_eq!(
        Call::of("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo").long,
        Some(LongKind::Reflection)
    );
    assert_eq!(Call::of("/nope").max_message, 4 * 1024);
    assert_eq!(Call::of("").long, None);
}
