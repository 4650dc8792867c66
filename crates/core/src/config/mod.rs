//! The configuration: its YAML model, how files are found and read, and what errors look like.
//!
//! # Layout
//! - [`model`]: the serde model of both file kinds (sluice config and envoyproxy/ratelimit domain files).
//! - [`duration`]: human-readable durations (`100ms`, `1s`, `10m`).
//! - [`load`]: reading a file or directory, `include:` globs and `maps:` files into a [`Config`].
//! - [`ConfigError`]: every error names the file and line.

pub mod duration;
pub mod load;
pub mod model;

use std::fmt;
use std::path::PathBuf;

pub use duration::HumanDuration;
pub use load::{Config, load_config};
pub use model::{EngineSettings, Fallback, Mode, RedisSettings, ResponseSettings};

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
