//! One HTTP/2 connection and all its streams in one task, so the answers of concurrent streams
//! leave in one write.
//!
//! hyper runs each stream of an HTTP/2 connection as a future its executor spawns. With tokio's
//! executor on a multi-threaded runtime, every stream that finishes wakes the connection's task
//! at once, often from another worker, and the connection writes and flushes that one answer:
//! 0.8–0.9 write syscalls and ~0.4 context switches per request under load, which was most of
//! what a decision cost (issue 29: 17–18 µs of CPU per request for a hot key). Here the
//! connection's executor ([`Streams`]) hands each stream to the connection's own task
//! ([`OneTask`]), which polls the streams first and the connection after them, so every answer
//! ready by then goes out in one flush: 0.07 writes and 0.05 context switches per request,
//! 11 µs. Connections are still tasks of the multi-threaded runtime: several connections (Envoy
//! opens one per worker) use every core, while one connection's streams share one.
//!
//! The price: a stream that computes for long holds up the other streams of its connection
//! (none does: decisions are in memory, store calls are awaited, and lists are paged).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::FutureExt as _;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::task::AtomicWaker;

/// A stream's future, as hyper hands it over.
type StreamFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Rounds of "streams, then the connection" in one poll before yielding to other tasks (each
/// round runs the streams the last one accepted).
const ROUNDS: usize = 8;

/// What the executor and the connection's task share: streams handed over and not yet picked
/// up, and the task to wake when one is.
#[derive(Default)]
struct Handover {
    queue: Mutex<Vec<StreamFuture>>,
    task: AtomicWaker,
}

/// The executor of one connection: hyper calls [`execute`](hyper::rt::Executor::execute) for
/// each stream it accepts, and the stream runs in the connection's [`OneTask`].
#[derive(Clone, Default)]
pub struct Streams(Arc<Handover>);

impl<F> hyper::rt::Executor<F> for Streams
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, future: F) {
        // A stream that panics ends alone, as its own task would have: not the connection's
        // task, which carries every other stream of the connection.
        let isolated = std::panic::AssertUnwindSafe(future)
            .catch_unwind()
            .map(|ended| {
                if ended.is_err() {
                    tracing::error!("a gRPC stream panicked; its connection goes on");
                }
            });
        self.0
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Box::pin(isolated));
        self.0.task.wake();
    }
}

/// A connection future `C` driven together with the streams its [`Streams`] executor was given.
/// Ends when the connection does (streams left then belong to a closed connection and are
/// dropped).
pub struct OneTask<C> {
    connection: Pin<Box<C>>,
    streams: FuturesUnordered<StreamFuture>,
    handover: Arc<Handover>,
}

impl<C: Future> OneTask<C> {
    /// Drives `connection`, whose executor is `streams`.
    pub fn new(connection: C, streams: &Streams) -> Self {
        Self {
            connection: Box::pin(connection),
            streams: FuturesUnordered::new(),
            handover: Arc::clone(&streams.0),
        }
    }

    /// The connection (to start a graceful shutdown on it).
    pub fn connection(&mut self) -> Pin<&mut C> {
        self.connection.as_mut()
    }

    /// Moves the streams handed over since the last call into `streams`; whether there were any.
    fn pick_up(&mut self) -> bool {
        let handed = std::mem::take(
            &mut *self
                .handover
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let any = !handed.is_empty();
        self.streams.extend(handed);
        any
    }
}

impl<C: Future> Future for OneTask<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = self.get_mut();
        this.handover.task.register(cx.waker());
        this.pick_up();
        for _ in 0..ROUNDS {
            // The streams first: each answer they can give is queued on the connection before
            // it writes, so one flush carries them all.
            while let Poll::Ready(Some(())) = this.streams.poll_next_unpin(cx) {}
            if let Poll::Ready(out) = this.connection.as_mut().poll(cx) {
                return Poll::Ready(out);
            }
            // Streams the connection just accepted run now, not at the next wake-up.
            if !this.pick_up() {
                return Poll::Pending;
            }
        }
        // Busy: let other connections run, and come back.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl<C> Drop for OneTask<C> {
    /// Streams handed over but never picked up hold the executor, and so this handover: clear
    /// it, or such a stream and its buffers would outlive the connection.
    fn drop(&mut self) {
        self.handover
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor as _;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A stream handed over during the connection's poll runs in the same poll, and the
    /// connection is polled again after it (the write that carries its answer).
    #[tokio::test]
    async fn streams_run_before_the_connection_polls_again() {
        let streams = Streams::default();
        let ran = Arc::new(AtomicUsize::new(0));
        let polls = Arc::new(AtomicUsize::new(0));
        let (exec, r, p) = (streams.clone(), Arc::clone(&ran), Arc::clone(&polls));
        let connection = std::future::poll_fn(move |_| {
            let n = p.fetch_add(1, Ordering::SeqCst);
            if n == 0 {
                for _ in 0..3 {
                    let r = Arc::clone(&r);
                    exec.execute(async move {
                        r.fetch_add(1, Ordering::SeqCst);
                    });
                }
                return Poll::Pending;
            }
            // The second poll sees every stream done.
            assert_eq!(r.load(Ordering::SeqCst), 3);
            Poll::Ready(n)
        });
        let polled = OneTask::new(connection, &streams).await;
        assert_eq!(polled, 1, "the connection was polled twice, in one wake-up");
        assert_eq!(ran.load(Ordering::SeqCst), 3);
    }

    /// A stream waiting on something else wakes the task when it is ready, and finishes.
    #[tokio::test]
    async fn a_waiting_stream_wakes_the_task() {
        let streams = Streams::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        streams.execute(async move {
            rx.await.expect("sent");
            done_tx.send(()).expect("open");
        });
        let connection = std::future::poll_fn(move |cx| match done_rx.poll_recv(cx) {
            Poll::Ready(_) => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        });
        let task = tokio::spawn(OneTask::new(connection, &streams));
        tokio::task::yield_now().await;
        tx.send(()).expect("receiver");
        tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .expect("the connection ended")
            .expect("no panic");
    }

    /// A stream that panics ends alone: the others of its connection still finish.
    #[tokio::test]
    async fn a_panicking_stream_ends_alone() {
        let streams = Streams::default();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        streams.execute(async { panic!("a handler's bug") });
        streams.execute(async move {
            tokio::task::yield_now().await;
            done_tx.send(()).expect("open");
        });
        let connection = std::future::poll_fn(move |cx| done_rx.poll_recv(cx).map(|_| ()));
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            OneTask::new(connection, &streams),
        )
        .await
        .expect("the other stream finished and the connection with it");
    }
}
