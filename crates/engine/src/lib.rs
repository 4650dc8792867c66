//! sluice's decision engine: descriptors → rules → local leased token buckets.
//!
//! Decisions are made in this process, from token leases held in a [`DashMap`](dashmap::DashMap);
//! the [`GlobalStore`] is asked only to grant or take back leases, off the common path.
//!
//! # Layout
//! - [`store`]: the [`GlobalStore`] trait (the global buckets) and its error type.
//! - [`memory`]: [`MemoryStore`], the embedded in-memory global store (the default).
//! - [`key`]: how a (rule, descriptor values) pair becomes a bucket key.
//! - [`bucket`]: [`LeaseBucket`](bucket::LeaseBucket), one key's local state.
//! - [`decision`]: requests, decisions and outcomes; [`EngineSettings`].
//! - [`engine`]: [`Engine`], the decision procedure (all-or-nothing across descriptors).
//! - `lease`: single-flight lease calls, lease sizing, background refill.
//! - [`maintenance`]: lease return, idle eviction and the `max_keys` bound.
//! - [`metrics`]: the engine's Prometheus series.
//! - [`quota`]: peeking at quotas and listing tracked keys, for operators.

pub mod bucket;
pub mod decision;
pub mod engine;
pub mod key;
mod lease;
pub mod maintenance;
pub mod memory;
pub mod metrics;
pub mod quota;
pub mod store;

pub use engine::{
    Code, Decision, DescriptorOutcome, Engine, EngineSettings, LimitInfo, RateLimitRequest,
};
pub use memory::MemoryStore;
pub use metrics::{EngineMetrics, StoreOp, StoreOutcome};
pub use store::{GlobalStore, LeaseGrant, StoreError};
