//! The configuration: its YAML model, how files are found and read, and what errors look like.
//!
//! # Layout
//! - [`model`]: the serde model of both file kinds (sluice config and envoyproxy/ratelimit domain files).
//! - [`duration`]: human-readable durations (`100ms`, `1s`, `10m`).
//! - [`source`]: the [`Source`] of files and environment variables the loader reads from, and
//!   [`MemSource`] for configs held in memory.
//! - [`fs`]: [`FsSource`], the real file system and environment: the only I/O in this crate
//!   besides the system clock.
//! - [`secrets`]: TLS material and the reset token, read at load time and never printed.
//! - [`load`]: a file or directory, `include:` globs and `maps:` files into a validated
//!   [`Config`]; [`parse_config`] for a string.
//! - [`ConfigError`]: every error names the file and line.

pub mod duration;
pub mod fs;
pub mod load;
pub mod model;
pub mod secrets;
pub mod source;

use std::fmt;
use std::path::PathBuf;

pub use duration::{HumanDuration, MAX_DURATION};
pub use fs::FsSource;
pub use load::{Config, load_config, load_from, parse_config};
pub use model::{
    ChargeMode, EngineSettings, Fallback, LimitOverrides, Mode, RedisSettings, ResponseSettings,
};
pub use source::{MemSource, Source};

/// A configuration error, located at `file:line`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file the error is in.
    pub file: PathBuf,
    /// 1-based line; 0 when the error concerns the whole file.
    pub line: u64,
    /// What is wrong, for a human.
    pub message: String,
}

impl ConfigError {
    /// An error at `file:line`.
    pub fn at(file: impl Into<PathBuf>, line: u64, message: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)
        } else {
            write!(f, "{}: {}", self.file.display(), self.message)
        }
    }
}
