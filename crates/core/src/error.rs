//! [`ConfigError`]: what every check of the configuration returns, located at `file:line`.
//!
//! It sits below everything that reports one ([`crate::rules`], [`crate::authz`] and the loader
//! in [`crate::config`], which re-exports it), so that none of them imports another for it.

use std::fmt;
use std::path::PathBuf;

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
