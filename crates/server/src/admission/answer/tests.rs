use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt as _, StreamBody};
use prometheus::IntCounterVec;
use tokio::sync::mpsc;

use super::*;
use crate::admission::call::Call;
use crate::admission::metered::Metered;
use crate::admission::{Admission, LongKind};
use crate::limits::Limits;

fn message(len: usize) -> Bytes {
    let mut out = BytesMut::new();
    out.put_u8(0);
    out.put_u32(len as u32);
    out.put_bytes(7, len);
    out.freeze()
}

fn admission(limits: Limits) -> (Arc<Admission>, IntCounterVec) {
    let refused = IntCounterVec::new(prometheus::Opts::new("r", "r"), &["bound"]).expect("metric");
    (Admission::new(&limits, &refused), refused)
}

type Chunk = Result<Frame<Bytes>, Status>;
type Chunks = mpsc::UnboundedSender<Chunk>;
type TestBody = StreamBody<tokio_stream::wrappers::UnboundedReceiverStream<Chunk>>;

/// A body fed by the test: each send is a chunk, dropping the sender ends it.
fn body() -> (Chunks, TestBody) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        tx,
        StreamBody::new(tokio_stream::wrappers::UnboundedReceiverStream::new(rx)),
    )
}

/// A unary answer keeps its call charged until it ends, and is charged for its bytes beyond
/// what the call's cost covers; one its scopes have no room for ends with RESOURCE_EXHAUSTED.
#[tokio::test]
async fn an_answer_holds_its_call_until_it_ends() {
    let limits = Limits {
        request_bytes_per_connection: 40 * 1024,
        ..Limits::default()
    };
    let (admission, _) = admission(limits);
    let scopes = admission.connection(None);
    let (tx, inner) = body();
    let mut answer = Answer::new(inner, scopes.charge(16 * 1024).expect("room"), None);
    tx.send(Ok(Frame::data(Bytes::from(vec![1; 10 * 1024]))))
        .expect("open");
    answer.frame().await.expect("a frame").expect("data");
    assert_eq!(admission.usage().bytes(), 16 * 1024 + 10 * 1024 - COVERED);
    tx.send(Ok(Frame::data(Bytes::from(vec![1; 20 * 1024]))))
        .expect("open");
    let end = answer.frame().await.expect("a frame").expect("trailers");
    let trailers = end.into_trailers().expect("trailers");
    assert_eq!(trailers["grpc-status"], "8", "no room for 20 KiB more");
    assert!(answer.frame().await.is_none());
    drop(answer);
    assert_eq!(admission.usage().bytes(), 0);
}

/// A long-lived call's answer is closed with UNAVAILABLE after its idle time with no message
/// either way, and not before: a request message restarts the clock.
#[tokio::test(start_paused = true)]
async fn an_idle_long_call_is_closed() {
    let (admission, refused) = admission(Limits::default());
    let scopes = admission.connection(None);
    let slot = scopes.open_long(LongKind::Reflection).expect("room");
    let charge = scopes.charge(10).expect("room");
    let activity = Activity::new();
    let (_answers, inner) = body();
    let mut tended = Answer::new(
        inner,
        charge.clone(),
        Some(Lasting {
            slot,
            activity: Arc::clone(&activity),
            idle: Duration::from_secs(60),
        }),
    );
    let (requests, inner) = body();
    let mut metered = Metered::new(
        inner,
        Call::of("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
        charge,
        Some(Arc::clone(&activity)),
    );
    tokio::time::advance(Duration::from_secs(50)).await;
    requests.send(Ok(Frame::data(message(3)))).expect("open");
    metered.frame().await.expect("a frame").expect("ok");
    let closed = tokio::time::timeout(Duration::from_secs(59), tended.frame()).await;
    assert!(closed.is_err(), "the request 50 s in restarted the clock");
    let trailers = tended
        .frame()
        .await
        .expect("a frame")
        .expect("ok")
        .into_trailers()
        .expect("trailers");
    assert_eq!(trailers["grpc-status"], "14");
    assert!(tended.frame().await.is_none());
    assert_eq!(
        refused
            .with_label_values(&["reflection_streams_idle"])
            .get(),
        1
    );
    drop((tended, metered));
    assert_eq!(admission.usage().long(LongKind::Reflection), 0);
    assert_eq!(admission.usage().bytes(), 0);
    let _ = requests;
}
