//! A key's state and its lease of rate: what the ledger and the policy ask of the boxed
//! [`RateLease`] through the key's [`LeaseState`](super::super::LeaseState), each a no-op
//! for a key without one.

use sluice_core::bucket::Rate;

use super::RateLease;

/// A key's state and its lease of rate (in the boxed rare part: most keys have none).
impl super::super::LeaseState {
    /// Fills the lease from a lease of rate's stock up to `now` (nothing without one). The
    /// fallback's local bucket starts empty from where the stock has filled to, as it does
    /// from each grant (`add_grant`): it refills at this instance's share of `L − R` from then,
    /// and the stock had paid this instance's requests meanwhile, so an outage counted that
    /// time twice (1 sidecar at 3× the limit, 80% of it reserved, the store gone 100 ms after
    /// the last grant: 9 requests beyond a quarter second's 25, 6.4 tokens over `B + L·w`;
    /// 2 sidecars whose stocks paid them for 2.6 s without a grant: 12 tokens over). Not after
    /// a failed call, until the next answer ([`RateLease::outage`]): the stock fills on
    /// through an outage, and restarted at each fill the fallback would admit nothing.
    pub fn fill(&mut self, rate: &Rate, now: u64) {
        if let Some(rare) = self.rare.as_deref_mut()
            && let Some(r) = rare.rate_lease.as_mut()
            && r.per_mille > 0
        {
            r.fill(rate, &mut self.lease, now);
            r.restart(&mut self.local);
        }
    }

    /// Ends this key's lease of rate, if the store keeps one for it: the stock stops filling
    /// now. Returns the tokens it kept aside to give back ([`RateLease::dropped`]).
    pub fn end_rate_lease(&mut self) -> Option<u64> {
        let lease = self.rare.as_deref_mut()?.rate_lease.take()?;
        lease.recorded().then_some(lease.dropped)
    }

    /// Whether the store keeps a reservation for this key on this instance, to be ended when
    /// the key goes idle or its pod leaves ([`RateLease::recorded`]).
    pub fn rate_lease_recorded(&self) -> bool {
        self.rare()
            .rate_lease
            .as_ref()
            .is_some_and(RateLease::recorded)
    }

    /// The last call failed ([`RateLease::failed`]): the fallback's local bucket starts empty
    /// from where the stock has filled to, as at each fill before, and from then on refills
    /// beside the stock.
    pub fn rate_lease_failed(&mut self) {
        if let Some(rare) = self.rare.as_deref_mut()
            && let Some(r) = rare.rate_lease.as_mut()
        {
            if r.per_mille > 0 {
                r.restart(&mut self.local);
            }
            r.failed();
        }
    }

    /// A lease call was answered: whatever failed before, the store is back for this key, and
    /// the stock's fills restart the fallback's local bucket again ([`RateLease::outage`]). A
    /// blip left unanswered until the next renewal (up to three quarters of its ttl) let the
    /// local bucket bank the time since, counted twice by an outage after it.
    pub fn rate_lease_answered(&mut self) {
        if let Some(rare) = self.rare.as_deref_mut()
            && let Some(r) = rare.rate_lease.as_mut()
        {
            r.outage = false;
        }
    }

    /// Whether this key's stock has dropped whole tokens it was full for (kept aside to give
    /// back): its demand is below its reservation, or a grant of tokens filled the lease.
    pub fn rate_lease_dropped(&self) -> bool {
        self.rare()
            .rate_lease
            .as_ref()
            .is_some_and(|r| r.dropped > 0)
    }

    /// Whether this key has a lease of rate (filling now or lapsed), which ending would tell
    /// the store about.
    pub fn has_rate_lease(&self) -> bool {
        self.rare()
            .rate_lease
            .as_ref()
            .is_some_and(|r| r.per_mille > 0)
    }

    /// Whether this key's lease of rate went unused for longer than its measured demand
    /// explains ([`RateLease::unused`]). Kept, an idle sidecar's reservation stood for the rest of its ttl, renewed by no
    /// request, and the sidecars still asking shared what it left: 4 sidecars at 58/s in all,
    /// then one at 79/s, had 66 of 100 a second reserved by the three idle ones and denied a
    /// request an exact limiter admits (the fleet property with leases of rate).
    pub fn rate_lease_unused(&self, idle: u64, ttl: u64) -> bool {
        self.rare()
            .rate_lease
            .as_ref()
            .is_some_and(|r| r.unused(idle, ttl))
    }

    /// Whether a lease of rate fills this key's stock now.
    pub fn rate_leased(&self, now: u64) -> bool {
        self.rare().rate_lease.as_ref().is_some_and(|r| r.live(now))
    }

    /// Whether this key's lease of rate is due for renewal ([`RateLease::due`]).
    pub fn rate_lease_due(&self, rate: &Rate, now: u64) -> bool {
        let unsent = self.seen_since_lease();
        self.rare()
            .rate_lease
            .as_ref()
            .is_some_and(|r| r.due(rate, now, unsent))
    }
}
