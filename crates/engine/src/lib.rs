//! sluice's decision engine: descriptors → rules → local leased token buckets.
//!
//! Decisions are made in this process, from token leases held in a [`DashMap`](dashmap::DashMap);
//! the [`GlobalStore`] is asked only to grant or take back leases, off the common path.
//!
//! # Layout
//! A decision flows down this list; each module uses only the ones above it.
//! - [`store`]: the [`GlobalStore`] trait (the global buckets) and its error type.
//! - [`memory`]: [`MemoryStore`], the embedded in-memory global store (the default), bounded.
//! - [`decision`]: what the engine is asked and answers: requests, outcomes, [`Denial`]s;
//!   [`EngineSettings`].
//! - [`ledger`]: pure: a key's [`LeaseState`](ledger::LeaseState) and [`settle`](ledger::settle),
//!   which charges a request's buckets all or none. The only place tokens are spent. A key's
//!   lease of rate and its stock ([`ledger::rate_lease`]) live there too.
//! - [`key`]: how a (rule, descriptor values) pair becomes a bucket key and a store key.
//! - [`bucket`]: [`LeaseBucket`](bucket::LeaseBucket), one key's state behind its lock.
//! - `plan`: a request's distinct buckets with their summed hits.
//! - `table`: the tracked keys, bounded by `max_keys`, evicting only keys at rest.
//! - `lease`: every store call: single-flight leases (`lease/waiting.rs`: what a request waiting
//!   for its key's call adds to it or is spared), background refills and returns (owned by a
//!   task tracker), over the lease policy, a synchronous step with no store I/O (`lease/policy.rs`:
//!   what a call asks for, sized in `lease/policy/size.rs`; `lease/grant.rs`: what its answer does to the key), and the
//!   reservations leases of rate ask for
//!   (`lease/rates.rs`; unless `engine.rate_lease_ttl: off`, `EngineSettings::rate_lease_ttl`).
//! - [`quota`]: peeking at quotas and listing tracked keys, for operators.
//! - [`metrics`]: the engine's Prometheus series.
//! - [`engine`]: [`Engine`], which runs a decision through the modules above.
//!
//! `docs/architecture.md` follows a request through these modules and lists the invariants.

pub mod assignment;
pub mod bucket;
mod debt;
pub mod decision;
pub mod engine;
pub mod holds;
pub mod key;
mod lease;
pub mod ledger;
pub mod memory;
pub mod metrics;
mod plan;
pub mod quota;
mod room;
pub mod store;
mod table;
#[cfg(test)]
mod testing;
pub mod top;

pub use decision::{
    Code, Decision, Denial, DescriptorOutcome, EngineSettings, LastDenial, LimitInfo,
    RateLimitRequest,
};
pub use engine::{Engine, Payee};
pub use memory::MemoryStore;
pub use metrics::{EngineMetrics, StoreOp, StoreOutcome, UsageOutcome};
pub use store::{
    GlobalStore, LeaseAsk, LeaseGrant, PushedReset, ReserveAsk, StoreError, next_turn, ready_in,
};
