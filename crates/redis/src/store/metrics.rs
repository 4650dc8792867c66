//! [`RedisMetrics`]: the store's Prometheus series (degraded, live instances, breaker opens,
//! round trips and batched calls).

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// What happened on the bus of pushed resets (`sluice_redis_pushed_resets_total{event}`).
#[derive(Debug, Clone, Copy)]
pub enum BusEvent {
    /// This instance pushed a reset.
    Sent,
    /// Pushing a reset failed (the reset itself was done).
    SendFailed,
    /// Another instance's reset arrived.
    Received,
    /// The subscription was lost and is back (resets meanwhile were missed).
    Resubscribed,
    /// Subscribing failed (Redis down, or no pub/sub rights); retried with a growing wait.
    SubscribeFailed,
}

impl BusEvent {
    fn label(self) -> &'static str {
        match self {
            BusEvent::Sent => "sent",
            BusEvent::SendFailed => "send_failed",
            BusEvent::Received => "received",
            BusEvent::Resubscribed => "resubscribed",
            BusEvent::SubscribeFailed => "subscribe_failed",
        }
    }
}

/// Redis store metrics.
#[derive(Debug, Clone)]
pub struct RedisMetrics {
    /// `sluice_degraded`: 1 while the store is unavailable and rules use their fallback.
    pub degraded: IntGauge,
    /// `sluice_live_instances`: sidecars seen by the heartbeat (for `local_share`).
    pub live_instances: IntGauge,
    /// `sluice_redis_breaker_opens_total`: times the circuit breaker opened.
    pub breaker_opens: IntCounter,
    /// `sluice_redis_round_trips_total`: requests sent to Redis (a batch of calls is one).
    pub round_trips: IntCounter,
    /// `sluice_redis_batched_calls_total`: script calls sent in batches.
    pub batched_calls: IntCounter,
    /// `sluice_redis_pushed_resets_total{event}`: resets pushed to and from other instances.
    pub pushed_resets: IntCounterVec,
}

impl RedisMetrics {
    /// Creates and registers the series.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self {
            degraded: IntGauge::new(
                "sluice_degraded",
                "1 while the global store is unavailable (fallbacks apply)",
            )?,
            live_instances: IntGauge::new(
                "sluice_live_instances",
                "sluice instances sharing the global store",
            )?,
            breaker_opens: IntCounter::new(
                "sluice_redis_breaker_opens_total",
                "Times the Redis circuit breaker opened",
            )?,
            round_trips: IntCounter::new(
                "sluice_redis_round_trips_total",
                "Requests sent to Redis: a single call, or a batch of calls to one node",
            )?,
            batched_calls: IntCounter::new(
                "sluice_redis_batched_calls_total",
                "Script calls sent to Redis in batches (with round trips: the mean batch size)",
            )?,
            pushed_resets: IntCounterVec::new(
                Opts::new(
                    "sluice_redis_pushed_resets_total",
                    "Resets pushed between instances: sent, send_failed, received, resubscribed, subscribe_failed",
                ),
                &["event"],
            )?,
        };
        registry.register(Box::new(m.pushed_resets.clone()))?;
        registry.register(Box::new(m.degraded.clone()))?;
        registry.register(Box::new(m.live_instances.clone()))?;
        registry.register(Box::new(m.breaker_opens.clone()))?;
        registry.register(Box::new(m.round_trips.clone()))?;
        registry.register(Box::new(m.batched_calls.clone()))?;
        Ok(m)
    }

    /// Counts one event of the bus of pushed resets.
    pub(crate) fn bus(&self, event: BusEvent) {
        self.pushed_resets.with_label_values(&[event.label()]).inc();
    }

    /// Metrics in a private registry (tests).
    pub fn unregistered() -> Self {
        Self::register(&Registry::new()).unwrap_or_else(|e| unreachable!("fresh registry: {e}"))
    }
}
