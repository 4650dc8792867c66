//! The [`GlobalStore`] implementation: the engine's calls onto [`RedisStore`]'s script calls
//! (lease and release batched; the rest alone), and where RLQS demands are kept.

use std::sync::atomic::Ordering;
use std::time::Duration;

use sluice_core::bucket::Rate;
use sluice_engine::store::StoreFuture;
use sluice_engine::{GlobalStore, LeaseAsk, LeaseGrant, StoreError};

use super::RedisStore;
use super::calls::{lease_args, lease_grant_of};
use super::errors::classify;
use crate::scripts::{DEMAND, LEASE, RELEASE};

impl GlobalStore for RedisStore {
    fn lease_asking<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        ask: LeaseAsk,
    ) -> StoreFuture<'a, LeaseGrant> {
        Box::pin(async move {
            let answer = self
                .batched(&LEASE, key, &rate, &lease_args(&ask, self.holder))
                .await;
            answer.map(lease_grant_of)
        })
    }

    fn charge<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        max_debt: u64,
    ) -> StoreFuture<'a, LeaseGrant> {
        Box::pin(self.charge_at(key, rate, tokens, max_debt, None))
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        rate: Rate,
        tokens: u64,
        window: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.batched::<i64>(&RELEASE, key, &rate, &[tokens, window, self.holder])
                .await
                .map(|_| ())
        })
    }

    fn counts_holders(&self) -> bool {
        true
    }

    fn release_slots<'a>(&'a self, key: &'a str, rate: Rate, slots: u64) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let args = [slots, 0, self.holder];
            self.batched::<i64>(&RELEASE, key, &rate, &args)
                .await
                .map(|_| ())
        })
    }

    fn peek<'a>(&'a self, key: &'a str, rate: Rate) -> StoreFuture<'a, f64> {
        Box::pin(self.peek_at(key, rate, None))
    }

    fn close_window<'a>(&'a self, key: &'a str, rate: Rate, window: u64) -> StoreFuture<'a, ()> {
        Box::pin(async move { self.close_at(key, rate, window, None).await.map(|_| ()) })
    }

    fn reset<'a>(&'a self, key: &'a str, local: &'a [u8]) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let Some(conn) = self.conn.load_full() else {
                return Err(StoreError::Unavailable("not connected".into()));
            };
            match tokio::time::timeout(self.settings.connect_timeout.0, conn.del(&self.at(key)))
                .await
            {
                Ok(r) => r.map_err(|e| classify(&e))?,
                Err(_) => return Err(StoreError::Timeout),
            }
            self.push_reset(local).await;
            Ok(())
        })
    }

    fn pushed_resets(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<sluice_engine::PushedReset>> {
        self.subscribe_resets()
    }

    fn add_denied<'a>(&'a self, slot: u64, counts: &'a [(String, u64)]) -> StoreFuture<'a, ()> {
        Box::pin(self.add_denied_to(slot, counts))
    }

    fn top_denied<'a>(&'a self, from: u64, to: u64) -> StoreFuture<'a, Vec<(String, u64)>> {
        Box::pin(self.top_denied_of(from, to))
    }

    fn demand<'a>(
        &'a self,
        key: &'a str,
        client: u64,
        milli_rps: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, Vec<u64>> {
        Box::pin(async move {
            let mut inv = DEMAND.prepare_invoke();
            inv.key(&*self.at(&demand_key(key)))
                .arg(format!("{}/{client}", self.instance_id))
                .arg(milli_rps)
                .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
            self.call(&inv).await
        })
    }

    fn degraded(&self) -> bool {
        !self.breaker.is_closed()
    }

    fn decision_timeout(&self) -> Option<Duration> {
        Some(self.settings.timeout.0)
    }

    fn live_instances(&self) -> u64 {
        self.live.load(Ordering::Relaxed).max(1)
    }

    fn name(&self) -> &'static str {
        if self.cluster {
            "redis-cluster"
        } else {
            "redis"
        }
    }
}

/// The key holding RLQS demands for the bucket at `key`: the bucket key with `sluice:rlqs:` in
/// place of `sluice:`, so it keeps the bucket's hash tag (one cluster slot) and no bucket key
/// (always `sluice:{…`) can be spelled the same.
fn demand_key(key: &str) -> String {
    match key.strip_prefix("sluice:") {
        Some(rest) => format!("sluice:rlqs:{rest}"),
        None => format!("sluice:rlqs:{key}"),
    }
}
