//! After an outage: what a key's `local_share` fallback owes the global bucket
//! ([`crate::ledger::Owed`]) is charged to it before the key leases again.

use std::time::Instant;

use super::Leaser;
use crate::bucket::LeaseBucket;
use crate::metrics::StoreOp;
use crate::store::StoreError;

impl Leaser {
    /// Charges the global bucket of `bucket` what its fallback owes, if anything, before a lease
    /// call (the same single flight). The charge goes into debt where the bucket holds less:
    /// owed tokens were admitted already, and a debt every sidecar sees keeps the others from
    /// leasing the refill that must pay for them first. Paying from this sidecar's next grants
    /// instead (before issue 41) left the others leasing that refill meanwhile: `B + L·t` was
    /// exceeded until the debt was paid.
    ///
    /// A call that fails or times out leaves the debt owed, charged again before the next lease
    /// (a timed-out call may have been applied: then it is charged twice, stricter, never looser).
    pub(super) async fn charge_owed(
        &self,
        bucket: &LeaseBucket,
        store_key: &str,
    ) -> Option<StoreError> {
        let rate = bucket.rate;
        let owed = bucket.lock().owed(&rate);
        if owed == 0 {
            return None;
        }
        // No floor of its own: what is owed is bounded already (each sidecar at most twice its
        // share of the burst, `Owed`), and a floor the sidecars shared would drop the debt of
        // the last to charge. 2^53 is the most the scripts take.
        let max_debt = 1 << 53;
        let started = Instant::now();
        let result = self.store.charge(store_key, rate, owed, max_debt).await;
        self.observe(StoreOp::Charge, started, &result);
        match result {
            Ok(charge) => {
                bucket.lock().owed_charged(&rate, charge.granted);
                None
            }
            Err(e) => Some(e),
        }
    }
}
