//! What a key's `local_share` fallback owes the global bucket for the tokens it spent while the
//! store was down, and why that is less than what it spent.
//!
//! While the store is down each of `n` sidecars admits from a local bucket of its share
//! (`L/n`, burst `B/n`). The global bucket refills meanwhile: a paused Redis refills it up to
//! the burst, a restarted one starts it full. Charging it, when the store answers again, every
//! token the fallback spent counts the outage's refill twice: once as the tokens the fallback
//! spent, once as the bucket's own refill. A key at 20% of its limit across a 5 s outage then
//! found its bucket emptied on return and was denied requests an exact limiter admits (issue
//! 41). Charging nothing lets an outage add a burst: the store's refill up to `B` plus what the
//! fallback spent of `L·t`.
//!
//! What is charged instead is exactly what an exact limiter, fed the same fallback spending,
//! would be missing next to the store. Each sidecar keeps its part of two buckets of the whole
//! key, both starting at its last reading of the global bucket `g` (the tokens the store held
//! after its last lease call) when its fallback first spends, both refilling at `L` up to `B`:
//!
//! - the store's bucket, which sees nothing of the outage: `P(t) = min(B, g + L·(t − t₀))`,
//!   a function of time only;
//! - the exact bucket, drained by `n` times what this sidecar's fallback spends (its share,
//!   scaled to the whole key): `U`, a [`BucketState`].
//!
//! It owes `(P − U) / n` at its last spending, whole tokens rounded up: tokens spent while
//! neither bucket is full are owed one for one; the part of the outage's refill the store could
//! not hold (it was full) is refill the exact bucket used, so owed nothing. The leaser charges it
//! before the key's next lease, into debt where the store holds less (`Leaser::charge_owed`).
//!
//! Why `B + L·t` holds, in outline: the sidecars' exact buckets (`U/n` each: burst `B/n`, rate
//! `L/n`) hold together at most what one exact bucket of `B` and `L` would after all the
//! fallbacks' spending (a sum of token buckets loses refill to each one's cap; one bucket loses
//! it only when all are full), and their store buckets sum to the paused store's level. So the
//! store, once charged, holds no more than the exact bucket. Owed only shrinks as `g` grows, so
//! a low reading (the bucket refilled since it was read, or this sidecar never read it:
//! `g = 0`) charges more, never less. It is evaluated at the last spending, not later: after the
//! outage the store's refill goes to leases neither bucket sees.
//!
//! What can still exceed the bound, each measured by `engine/tests/outage.rs`'s property tests:
//! - a reading above the bucket's true level when the outage began (other sidecars leased
//!   since): at most that excess, over `n`, per sidecar;
//! - a store that comes back empty (restarted without persistence, failed over without the
//!   write): the burst, less what the paused store would have held;
//! - leases other sidecars take after the store answers and before this sidecar charges its
//!   debt (its next call on the key): at most its debt.
//!
//! With leases of rate the store refills the bucket at `L − R` while reservations `R` are live
//! (their stocks pay their own sidecars, through an outage too), so both buckets refill at that
//! rate until the last reservation lapses, then at `L` ([`Refill`]): the same argument over the
//! part of the key the fallbacks share (`Terms::effective_reserving`).
//!
//! Windows keep the old rule (everything spent is owed, up to the share of the burst): a
//! window's store count gives no tokens back during the outage, so nothing refilled there.

use sluice_core::bucket::{BucketState, Rate};
use sluice_core::reserve::refill_reduced;

/// How the store refills a key's bucket: at `L`, or, while leases of rate reserve `reserved`
/// thousandths of a token per period, at `L − R` until `until` (µs, this instance's clock: the
/// last reservation's lapse at the latest, as the store's last answer told), then at `L`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refill {
    /// The key's rate (`L`, `B`).
    pub rate: Rate,
    /// `R`, thousandths of a token per period (0: none).
    pub reserved: u64,
    /// When `R` has lapsed, at the latest.
    pub until: u64,
}

impl From<&Rate> for Refill {
    fn from(rate: &Rate) -> Self {
        Refill {
            rate: *rate,
            reserved: 0,
            until: 0,
        }
    }
}

impl Refill {
    /// Refills `bucket` to `to`, up to the burst: at `L − R` up to `until`, at `L` after it (a
    /// bucket's refill, piecewise, as the store's `Reservations::advance`). A `to` before the
    /// bucket's last update (a decision that began before another one settled first) adds
    /// nothing.
    fn refill(&self, bucket: &mut BucketState, to: u64) {
        if self.reserved > 0 && bucket.updated_micros < self.until {
            refill_reduced(bucket, &self.rate, self.reserved, to.min(self.until));
        }
        refill_reduced(bucket, &self.rate, 0, to);
    }
}

/// What a key's fallback owes the global store: tokens settled and not yet charged, and the
/// account of an outage still going on (boxed: every denied key carries an `Owed` in its
/// `Rare`, and few of them ever owe).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Owed {
    /// Tokens owed from outages the store has answered since, not yet charged to it.
    settled: u64,
    /// The outage in progress, from this key's first fallback spending in it.
    open: Option<Box<Account>>,
}

/// One outage's account of a key (a token bucket's; windows owe into `settled` directly).
#[derive(Debug, Clone, PartialEq)]
struct Account {
    /// When the account opened: the fallback's first spending in this outage.
    since: u64,
    /// The global bucket's level as this sidecar last read it, where both buckets start.
    start: f64,
    /// The exact bucket of the whole key, drained by `instances` times this sidecar's spending.
    exact: BucketState,
    /// The sidecars sharing the limit when the account opened (the fallback's divisor).
    instances: u64,
}

impl Owed {
    /// Nothing owed, no outage counted (a `const`, for `Rare`'s defaults).
    pub const NOTHING: Owed = Owed {
        settled: 0,
        open: None,
    };

    /// Whether anything is owed or being counted (most keys: no).
    pub fn is_owing(&self) -> bool {
        self.settled > 0 || self.open.is_some()
    }

    /// The fallback spent `tokens` of `rate` at `now`, one of `instances` sidecars sharing the
    /// limit; `reading` is the global bucket's level as this sidecar last read it (0 if it never
    /// did). `share_burst` is the fallback's own burst: a window owes up to it.
    pub fn spend(
        &mut self,
        refill: impl Into<Refill>,
        instances: u64,
        reading: f64,
        share_burst: u64,
        now: u64,
        tokens: u64,
    ) {
        let refill = refill.into();
        let rate = &refill.rate;
        if rate.algorithm.is_window() {
            self.settled = self.settled.saturating_add(tokens).min(share_burst);
            return;
        }
        let account = self.open.get_or_insert_with(|| {
            let start = reading.clamp(0.0, rate.burst as f64);
            Box::new(Account {
                since: now,
                start,
                exact: BucketState {
                    tokens: start,
                    updated_micros: now,
                    previous: 0.0,
                },
                instances: instances.max(1),
            })
        });
        refill.refill(&mut account.exact, now);
        account.exact.tokens -= account.instances as f64 * tokens as f64;
    }

    /// What is owed: what is settled, and what the outage in progress owes so far.
    pub fn due(&self, refill: impl Into<Refill>) -> u64 {
        let refill = refill.into();
        let open = self.open.as_ref().map_or(0, |a| a.owes(&refill));
        self.settled.saturating_add(open)
    }

    /// The store charged `tokens` of what was [due](Self::due): the outage in progress is
    /// settled at what it owes (the store has answered, so it is over), and what was charged
    /// is taken off.
    pub fn charged(&mut self, refill: impl Into<Refill>, tokens: u64) {
        self.settled = self.due(refill).saturating_sub(tokens);
        self.open = None;
    }
}

impl Account {
    /// `(P − U) / n` at the fallback's last spending, rounded up to whole tokens (less a hair,
    /// so that float noise in two equal buckets never owes a token). Not later: the outage may
    /// have ended since, and the store's refill after it is spent by leases that neither
    /// bucket sees (another sidecar, back first, leasing it while this one's account is still
    /// open), so crediting it would charge too little.
    fn owes(&self, refill: &Refill) -> u64 {
        let at = self.exact.updated_micros;
        let mut store = BucketState {
            tokens: self.start,
            updated_micros: self.since,
            previous: 0.0,
        };
        refill.refill(&mut store, at);
        let store = store.tokens;
        let owed = (store - self.exact.tokens) / self.instances as f64;
        (owed - 1e-9).ceil().max(0.0) as u64
    }
}

/// A key's state and what its fallback owes.
impl super::LeaseState {
    /// The `local_share` fallback spent `tokens` of a leased rule of `rate` at `now`, one of
    /// `instances` sidecars (its own burst `share_burst`): owed to the global bucket as [`Owed`]
    /// counts it, from this instance's last reading of the global bucket (none: 0, which owes
    /// the most).
    pub(super) fn owe(
        &mut self,
        rate: &Rate,
        instances: u64,
        share_burst: u64,
        now: u64,
        tokens: u64,
    ) {
        let reading = if self.global_known() {
            self.global_remaining
        } else {
            0.0
        };
        let refill = self.store_refill(rate);
        self.rare_mut()
            .owed
            .spend(refill, instances, reading, share_burst, now, tokens);
    }

    /// What the fallback owes the global bucket of `rate` ([`Owed::due`]).
    pub fn owed(&self, rate: &Rate) -> u64 {
        self.rare().owed.due(self.store_refill(rate))
    }

    /// The global bucket of `rate` was charged `tokens` of what the fallback owed
    /// ([`Owed::charged`]).
    pub fn owed_charged(&mut self, rate: &Rate, tokens: u64) {
        if self.rare().owed.is_owing() {
            let refill = self.store_refill(rate);
            self.rare_mut().owed.charged(refill, tokens);
        }
    }

    /// Every reservation the store keeps on this key's bucket at `now`, as its last lease answer
    /// showed ([`Rare::store_reserved`]; 0 once they have all lapsed).
    pub fn store_reserved(&self, now: u64) -> u64 {
        let rare = self.rare();
        if now < rare.store_reserved_until {
            rare.store_reserved
        } else {
            0
        }
    }

    /// How the store refills this key's bucket, as its last lease answer showed: at `L` less
    /// every reservation it keeps ([`Rare::store_reserved`]) until they lapse, then at `L`. The
    /// reservations' stocks fill through an outage (`RateLease::failed`) and the fallback
    /// shares only the rest; charged as if the bucket refilled at `L`, a fallback was credited
    /// with refill the store never made (two sidecars, one reserved 40% of `L`, a 1.3 s outage:
    /// 0.1 of a token beyond `B + L·t`; the outage property with leases of rate). No answer
    /// comes between the outage and the charge: the debt is charged before the key's next
    /// lease.
    fn store_refill(&self, rate: &Rate) -> Refill {
        let rare = self.rare();
        Refill {
            rate: *rate,
            reserved: rare.store_reserved,
            until: rare.store_reserved_until,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_core::unit::Unit;

    /// 100/s, burst 100.
    fn rate() -> Rate {
        Rate::per_unit(100, Unit::Second)
    }

    #[test]
    fn spending_the_refill_of_a_bucket_that_was_full_owes_nothing() {
        // Alone, the bucket full when the outage began: 20/s for 5 s is all refill a full
        // bucket could not have held. Only the last token is owed: spent when both buckets
        // were full, it leaves the exact one a token short of the store.
        let mut owed = Owed::default();
        for i in 0..100u64 {
            owed.spend(&rate(), 1, 100.0, 100, i * 50_000, 1);
        }
        assert_eq!(owed.due(&rate()), 1);
    }

    #[test]
    fn spending_what_the_store_refilled_owes_it_one_for_one() {
        // The bucket was empty: the store refilled 100/s, the fallback spent 30 at once and
        // 20 more 0.5 s later, all of it refill the store holds too.
        let mut owed = Owed::default();
        owed.spend(&rate(), 1, 0.0, 100, 0, 30);
        assert_eq!(owed.due(&rate()), 30);
        owed.spend(&rate(), 1, 0.0, 100, 500_000, 20);
        assert_eq!(owed.due(&rate()), 50);
        // 2 s on, both buckets would be full (the store at 100, the exact bucket too): only
        // what is spent since is owed.
        owed.spend(&rate(), 1, 0.0, 100, 2_500_000, 10);
        assert_eq!(owed.due(&rate()), 10);
    }

    #[test]
    fn a_sidecars_share_is_scaled_to_the_whole_key() {
        // Two sidecars, the bucket at 40: spending 30 of its share (50) drains the exact
        // bucket by 60. The store is full 0.6 s on, the exact bucket 1.2 s on, so a token
        // spent 0.9 s on leaves 15 + 1 owed, one spent 1.2 s on only itself.
        let mut owed = Owed::default();
        owed.spend(&rate(), 2, 40.0, 50, 0, 30);
        assert_eq!(owed.due(&rate()), 30);
        owed.spend(&rate(), 2, 40.0, 50, 900_000, 1);
        assert_eq!(owed.due(&rate()), 16);
        owed.spend(&rate(), 2, 40.0, 50, 1_300_000, 1);
        assert_eq!(owed.due(&rate()), 1);
    }

    #[test]
    fn a_charge_settles_the_outage_and_takes_off_what_it_charged() {
        let mut owed = Owed::default();
        owed.spend(&rate(), 1, 0.0, 100, 0, 30);
        owed.charged(&rate(), 10);
        assert!(owed.is_owing());
        assert_eq!(owed.due(&rate()), 20);
        // Settled: a later outage's account starts afresh, beside it.
        owed.spend(&rate(), 1, 0.0, 100, 60_000_000, 5);
        assert_eq!(owed.due(&rate()), 25);
        owed.charged(&rate(), 25);
        assert!(!owed.is_owing());
    }

    #[test]
    fn with_reservations_the_store_refills_less_and_the_fallback_owes_more() {
        // Alone, the bucket full, 100 a second spent for a second. With all of `L` refilling
        // the store, that is refill a full bucket could not hold: a token owed. With 40 a
        // second reserved, the store refilled at 60: 40 owed, less what the first step's
        // refill stood for (41). Reserved only until 0.5 s, 21 (or 22, float noise).
        let spend_a_second = |refill: Refill| {
            let mut owed = Owed::default();
            for i in 0..100u64 {
                owed.spend(refill, 1, 100.0, 100, i * 10_000, 1);
            }
            owed.due(refill)
        };
        let reserved = |until| Refill {
            rate: rate(),
            reserved: 40_000,
            until,
        };
        assert_eq!(spend_a_second(Refill::from(&rate())), 1);
        assert_eq!(spend_a_second(reserved(u64::MAX)), 41);
        assert!((21..=22).contains(&spend_a_second(reserved(500_000))));
        assert_eq!(spend_a_second(reserved(0)), 1, "lapsed before the outage");
        // Spending dated before the last (a decision that began first and settled second)
        // refills nothing, and wraps nothing.
        let mut owed = Owed::default();
        owed.spend(reserved(u64::MAX), 1, 50.0, 100, 1_000_000, 10);
        owed.spend(reserved(u64::MAX), 1, 50.0, 100, 999_000, 10);
        assert_eq!(owed.due(reserved(u64::MAX)), 20);
    }

    #[test]
    fn a_window_owes_what_it_spent_up_to_its_share_of_the_burst() {
        let window = Rate {
            algorithm: sluice_core::bucket::Algorithm::FixedWindow,
            ..rate()
        };
        let mut owed = Owed::default();
        owed.spend(&window, 2, 100.0, 50, 0, 30);
        owed.spend(&window, 2, 100.0, 50, 10_000_000, 30);
        assert_eq!(owed.due(&window), 50);
    }

    proptest! {
        /// Whatever the reading, the spending and the times: what is owed is never more than
        /// what was spent, and never less than what was spent beyond the refill a store that
        /// started at the reading could not have held (its share of `reading + L·t − B`).
        #[test]
        fn owed_is_what_was_spent_less_at_most_the_refill_a_full_store_wasted(
            instances in 1u64..=8,
            reading in 0.0f64..=100.0,
            spends in proptest::collection::vec((0u64..=2_000_000, 0u64..=20), 1..40),
        ) {
            let mut owed = Owed::default();
            let (mut now, mut spent, mut first) = (0u64, 0u64, None);
            for (gap, tokens) in spends {
                now += gap;
                owed.spend(&rate(), instances, reading, 100 / instances, now, tokens);
                spent += tokens;
                let since = *first.get_or_insert(now);
                let due = owed.due(&rate());
                let wasted =
                    (reading + 100.0 * (now - since) as f64 / 1e6 - 100.0).max(0.0) / instances as f64;
                prop_assert!(due <= spent, "{} owed of {} spent", due, spent);
                prop_assert!(
                    due as f64 >= spent as f64 - wasted - 1e-6,
                    "{} owed of {} spent, {} wasted", due, spent, wasted
                );
            }
        }
    }
}
