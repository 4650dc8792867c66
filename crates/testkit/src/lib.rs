//! Real parts for sluice's tests and load harness (never mocks).
//!
//! # Layout
//! - [`redis`]: a standalone Redis and a 3-master Redis Cluster in containers (testcontainers).
//! - [`hostile`]: a gRPC client on raw HTTP/2 that opens streams and leaves them unfinished or idle,
//!   and the RSS of a process: what a client can make sluice hold.
//! - [`pki`]: a throwaway CA with server and client certificates for TLS tests.
//! - [`ports`]: ports for test listeners, below the kernel's ephemeral range and never handed out
//!   twice.
//! - [`process`]: the `sluice` binary and a real Envoy as child processes, and an HTTP/1.1 client.
//! - [`toxiproxy`]: a Toxiproxy server for network faults between sluice and Redis.
//! - [`xds`]: an xDS management server (go-control-plane) pushing envoyproxy/ratelimit's
//!   `RateLimitConfig`.

pub mod hostile;
pub mod pki;
pub mod ports;
pub mod process;
pub mod redis;
pub mod toxiproxy;
pub mod xds;
