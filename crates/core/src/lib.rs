//! The pure core of sluice: no I/O on the decision path, no async, no global state.
//!
//! # Layout
//! - [`clock`]: the [`Clock`](clock::Clock) trait, the system clock and a [`ManualClock`](clock::ManualClock) for tests.
//! - [`unit`]: time units of `rate_limit.unit` and their lengths.
//! - [`bucket`]: token-bucket math (refill, time until tokens), shared by every backend and mirrored in Lua.
//! - [`window`]: the fixed- and sliding-window algorithms over the same bucket state.
//! - [`config`]: the YAML configuration model, loading (files, directories, includes) and validation.
//! - [`rules`]: the compiled [`RuleSet`](rules::RuleSet) and descriptor matching.
//! - [`authz`]: turning an HTTP request (as ext_authz sees it) into rate-limit descriptors.
//! - [`hash`]: FNV-1a 64, the one stable hash everything uses.
//! - [`descriptor`]: descriptors and their entries, as requests carry them.

pub mod authz;
pub mod bucket;
pub mod clock;
pub mod config;
pub mod descriptor;
pub mod hash;
pub mod rules;
pub mod unit;
pub mod window;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{ConfigError, load_config, parse_config};
pub use descriptor::{Descriptor, Entry};
pub use rules::{Rule, RuleSet};
pub use unit::Unit;
