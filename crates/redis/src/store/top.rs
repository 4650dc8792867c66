//! `quota top`'s fleet-wide counts of denied hits ([`sluice_engine::top`]) in Redis: one sorted
//! set per slot, `sluice:{top}:<slot>`, member a bucket's store key, score the hits denied.
//!
//! Every slot key carries the hash tag `{top}`: on a cluster they share one slot, so a read sums
//! them in one script. Each instance adds its counts once per flush, so that node sees a call
//! per instance every few seconds, whatever the request rate. These calls are not decisions:
//! they wait up to `connect_timeout` (a read sums thousands of members), never count toward the
//! circuit breaker, and are refused at once while it is open.

use sluice_engine::StoreError;
use sluice_engine::top::{KEEP_PER_SLOT, SLOT_SECS, WINDOW_SLOTS};

use super::RedisStore;
use super::errors::classify;
use crate::scripts::{TOP_ADD, TOP_READ};

/// Members sent per `top_add.lua` call: a flush of many keys is several short calls rather than
/// one long one.
const PAIRS_PER_CALL: usize = 256;

/// The sorted set of `slot`.
fn slot_key(slot: u64) -> String {
    format!("sluice:{{top}}:{slot}")
}

impl RedisStore {
    /// Adds `counts` into `slot`'s set, a few hundred members per call.
    pub(super) async fn add_denied_to(
        &self,
        slot: u64,
        counts: &[(String, u64)],
    ) -> Result<(), StoreError> {
        let keep_secs = (WINDOW_SLOTS + 1) * SLOT_SECS;
        for chunk in counts.chunks(PAIRS_PER_CALL) {
            let mut inv = TOP_ADD.prepare_invoke();
            inv.key(&*self.at(&slot_key(slot)))
                .arg(keep_secs)
                .arg(KEEP_PER_SLOT);
            for (member, hits) in chunk {
                inv.arg(member).arg(*hits);
            }
            self.side_call::<i64>(&inv).await?;
        }
        Ok(())
    }

    /// The summed counts of slots `from..=to`.
    pub(super) async fn top_denied_of(
        &self,
        from: u64,
        to: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let mut inv = TOP_READ.prepare_invoke();
        for slot in from..=to {
            inv.key(&*self.at(&slot_key(slot)));
        }
        let flat: Vec<String> = self.side_call(&inv).await?;
        Ok(flat
            .chunks_exact(2)
            .filter_map(|pair| {
                // Scores are doubles: counts below 2^53 are exact.
                let hits = pair[1].parse::<f64>().ok()?;
                Some((pair[0].clone(), hits.max(0.0) as u64))
            })
            .collect())
    }

    /// A script call that is no decision's: bounded by `connect_timeout`, outside the breaker.
    async fn side_call<T: redis::FromRedisValue>(
        &self,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let conn = self.connection_for_a_call()?;
        match tokio::time::timeout(self.settings.connect_timeout.0, conn.invoke(inv)).await {
            Ok(answer) => answer.map_err(|e| classify(&e)),
            Err(_) => Err(StoreError::Timeout),
        }
    }
}
