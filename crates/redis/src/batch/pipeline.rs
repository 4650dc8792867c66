//! One batch on the wire: the queued calls ([`Item`]) sent as one pipeline, each call handed its
//! own answer (or the pipeline's error).

use redis::{Cmd, RedisError, Value};
use tokio::sync::oneshot;

/// One queued script call.
pub(super) struct Item {
    pub(super) cmd: Cmd,
    pub(super) slot: u16,
    pub(super) reply: oneshot::Sender<Result<Value, RedisError>>,
}

/// Sends `batch` as one pipeline through `run` and hands each call its answer; returns whether
/// any call answered MOVED (the slot map is stale).
pub(super) async fn send<F, Fut>(batch: Vec<Item>, run: F) -> bool
where
    F: FnOnce(redis::Pipeline, usize) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Value>, RedisError>>,
{
    let mut pipe = redis::pipe();
    let mut replies = Vec::with_capacity(batch.len());
    for item in batch {
        pipe.add_command(item.cmd);
        replies.push(item.reply);
    }
    let n = replies.len();
    match run(pipe, n).await {
        Ok(values) if values.len() == n => {
            let mut moved = false;
            for (reply, value) in replies.into_iter().zip(values) {
                if let Value::ServerError(e) = &value {
                    moved |= matches!(e.code(), "MOVED" | "ASK");
                }
                let _ = reply.send(Ok(value));
            }
            moved
        }
        Ok(values) => {
            let e = RedisError::from((
                redis::ErrorKind::Parse,
                "pipeline answer of the wrong length",
                format!("{} answers to {n} calls", values.len()),
            ));
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
            false
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
            false
        }
    }
}

/// Answers every call of `batch` with an I/O error saying `why`.
pub(super) fn fail(batch: Vec<Item>, why: &'static str) {
    for item in batch {
        let e = RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, why));
        let _ = item.reply.send(Err(e));
    }
}
