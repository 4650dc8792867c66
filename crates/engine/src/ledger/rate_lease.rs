//! A key's lease of rate on this instance (issue 42; the store's side is
//! [`sluice_core::reserve`]): what the store reserved for it, the stock that fills at that rate,
//! and the demand the next ask is sized by.
//!
//! The stock fills from when the grant reached this instance until the call's send time plus the
//! ttl, and stops at the send time of the next call: both inside the store's own window, so what
//! it fills is never more than the store kept back from the bucket's refill. A next call that
//! fails leaves it filling to the reservation's end ([`RateLease::failed`]): the store keeps the
//! reservation unless the call reached it, and one that reached it with its answer lost is the
//! exception (docs/global-quotas.md, *After an outage*).

use sluice_core::bucket::Rate;
use sluice_core::reserve;

/// Tokens a second a stock may hold beyond: one second of its reserved rate (at least one token).
/// Beyond it what fills is dropped: under the limit the store's bucket is full anyway, and over
/// it every stock is spent before it fills.
const STOCK_SECONDS: f64 = 1.0;

/// The least demand a lease of rate is asked for, as the stock it makes (tokens): below it a
/// stock of one token is full between most requests and empty at the next, so what fills is
/// given back more often than it is spent, and the slice costs as many calls as with token
/// leases (1 000 sidecars at 80% of 100/s, 0.08 a second each: 17% of requests denied with
/// reservations, none with token leases; simulated).
const MIN_STOCK: f64 = 2.0;

/// Demand is measured over at least this long (µs), so one request a round trip after the first
/// lease does not read as thousands a second.
const MEASURE_MICROS: u64 = 1_000_000;

/// A measurement also waits for this many hits (or [`MEASURE_LONGEST`]): a Poisson count's
/// relative error is `1/√n`, and a thin slice read from two hits asks for many times its
/// demand. 1 000 sidecars starved at 0.4 a second each, with two hits in a second read as 2 a
/// second: a few dozen reserved 2 a second each, dropped most of it while they waited for
/// their turn, and the fleet got 65% of `L` for 100 s (simulated). With 8, a slice of 0.4 a
/// second reads as 2 about once in 3 000 measurements.
const MEASURE_HITS: u64 = 8;

/// The longest a measurement waits for [`MEASURE_HITS`] (µs): a slice this thin is below
/// [`MIN_STOCK`] whatever it saw.
const MEASURE_LONGEST: u64 = 8_000_000;

/// Asks are this much above the measured demand. 1: a stock's ups and downs are the store's
/// (what a full stock drops is rate lost to every sidecar). 1.2, with every call losing the
/// fraction of a token filled so far, put a fleet at 80% of `L` on all of the reservable rate;
/// not measured again since.
pub const HEADROOM: f64 = 1.0;

/// One key's lease of rate, in its state's rare part (`Rare::rate_lease`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RateLease {
    /// Thousandths of a token per period reserved (0: none).
    pub per_mille: u64,
    /// The stock has filled up to here (engine clock, µs).
    pub filled_to: u64,
    /// It fills until here: the last call's send time plus its ttl, or the next call's send
    /// time once that call is sent (back to the first, [`ends`](Self::ends), if it fails).
    pub until: u64,
    /// The last call's send time plus its ttl, never cut: where the reservation the store holds
    /// ends at the earliest, on this instance's clock.
    pub ends: u64,
    /// The ttl of the reservation (renewed before its last quarter).
    pub ttl: u64,
    /// A fraction of a token filled, not yet whole.
    pub carry: f64,
    /// Hits seen (spent and denied) since `counted_from`.
    pub seen: u64,
    /// Where the current measurement began.
    pub counted_from: u64,
    /// Smoothed demand, tokens a second (0: none measured yet).
    pub demand: f64,
    /// What the last call asked for (thousandths of a token per period).
    pub asked: u64,
    /// Whole tokens filled while the stock was full, not yet given back to the store. Dropped,
    /// they were rate no sidecar got: at 128 sidecars on 80 a second, half of what filled
    /// (stocks of one token) in the simulator, and the store's bucket ran dry.
    pub dropped: u64,
    /// The store's bucket showed no slack at the last answer (under three quarters of its
    /// burst, [`reserve::slack`]): the next call from an empty stock that has not yet filled a
    /// whole token gives back the fraction it filled ([`sending`](Self::sending)).
    pub drained: bool,
    /// The stock has filled a whole token since its reservation began (from none): from then
    /// on its fills keep in step with its demand, and the fraction it holds is its own.
    pub filled_a_token: bool,
    /// A call failed since the last answer ([`failed`](Self::failed); cleared by any answer,
    /// `LeaseState::rate_lease_answered`): the fallback decides what the stock cannot pay,
    /// from a local bucket the stock's fills no longer restart.
    pub outage: bool,
}

impl RateLease {
    /// A key's first lease of rate: demand counted from `now`, nothing reserved yet.
    pub fn starting(now: u64) -> Self {
        Self {
            counted_from: now,
            ..Self::default()
        }
    }

    /// Whether a key with no lease of rate yet starts one, boxing its rare part for it: what it
    /// saw since its last grant (`seen` hits over `span` µs, read over at least
    /// [`MEASURE_MICROS`]) or its demand estimate could fill half a stock of [`MIN_STOCK`]
    /// tokens. A thinner key would ask for nothing ([`ask`](Self::ask)), and started on every
    /// strict key of a remote store, the box cost each of 100 000 thin keys (0.05 a second
    /// each) a `Rare` it never used. Half: at the whole stock, noise kept slices of 2.5 a
    /// second out for a call or two more, and 32 sidecars at 80% of 100/s in step cost 12.3
    /// calls a second against 9.8; at half the rates grid is unchanged (simulated).
    pub fn worth_starting(seen: u64, span: u64, demand_per_sec: f32) -> bool {
        let sample = seen as f64 * 1e6 / span.max(MEASURE_MICROS) as f64;
        sample.max(f64::from(demand_per_sec)) * STOCK_SECONDS >= MIN_STOCK / 2.0
    }

    /// Fills `lease` (the instance's tokens of the key) up to `now`, at most to the stock's cap;
    /// whole tokens beyond it are kept aside to give back to the store with the next call.
    pub fn fill(&mut self, rate: &Rate, lease: &mut u64, now: u64) {
        let to = now.min(self.until);
        if self.per_mille == 0 || to <= self.filled_to {
            return;
        }
        let added = reserve::filled(rate, self.per_mille, to - self.filled_to) + self.carry;
        self.filled_to = to;
        let whole = added.floor();
        self.carry = added - whole;
        let whole = whole as u64;
        self.filled_a_token |= whole > 0;
        let kept = whole.min(self.cap(rate).saturating_sub(*lease));
        *lease += kept;
        self.dropped = self.dropped.saturating_add(whole - kept);
    }

    /// The most the stock fills to: [`STOCK_SECONDS`] of the reserved rate, at least a token.
    fn cap(&self, rate: &Rate) -> u64 {
        let per_sec = reserve::filled(rate, self.per_mille, 1_000_000);
        ((per_sec * STOCK_SECONDS).ceil() as u64).max(1)
    }

    /// A call is sent at `now`: the stock stops filling then (the store ends the reservation at
    /// its own now, which is later). `seen` hits since the last call count toward the demand.
    /// Returns the thousandths of a token to give back with it (lost if the call fails:
    /// stricter, never looser): the whole tokens the full stock dropped and, when the stock is
    /// `empty`, the bucket was [`drained`](Self::drained) and the stock has not yet filled a
    /// whole token ([`filled_a_token`](Self::filled_a_token)), the fraction it filled. A new
    /// stock fills from its answer, a round trip after the store cut the bucket's refill, so
    /// at the limit it is a hair short of its first token while the bucket already misses it:
    /// 22 sidecars in step on a burst of 22 were denied 5 of 792 requests an exact limiter
    /// admits, none with the fractions given back (32 at 100% of `L`, Poisson: 0.30% → 0.03%;
    /// simulated). Not from a fuller bucket, nor from a stock already in step with its demand:
    /// given back, every stock that fills exactly its demand started each call from nothing, a
    /// hair short at its next request, and calls rose by a third under the limit (32 at 80%,
    /// Poisson, from any bucket: 23.6 → 31.9 a second) and by 60% at it (32 in step at 100%,
    /// from any stock: 52.7 → 85.9, 55.2 from new stocks only).
    pub fn sending(&mut self, seen: u64, now: u64, empty: bool) -> u64 {
        self.until = self.until.min(now);
        self.seen = self.seen.saturating_add(seen);
        let span = now.saturating_sub(self.counted_from);
        if span >= MEASURE_MICROS && (self.seen >= MEASURE_HITS || span >= MEASURE_LONGEST) {
            let sample = self.seen as f64 * 1e6 / span as f64;
            self.demand = if self.demand == 0.0 {
                sample
            } else {
                0.5 * self.demand + 0.5 * sample
            };
            self.seen = 0;
            self.counted_from = now;
        }
        let mut milli = std::mem::take(&mut self.dropped).saturating_mul(1_000);
        if empty && self.drained && !self.filled_a_token {
            // Whole thousandths only, and never more than was filled: `carry · 1000` can round
            // up to a whole number the carry is a hair short of.
            let mut part = (self.carry * 1_000.0).floor();
            if part / 1_000.0 > self.carry {
                part -= 1.0;
            }
            if part > 0.0 {
                self.carry -= part / 1_000.0;
                milli = milli.saturating_add(part as u64);
            }
        }
        milli
    }

    /// What to ask for: the measured demand and [`HEADROOM`], in thousandths of a token per
    /// period of `rate`; nothing before a whole measurement ([`MEASURE_HITS`]).
    pub fn ask(&mut self, rate: &Rate) -> u64 {
        let demand = self.demand;
        // A slice thinner than a stock of MIN_STOCK tokens leases tokens instead (see there).
        if demand * STOCK_SECONDS < MIN_STOCK {
            self.asked = 0;
            return 0;
        }
        let period_secs = rate.period_micros() as f64 / 1e6;
        self.asked = (demand * HEADROOM * period_secs * reserve::PER_MILLE as f64).ceil() as u64;
        self.asked
    }

    /// The store answered a call sent at `sent`, at `arrived`: the stock fills at `per_mille`
    /// from the arrival until `sent + ttl`. The fraction of a token filled so far is kept (it
    /// was filled inside the old reservation's window; dropped at every call, it cost a
    /// starved key's two sidecars 6 tokens a second in the simulator).
    ///
    /// The round trip between `sent` and `arrived` fills too, at the lesser of the old and the
    /// new rate, up to where either ends: at any moment of it the store held the old
    /// reservation (before it took the call) or the new one (after), so that rate was kept from
    /// its refill. Unfilled, every renewal lost `R·RTT`: a starved key's 2 sidecars settled at
    /// 99.2% of `L` with a 1 ms round trip and 97.5% with 5 ms (simulated), 100% with tokens.
    /// `remaining` is what the answer says the bucket holds ([`drained`](Self::drained)).
    pub fn granted(
        &mut self,
        rate: &Rate,
        per_mille: u64,
        sent: u64,
        arrived: u64,
        ttl: u64,
        remaining: f64,
    ) {
        self.drained = !reserve::slack(rate, remaining);
        let ends = sent.saturating_add(ttl);
        // From where the stock has filled to, if later: a decision's `sent` (its own start) can
        // be before the previous call's answer, which it waited for, and the stock filled from
        // that answer on (counted twice, 2 sidecars at 100% went 1.5 tokens over B + L·t).
        let from = sent.max(self.filled_to);
        let gap_end = arrived.min(self.ends).min(ends);
        if self.per_mille > 0 && per_mille > 0 && gap_end > from {
            self.carry += reserve::filled(rate, self.per_mille.min(per_mille), gap_end - from);
        }
        // A reservation begins from none: the last one granted nothing, or lapsed before this
        // call was sent.
        if self.per_mille == 0 || sent >= self.ends {
            self.filled_a_token = false;
        }
        self.per_mille = per_mille;
        self.filled_to = arrived;
        self.until = ends;
        self.ends = ends;
        self.ttl = ttl;
    }

    /// Whether to renew: a call failed since the last answer, the reservation is in its last
    /// quarter (or over while it had one), its
    /// stock dropped a stock's worth (at least 2 tokens) that the renewal gives back, or
    /// the demand seen since the last measurement (`unsent`: hits since the last call) is
    /// clearly not what the last ask was sized for: more than three standard deviations of a
    /// Poisson count away (and 2 hits), over at least a second. Noise on a thin slice then
    /// costs no call; a slice that doubles is renewed within about a second.
    pub fn due(&self, rate: &Rate, now: u64, unsent: u64) -> bool {
        if self.per_mille == 0 {
            return false;
        }
        // A call failed and none has been answered since: renew (on a live store) so the
        // answer ends the outage's hold on the fallback's local bucket (`outage`). A key its
        // stock pays made no call until its ttl's last quarter, and its local bucket banked
        // its share of the burst meanwhile, for an outage after to spend on top.
        if self.outage {
            return true;
        }
        if now.saturating_add(self.ttl / 4) >= self.until || self.dropped >= self.cap(rate).max(2) {
            return true;
        }
        let span = now.saturating_sub(self.counted_from);
        if span < MEASURE_MICROS {
            return false;
        }
        let seen = self.seen.saturating_add(unsent) as f64;
        let expected = reserve::filled(rate, self.asked, span) / HEADROOM;
        (seen - expected).abs() > 3.0 * expected.sqrt() + 2.0
    }

    /// Whether the store keeps this holder's reservation: a grant, or an ask granted nothing
    /// (the store reserves from slack only, `sluice_core::reserve::reservable`). An ask left in
    /// the store counts toward every share and toward the sum that marks a key starved until
    /// it lapses (a pod that left: up to the ttl), so it is ended as a grant is.
    pub fn recorded(&self) -> bool {
        self.per_mille > 0 || self.asked > 0
    }

    /// The last call failed (or was cut off at the decision's deadline): as far as this sidecar
    /// can tell, its reservation stands as it was, so the stock fills on to its end
    /// ([`ends`](Self::ends)).
    /// Stopped, the reservation went unused through an outage while the store kept it from the
    /// bucket's refill, and the fallback (sharing `L − R`) could not make it up: a sidecar under
    /// its limit was denied after an outage. What the call was to give back stays lost
    /// (stricter). A call the store applied before its answer was lost (a timeout, a connection
    /// cut after the write) may have renewed the reservation smaller or ended it: the stock
    /// then fills what the store no longer reserves, at most the old reservation for the rest
    /// of its ttl (docs/global-quotas.md, *After an outage: what the fallback owes*).
    pub fn failed(&mut self) {
        self.until = self.until.max(self.ends);
        self.outage = true;
    }

    /// Starts the fallback's `local` bucket empty from where the stock has filled to (see
    /// `LeaseState::fill`), unless a call failed since the last answer ([`outage`](Self::outage)).
    fn restart(&self, local: &mut sluice_core::bucket::BucketState) {
        if !self.outage && self.filled_to > local.updated_micros {
            *local = sluice_core::bucket::BucketState::empty(self.filled_to);
        }
    }

    /// Whether this lease went unused (`idle` µs since its key's last request) for longer than
    /// its measured demand explains: [`MEASURE_HITS`] requests' time at that demand, at least
    /// `ttl` ([`MEASURE_LONGEST`] with none measured yet; a Poisson count misses 8 expected
    /// requests once in 3 000).
    pub fn unused(&self, idle: u64, ttl: u64) -> bool {
        let explained = if self.demand > 0.0 {
            (MEASURE_HITS as f64 * 1e6 / self.demand).min(u64::MAX as f64) as u64
        } else {
            MEASURE_LONGEST
        };
        idle > explained.max(ttl)
    }

    /// Whether a reservation fills the stock now.
    pub fn live(&self, now: u64) -> bool {
        self.per_mille > 0 && now < self.until
    }
}

mod state;

#[cfg(test)]
mod tests;
