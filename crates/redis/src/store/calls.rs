//! Script calls: each one refused at once while the breaker is open and bounded by the timeout,
//! lease and release calls sent in batches ([`crate::batch`]), every outcome counted in the
//! breaker. Also the calls with an explicit `now` (tests and the conformance suite).

use std::sync::Arc;

use redis::RedisError;
use sluice_core::bucket::Rate;
use sluice_engine::{LeaseAsk, LeaseGrant, StoreError};

use super::RedisStore;
use super::errors::{classify, retry_alone, trips_breaker};
use crate::batch::NotBatched;
use crate::connection::Conn;
use crate::scripts::{self, CHARGE, CLOSE, LEASE, PEEK, RELEASE};

impl RedisStore {
    /// Lease with an explicit `now` (tests and the conformance suite); `None` uses Redis TIME.
    pub async fn lease_at(
        &self,
        key: &str,
        rate: Rate,
        want: u64,
        now: Option<u64>,
    ) -> Result<LeaseGrant, StoreError> {
        self.lease_asking_at(key, rate, LeaseAsk::exactly(want), now)
            .await
    }

    /// [`GlobalStore::lease_asking`] with an explicit `now` (the conformance suite).
    pub async fn lease_asking_at(
        &self,
        key: &str,
        rate: Rate,
        ask: LeaseAsk,
        now: Option<u64>,
    ) -> Result<LeaseGrant, StoreError> {
        self.lease_as_at(key, rate, ask, self.holder, now).await
    }

    /// [`lease_asking_at`](Self::lease_asking_at) as holder `holder` (of concurrency slots and
    /// reservations) instead of this instance: the conformance suite plays several instances
    /// on one connection.
    pub async fn lease_as_at(
        &self,
        key: &str,
        rate: Rate,
        ask: LeaseAsk,
        holder: u64,
        now: Option<u64>,
    ) -> Result<LeaseGrant, StoreError> {
        self.call(&scripts::bucket_call(
            &LEASE,
            &self.at(key),
            &rate,
            now,
            &lease_args(&ask, holder),
        ))
        .await
        .map(lease_grant_of)
    }

    /// Charge with an explicit `now` (tests and the conformance suite); `None` uses Redis TIME.
    pub async fn charge_at(
        &self,
        key: &str,
        rate: Rate,
        tokens: u64,
        max_debt: u64,
        now: Option<u64>,
    ) -> Result<LeaseGrant, StoreError> {
        self.grant(&scripts::bucket_call(
            &CHARGE,
            &self.at(key),
            &rate,
            now,
            &[tokens, max_debt],
        ))
        .await
    }

    /// Runs a script that answers `{tokens, remaining_millitokens, window, ends_in}` (lease,
    /// charge; `ends_in` is -1 for a token bucket, whose tokens never lapse).
    async fn grant(&self, inv: &redis::ScriptInvocation<'_>) -> Result<LeaseGrant, StoreError> {
        self.call(inv).await.map(grant_of)
    }

    /// Release (into `window`, the grant's) with an explicit `now`; returns the tokens left.
    pub async fn release_at(
        &self,
        key: &str,
        rate: Rate,
        tokens: u64,
        window: u64,
        now: Option<u64>,
    ) -> Result<f64, StoreError> {
        let inv = scripts::bucket_call(
            &RELEASE,
            &self.at(key),
            &rate,
            now,
            &[tokens, window, self.holder, 0],
        );
        let milli: i64 = self.call(&inv).await?;
        Ok(milli as f64 / 1000.0)
    }

    /// Close window `window` of a fixed window with an explicit `now`; returns the tokens left.
    pub async fn close_at(
        &self,
        key: &str,
        rate: Rate,
        window: u64,
        now: Option<u64>,
    ) -> Result<f64, StoreError> {
        let inv = scripts::bucket_call(&CLOSE, &self.at(key), &rate, now, &[window]);
        let milli: i64 = self.call(&inv).await?;
        Ok(milli as f64 / 1000.0)
    }

    /// Peek with an explicit `now`.
    pub async fn peek_at(
        &self,
        key: &str,
        rate: Rate,
        now: Option<u64>,
    ) -> Result<f64, StoreError> {
        let inv = scripts::bucket_call(&PEEK, &self.at(key), &rate, now, &[]);
        let milli: i64 = self.call(&inv).await?;
        Ok(milli as f64 / 1000.0)
    }

    /// One script call: refused at once while the breaker is open, bounded by the timeout.
    pub(super) async fn call<T: redis::FromRedisValue>(
        &self,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let conn = self.connection_for_a_call()?;
        let answer = tokio::time::timeout(self.settings.timeout.0, conn.invoke(inv)).await;
        self.settle(answer.map_err(|_| StoreError::Timeout))
    }

    /// The connection for one round trip (counted), or why there is none: refused at once
    /// while the breaker is open, or before a cluster's connection is made.
    pub(super) fn connection_for_a_call(&self) -> Result<Arc<Conn>, StoreError> {
        if !self.breaker.is_closed() {
            return Err(StoreError::Unavailable("circuit open".into()));
        }
        let Some(conn) = self.conn.load_full() else {
            return Err(StoreError::Unavailable("not connected".into()));
        };
        self.metrics.round_trips.inc();
        Ok(conn)
    }

    /// A bucket script call on `key` without an explicit `now`, sent in a batch with other keys'
    /// calls ([`crate::batch`]). A call the batch could not run (queue full, NOSCRIPT, MOVED, ASK,
    /// TRYAGAIN) is sent again alone through [`call`](Self::call), which loads scripts and
    /// follows redirections. The whole wait, batch and retry, is bounded by one timeout each.
    pub(super) async fn batched<T: redis::FromRedisValue>(
        &self,
        script: &'static redis::Script,
        key: &str,
        rate: &Rate,
        args: &[u64],
    ) -> Result<T, StoreError> {
        if !self.breaker.is_closed() {
            return Err(StoreError::Unavailable("circuit open".into()));
        }
        let key = self.at(key);
        let cmd = scripts::bucket_cmd(script, &key, rate, args);
        let alone = || scripts::bucket_call(script, &key, rate, None, args);
        let answer =
            match tokio::time::timeout(self.settings.timeout.0, self.batcher.call(cmd, &key)).await
            {
                Err(_) => Err(StoreError::Timeout),
                Ok(Err(NotBatched::Busy)) => return self.call(&alone()).await,
                Ok(Ok(Ok(redis::Value::ServerError(e)))) if retry_alone(e.code()) => {
                    return self.call(&alone()).await;
                }
                // Any other error of this call alone (CLUSTERDOWN, LOADING, …) keeps its code, so it
                // is classified as the same error outside a batch would be.
                Ok(Ok(Ok(redis::Value::ServerError(e)))) => Ok(Err(RedisError::from(e))),
                Ok(Ok(answer)) => Ok(answer.and_then(|v| Ok(redis::from_redis_value(v)?))),
            };
        self.settle(answer)
    }

    /// Logs an error of one key (a corrupt key, a script failing on its data), at most once a
    /// second: a hot corrupt key fails every call.
    fn log_key_error(&self, e: &RedisError) {
        if let Some(unlogged) = self.logs.key_error.sample_now() {
            tracing::warn!(
                error = %super::errors::safe(e),
                unlogged_since_last_line = unlogged,
                "a Redis call failed on its key's data (its rule's fallback applies; the breaker stays closed); at most one such line a second"
            );
        }
    }

    /// Counts a call's outcome in the circuit breaker and maps its error.
    fn settle<T>(
        &self,
        answer: Result<Result<T, RedisError>, StoreError>,
    ) -> Result<T, StoreError> {
        let mut trips = true;
        let result = match answer {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                trips = trips_breaker(&e);
                if !trips && e.code() != Some("NOSCRIPT") {
                    self.log_key_error(&e);
                }
                Err(classify(&e))
            }
            Err(e) => Err(e),
        };
        match &result {
            Ok(_) => self.breaker.success(),
            // Redis answered: it is up, only this call failed (counted by the engine as
            // `sluice_store_calls_total{outcome="error"}`; its key gets its fallback).
            Err(_) if !trips => {}
            Err(e) => {
                if self.breaker.failure() {
                    self.metrics.breaker_opens.inc();
                    self.metrics.degraded.set(1);
                    // `sluice_redis_breaker_opens_total` counts every one.
                    if let Some(unlogged) = self.logs.breaker_open.sample_now() {
                        tracing::warn!(
                            error = %e,
                            unlogged_since_last_line = unlogged,
                            "Redis circuit breaker open: rules use their fallback until Redis answers (sampled: at most one line a second)"
                        );
                    }
                }
            }
        }
        result
    }
}

/// A grant from a script's answer `{tokens, remaining_millitokens, window, ends_in}`.
pub(super) fn grant_of((granted, milli, window, ends_in): (u64, i64, u64, i64)) -> LeaseGrant {
    LeaseGrant {
        granted,
        remaining: milli as f64 / 1000.0,
        window,
        ends_in: u64::try_from(ends_in).ok(),
        turn_in: None,
        reserved: None,
        reserved_all: 0,
        reserved_ends_in: 0,
    }
}

/// `lease.lua`'s own arguments (ARGV[6..15]), in its order: the ask, the caller as a holder
/// (of concurrency slots and of reservations: this instance's number, whatever the engine
/// named), the reservation asked for (a flag, thousandths per period, ttl, thousandths of a
/// token given back), below what a grant joins a queue with turns to come, and what the
/// caller's next request lacks at most.
pub(super) fn lease_args(ask: &LeaseAsk, holder: u64) -> [u64; 11] {
    let (flag, per_mille, ttl, back) = match ask.reserve {
        Some(r) => (1, r.per_mille, r.ttl_micros, r.give_back_milli),
        None => (0, 0, 0, 0),
    };
    [
        ask.want,
        ask.least,
        ask.turn_gap,
        ask.starved_below,
        holder,
        flag,
        per_mille,
        ttl,
        back,
        ask.queue_below,
        ask.next_needs,
    ]
}

/// `lease.lua`'s answer: a grant, the caller's turn in the key's queue of starved callers
/// (-1: none), its reservation (-1: none asked for), every reservation of the bucket and when
/// the last of them lapses at the latest.
pub(super) fn lease_grant_of(
    (granted, milli, window, ends_in, turn_in, reserved, reserved_all, reserved_ends_in): (
        u64,
        i64,
        u64,
        i64,
        i64,
        i64,
        u64,
        u64,
    ),
) -> LeaseGrant {
    LeaseGrant {
        turn_in: u64::try_from(turn_in).ok(),
        reserved: u64::try_from(reserved).ok(),
        reserved_all,
        reserved_ends_in,
        ..grant_of((granted, milli, window, ends_in))
    }
}
