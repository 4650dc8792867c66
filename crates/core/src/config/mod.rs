//! The configuration: how files are found and read, and the validated [`Config`] they make.
//!
//! This module assembles the others: it reads files through a [`ConfigReader`], parses them into the
//! [`schema`](crate::schema) (re-exported here as [`model`]), compiles the rules
//! ([`crate::rules`]) and the authz plan ([`crate::authz`]), and reports a [`ConfigError`]
//! (defined in `error.rs`, re-exported here). Nothing below it imports it.
//!
//! # Layout
//! - [`model`]: the serde model of both file kinds (sluice config and envoyproxy/ratelimit
//!   domain files): [`crate::schema`].
//! - [`duration`]: human-readable durations (`100ms`, `1s`, `10m`): `schema::duration`.
//! - [`reader`]: the [`ConfigReader`] of files and environment variables the loader reads from, and
//!   [`MemReader`] for configs held in memory.
//! - [`fs`]: [`FsReader`], the real file system and environment: the only I/O in this crate
//!   besides the system clock.
//! - [`secrets`]: TLS material and the reset token, read at load time and never printed.
//! - [`load`]: a file or directory, `include:` globs and `maps:` files into a validated
//!   [`Config`]; [`parse_config`] for a string. It uses `files` (which files a path and an
//!   `include:` stand for), `yaml` (YAML text into the model, errors at `file:line`) and
//!   `redis` (the checks of `redis:` across its fields).
//! - [`ConfigError`]: every error names the file and line.

mod files;
pub mod fs;
pub mod load;
pub mod reader;
mod redis;
pub mod secrets;
mod yaml;

pub use crate::error::ConfigError;
pub use crate::schema as model;
pub use crate::schema::duration::{self, HumanDuration, MAX_DURATION};
pub use crate::schema::{
    ChargeMode, EngineConfig, Fallback, LimitOverrides, Mode, RedisSettings, ResponseSettings,
    SentinelSettings,
};
pub use fs::FsReader;
pub use load::{Config, load_config, load_from, parse_config};
pub use reader::{ConfigReader, MemReader};
pub use redis::{MAX_KEY_PREFIX, check_key_prefix};
