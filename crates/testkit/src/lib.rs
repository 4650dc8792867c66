//! Real parts for sluice's tests and load harness (never mocks).
//!
//! # Layout
//! - [`redis`]: a standalone Redis and a 3-master Redis Cluster in containers (testcontainers).
//! - [`process`]: the `sluice` binary and a real Envoy as child processes, and an HTTP/1.1 client.

pub mod process;
pub mod redis;
