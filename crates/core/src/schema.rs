//! The serde model of sluice's config file and of envoyproxy/ratelimit domain files.
//!
//! Every struct denies unknown fields, so a misspelled field is an error with its line, as it is
//! in envoyproxy/ratelimit.
//!
//! It sits below everything that reads it ([`crate::rules`], [`crate::authz`] and the loader in
//! [`crate::config`], which re-exports it as `config::model`), so that none of them imports
//! another for its types.
//!
//! # Layout
//! - [`file`](mod@file): [`ConfigFile`], the top level of a sluice config file, with `tls:` and `admin:`.
//! - [`domain`]: [`DomainFile`], the descriptor tree and `rate_limit` of upstream's format.
//! - [`modes`]: [`Mode`], [`ChargeMode`], [`Fallback`] and [`LimitOverrides`].
//! - [`authz`]: `authz:` entries and where their values come from, and `maps:`.
//! - [`check`]: `check:`, the proxy in front of the HTTP check and the headers it sets.
//! - [`settings`]: `redis:`, `engine:` and `response:`, with their defaults.
//! - [`duration`]: human-readable durations (`100ms`, `1s`, `10m`).

pub mod authz;
pub mod check;
pub mod domain;
pub mod duration;
pub mod file;
pub mod modes;
pub mod settings;

pub use authz::{ApiKeySource, AuthzConfig, AuthzEntryConfig, MapConfig, Source};
pub use check::{CheckConfig, CheckHeadersConfig, CheckProxy};
pub use domain::{DescriptorConfig, DomainFile, RateLimitConfig, ReplacesConfig, ReserveConfig};
pub use duration::{HumanDuration, MAX_DURATION};
pub use file::{AdminConfig, ConfigFile, TlsConfig};
pub use modes::{ChargeMode, Fallback, LimitOverrides, Mode};
pub use settings::{
    EngineConfig, RedisSettings, ResponseSettings, RlsHeaders, SentinelSettings, check_header_name,
};
