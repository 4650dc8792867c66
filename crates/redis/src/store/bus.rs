//! Resets pushed between the sluice instances sharing a Redis (pub/sub).
//!
//! A reset refills a global bucket, but every other instance still holds its lease of the old
//! one (or waits for a turn to ask again) until `lease_ttl`. The instance that reset the bucket
//! publishes its table key on [`CHANNEL`]; every other instance's listener hands it to the
//! engine ([`GlobalStore::pushed_resets`](sluice_engine::GlobalStore::pushed_resets)), which drops
//! its state of the key, so its next decision leases from the full bucket.
//!
//! Plain `PUBLISH`, on a cluster too: a reset is an operator's act, rare, so Redis Cluster's
//! broadcast of every message to every node costs nothing that matters, and one subscription to
//! any node hears every reset whichever node holds the key's slot (sharded pub/sub would need a
//! subscription per shard, followed through resharding). A message missed while the
//! subscription is down (a reconnect, a failover) is missed for good: that key converges within
//! `lease_ttl`, as without the bus.

use std::time::Duration;

use futures_util::StreamExt;
use sluice_core::SampledLine;
use sluice_core::config::RedisSettings;
use sluice_engine::PushedReset;
use tokio::sync::broadcast;

use super::RedisStore;
use super::errors::safe;
use super::metrics::BusEvent;
use crate::connection;

/// The channel resets are pushed on.
pub const CHANNEL: &str = "sluice:{bus}:resets";

/// The longest message heard: a table key is bounded (an identity, then keys of at most 1 KiB
/// and values of at most ~100 bytes, per entry of a bounded descriptor); anything longer is no
/// message of ours.
const MAX_MESSAGE: usize = 64 * 1024;

/// The longest wait between two attempts to subscribe (from `probe_interval`, doubling): a
/// Redis that refuses the subscription (no pub/sub rights) is not asked again several times a
/// second by every sidecar.
const LONGEST_RETRY: Duration = Duration::from_secs(30);

/// How often a quiet subscription is checked with a PING (a connection that died without a
/// word, as behind a stalled proxy, would otherwise keep the listener waiting forever).
const PING_EVERY: Duration = Duration::from_secs(5);

/// Separates the sender's instance id from the table key in a message.
const SEPARATOR: u8 = 0;

/// A message: the sender's instance id, [`SEPARATOR`], the table key.
fn message(sender: &str, local: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(sender.len() + 1 + local.len());
    m.extend_from_slice(sender.as_bytes());
    m.push(SEPARATOR);
    m.extend_from_slice(local);
    m
}

/// The table key of a message from another instance; `None` for this instance's own messages
/// (it dropped its state when it reset) and for anything that is no message of ours.
fn heard<'a>(payload: &'a [u8], me: &str) -> Option<&'a [u8]> {
    if payload.len() > MAX_MESSAGE {
        return None;
    }
    let at = payload.iter().position(|&b| b == SEPARATOR)?;
    let (sender, local) = (&payload[..at], &payload[at + 1..]);
    (sender != me.as_bytes() && local.len() > 8).then_some(local)
}

impl RedisStore {
    /// Tells every other instance that the bucket with table key `local` was reset. Best effort:
    /// the reset is done; an unsent message is logged and each instance converges within
    /// `lease_ttl`.
    pub(super) async fn push_reset(&self, local: &[u8]) {
        if !self.settings.push_resets {
            return;
        }
        let sent = match self.conn.load_full() {
            Some(conn) => tokio::time::timeout(
                self.settings.connect_timeout.0,
                conn.publish(&self.at(CHANNEL), &message(&self.instance_id, local)),
            )
            .await
            .map_err(|_| "timed out".to_string())
            .and_then(|r| r.map_err(|e| safe(&e))),
            None => Err("not connected".to_string()),
        };
        match sent {
            Ok(()) => self.metrics.bus(BusEvent::Sent),
            Err(error) => {
                self.metrics.bus(BusEvent::SendFailed);
                if let Some(unlogged) = self.logs.reset_not_pushed.sample_now() {
                    tracing::warn!(
                        %error,
                        unlogged_since_last_line = unlogged,
                        "the reset is done, but other instances were not told: they see it within lease_ttl (sampled: at most one line a second)"
                    );
                }
            }
        }
    }

    /// The resets other instances push, for the engine (`None` with `push_resets: false`).
    pub(super) fn subscribe_resets(&self) -> Option<broadcast::Receiver<PushedReset>> {
        self.settings.push_resets.then(|| self.pushed.subscribe())
    }
}

/// Listens on [`CHANNEL`] until the store stops, handing every other instance's reset to
/// `out`; resubscribes after any loss of the connection (after `probe_interval`, doubling up
/// to [`LONGEST_RETRY`] while it fails).
pub(super) async fn listen(
    settings: RedisSettings,
    me: String,
    out: broadcast::Sender<PushedReset>,
    metrics: super::RedisMetrics,
) {
    let channel = super::prefixed(&settings, CHANNEL).into_owned();
    let mut attempt = 0usize;
    let (mut ever, mut said_down) = (false, false);
    // A connection lost again and again (a flapping Redis, a proxy cutting it) repeats these.
    let (again, lost, refused) = (SampledLine::new(), SampledLine::new(), SampledLine::new());
    let mut wait = settings.probe_interval.0;
    loop {
        let subscribed = async {
            let mut pubsub = connection::subscriber(&settings, attempt).await?;
            let ack = tokio::time::timeout(settings.connect_timeout.0, pubsub.subscribe(&*channel));
            match ack.await {
                Ok(answer) => answer.map(|()| pubsub),
                Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
            }
        };
        match subscribed.await {
            Ok(pubsub) => {
                if ever {
                    metrics.bus(BusEvent::Resubscribed);
                    if let Some(unlogged) = again.sample_now() {
                        tracing::info!(
                            unlogged_since_last_line = unlogged,
                            "listening for other instances' resets again (sampled: at most one line a second)"
                        );
                    }
                }
                (ever, said_down) = (true, false);
                wait = settings.probe_interval.0;
                hear(pubsub, &settings, &me, &out, &metrics).await;
                if let Some(unlogged) = lost.sample_now() {
                    tracing::warn!(
                        unlogged_since_last_line = unlogged,
                        "lost the channel other instances push resets on: resubscribing; resets \
                         meanwhile are seen within lease_ttl (sampled: at most one line a second)"
                    );
                }
            }
            Err(e) => {
                metrics.bus(BusEvent::SubscribeFailed);
                // Said once per outage (a refusal such as NOPERM is worth a warning); the
                // breaker's own warnings cover Redis being down.
                if !said_down {
                    if let Some(unlogged) = refused.sample_now() {
                        tracing::warn!(
                            error = %safe(&e),
                            unlogged_since_last_line = unlogged,
                            "cannot listen for other instances' resets (push_resets): they are seen within lease_ttl; retrying (sampled: at most one line a second)"
                        );
                    }
                    said_down = true;
                }
                wait = (wait * 2).min(LONGEST_RETRY);
            }
        }
        attempt = attempt.wrapping_add(1);
        tokio::time::sleep(wait).await;
    }
}

/// Hands on every message of the subscription until its connection is lost.
async fn hear(
    pubsub: redis::aio::PubSub,
    settings: &RedisSettings,
    me: &str,
    out: &broadcast::Sender<PushedReset>,
    metrics: &super::RedisMetrics,
) {
    let (mut sink, mut stream) = pubsub.split();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    loop {
        tokio::select! {
            msg = stream.next() => {
                let Some(msg) = msg else { return };
                if let Some(local) = heard(msg.get_payload_bytes(), me) {
                    metrics.bus(BusEvent::Received);
                    // No engine listening (shutting down) is no error.
                    let _ = out.send(local.into());
                }
            }
            _ = ping.tick() => {
                let answer = tokio::time::timeout(
                    settings.connect_timeout.0 + settings.timeout.0,
                    sink.ping::<redis::Value>(),
                )
                .await;
                if !matches!(answer, Ok(Ok(_))) {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_names_its_sender_and_key_and_an_instance_ignores_its_own() {
        let key = [7u8, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, b'u', b's', b'e', b'r'];
        let m = message("pod-a-1", &key);
        assert_eq!(heard(&m, "pod-b-1"), Some(&key[..]));
        assert_eq!(heard(&m, "pod-a-1"), None);
        // Not ours: no separator, no key after it, or too long.
        assert_eq!(heard(b"hello", "pod-b-1"), None);
        assert_eq!(heard(b"pod-a-1\0", "pod-b-1"), None);
        assert_eq!(heard(&message("x", &vec![1; MAX_MESSAGE]), "pod-b-1"), None);
    }
}
