//! The pure core of sluice: no I/O on the decision path, no async, no global state.
//!
//! # Layout
//! In layers: a module imports only modules listed above it, so there are no module cycles.
//! - [`clock`]: the [`Clock`](clock::Clock) trait, the system clock and a [`ManualClock`](clock::ManualClock) for tests;
//!   [`SampledLine`](clock::SampledLine), a log line a fault or a client can repeat, at most once a second.
//! - [`unit`]: time units of `rate_limit.unit` and their lengths.
//! - [`hash`]: FNV-1a 64, the one stable hash everything uses.
//! - [`descriptor`]: descriptors and their entries, as requests carry them.
//! - [`path`]: a request's path in one spelling (RFC 3986 normalisation, merged slashes), what
//!   ext_authz and the HTTP check decide on.
//! - `error`: [`ConfigError`], which every check of the configuration returns.
//! - `rate`: what a limit and a bucket are ([`Rate`](bucket::Rate), [`BucketState`](bucket::BucketState)),
//!   below both algorithms on them; re-exported by [`bucket`].
//! - [`window`]: the fixed- and sliding-window algorithms over the same bucket state.
//! - [`bucket`]: token-bucket math (refill, time until tokens), shared by every backend and mirrored in Lua.
//! - [`reserve`]: leases of rate: reservations of part of a bucket's rate, which refill it more
//!   slowly while they last (issue 42), mirrored in Lua.
//! - [`schema`]: the YAML configuration model (re-exported as `config::model`).
//! - [`rules`]: the compiled [`RuleSet`](rules::RuleSet) and descriptor matching.
//! - [`authz`]: turning an HTTP request (as ext_authz sees it) into rate-limit descriptors.
//! - [`check`]: the compiled `check:` section, where the HTTP check reads the request a proxy
//!   forwards.
//! - [`config`]: loading (files, directories, includes) and validation, into a
//!   [`Config`](config::Config).

pub mod authz;
pub mod bucket;
pub mod check;
pub mod clock;
pub mod config;
pub mod descriptor;
mod error;
pub mod hash;
pub mod path;
mod rate;
pub mod reserve;
pub mod rules;
pub mod schema;
pub mod unit;
pub mod window;

pub use clock::{Clock, ManualClock, SampledLine, SystemClock, Throttle};
pub use config::{ConfigError, load_config, parse_config};
pub use descriptor::{Descriptor, Entry};
pub use rules::{Rule, RuleSet};
pub use unit::Unit;
