//! A deterministic fleet simulator (issue 42): `n` sidecars' real engines sharing one store, on
//! a simulated clock, with a store round trip, jitter and outages; every run compared with an
//! exact limiter on the very same arrivals. What two cores cannot run as processes (1 000
//! sidecars) runs here in seconds, the same for a seed every time.
//!
//! What it reports per run ([`run::Outcome`]): false denials (requests the exact limiter admits
//! and sluice denies), the most admitted beyond `B + L·t`, store calls on the key a second, and
//! decisions that waited on the store (or its whole timeout: the fallback decided).
//!
//! Layout: [`scenario`] (grid files), [`arrivals`] (the requests, from the seed), [`clock`]
//! (tokio's paused clock as sluice's `Clock`), [`store`] (the in-memory store behind a
//! simulated network), [`exact`] (the reference limiter), [`run`] (one run), [`report`] (the
//! table).

pub mod arrivals;
pub mod clock;
pub mod exact;
pub mod report;
pub mod run;
pub mod scenario;
pub mod store;
