//! The engine's upkeep: the periodic sweep (leases unspent too long go back, idle keys go),
//! resets other instances push, `quota top`'s flush, post-paid usage due, and at shutdown every
//! lease handed back.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::Clock;
use tokio::sync::broadcast;

use super::Engine;
use crate::store::PushedReset;

impl Engine {
    /// Runs [`sweep`](Self::sweep) periodically until `shutdown` resolves; then stops background
    /// refills, waits for those in flight, and returns every lease (so none is stranded).
    pub async fn maintain_until(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        let period = self
            .settings
            .lease_ttl
            .min(self.settings.idle_timeout / 4)
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Post-paid usage waiting to be sent with more goes within 1.5 lease horizons.
        let mut debts = tokio::time::interval(
            (self.settings.lease_horizon / 2)
                .clamp(Duration::from_millis(10), Duration::from_secs(1)),
        );
        debts.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pushed = self.store().pushed_resets();
        let missed_resets = sluice_core::SampledLine::new();
        let mut top = tokio::time::interval(crate::top::FLUSH_EVERY);
        top.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tick.tick() => self.sweep().await,
                // Bounded: a slow store must not hold up sweeps and pushed resets.
                _ = top.tick() => {
                    let _ = tokio::time::timeout(TOP_FLUSH_WAIT, self.flush_denied()).await;
                }
                _ = debts.tick() => self.leaser.flush_queued_debts(self.now(), false).await,
                key = next_pushed(&mut pushed, &missed_resets, &*self.clock) => self.drop_pushed(&key),
            }
        }
        self.leaser.stop_background().await;
        self.return_all_leases().await;
        let _ = tokio::time::timeout(TOP_FLUSH_WAIT, self.flush_denied()).await;
    }

    /// Drops this instance's state of the key encoded as `key`, whose global bucket another
    /// instance reset ([`GlobalStore::pushed_resets`]): its next decision leases from the full
    /// bucket at once instead of spending, or waiting out, a lease of the old one.
    /// At most [`PUSHED_DROPS_PER_SEC`] a second: resets are an operator's acts, and a flood of
    /// messages (anyone who may publish on the channel) must not drop every lease.
    pub fn drop_pushed(&self, key: &[u8]) {
        let second = (self.now() / 1_000_000) & 0xffff_ffff;
        let seen = self.pushed_drops.load(std::sync::atomic::Ordering::Relaxed);
        let count = if seen >> 32 == second {
            seen & 0xffff_ffff
        } else {
            0
        };
        if count >= PUSHED_DROPS_PER_SEC {
            tracing::debug!("a pushed reset ignored: more than {PUSHED_DROPS_PER_SEC} this second");
            return;
        }
        self.pushed_drops.store(
            (second << 32) | (count + 1),
            std::sync::atomic::Ordering::Relaxed,
        );
        if self.table.drop_pushed(key) {
            tracing::debug!("dropped a key another instance reset");
        }
    }

    /// Returns leases unspent for `lease_ttl` (cold leases `cold_lease_ttl`, a starved key's
    /// the longest it may wait for its turn) and evicts keys idle for `idle_timeout` whose state
    /// is at rest.
    pub async fn sweep(&self) {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let swept = self.table.sweep(
            self.now(),
            micros(self.settings.idle_timeout),
            (
                micros(self.settings.lease_ttl),
                micros(self.settings.cold_lease_ttl),
                self.leaser.starved_lease_ttl(),
            ),
        );
        self.count_holds(&swept);
        self.leaser.return_tokens(swept.returns).await;
        self.store().housekeeping();
    }

    /// Returns every lease this instance holds and sends all post-paid usage still pending for
    /// the store (at shutdown).
    pub async fn return_all_leases(&self) {
        self.leaser
            .return_tokens(self.table.take_all_leases(self.now()))
            .await;
        self.leaser.flush_queued_debts(self.now(), true).await;
    }
}

/// The longest the maintenance loop waits for `quota top`'s flush.
const TOP_FLUSH_WAIT: Duration = Duration::from_secs(1);

/// Pushed resets acted on per second, at most.
const PUSHED_DROPS_PER_SEC: u64 = 100;

/// The next reset another instance pushed; never, without a bus. A receiver that fell behind
/// says how many it missed (those keys converge within `lease_ttl`) and goes on; a flood of
/// messages (anyone who may publish on the channel) makes it fall behind again and again, so
/// that line is `log`, sampled on `clock`.
async fn next_pushed(
    rx: &mut Option<broadcast::Receiver<PushedReset>>,
    log: &sluice_core::SampledLine,
    clock: &dyn Clock,
) -> PushedReset {
    loop {
        let Some(receiver) = rx else {
            return std::future::pending().await;
        };
        match receiver.recv().await {
            Ok(key) => return key,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                if let Some(unlogged) = log.sample(clock.now_micros()) {
                    tracing::warn!(
                        missed,
                        unlogged_since_last_line = unlogged,
                        "missed resets pushed by other instances: those keys converge within lease_ttl (sampled: at most one line a second)"
                    );
                }
            }
            Err(broadcast::error::RecvError::Closed) => *rx = None,
        }
    }
}
