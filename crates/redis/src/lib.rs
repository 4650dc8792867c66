//! sluice's global store on Redis, Redis Cluster and Redis Sentinel.
//!
//! Every global bucket is one Redis hash, changed only by the Lua scripts in `lua/`, which refill it
//! from Redis's own `TIME` (one clock for every sidecar) and touch exactly one key per call.
//!
//! # Layout
//! - [`scripts`]: the Lua scripts, each loaded once into a [`redis::Script`] (NOSCRIPT handled).
//! - [`connection`]: standalone (a reconnecting `ConnectionManager`), cluster or Sentinel
//!   connections.
//! - [`sentinel`]: the connection to the master Redis Sentinel names, looked up again after a
//!   failover.
//! - `batch`: lease and release calls of many keys share one round trip per node.
//! - [`breaker`]: the circuit breaker that keeps a down Redis from costing more than one timeout.
//! - [`store`]: [`RedisStore`], the [`GlobalStore`](sluice_engine::GlobalStore) implementation,
//!   with its background probe and instance heartbeat.

mod batch;
pub mod breaker;
pub mod connection;
pub mod scripts;
pub mod sentinel;
pub mod store;

pub use connection::check_settings;
pub use store::{RedisMetrics, RedisStore};
