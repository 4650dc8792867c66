//! [`ConfigError`]: what every check of the configuration returns, located at `file:line`.
//!
//! It sits below everything that reports one ([`crate::rules`], [`crate::authz`] and the loader
//! in [`crate::config`], which re-exports it), so that none of them imports another for it.

use std::fmt;
use std::path::PathBuf;

/// Errors printed at most: a file of 100 000 descriptors with the same mistake in each says the
/// first ones and how many more, not 100 000 lines.
const MOST_SHOWN: usize = 50;

/// A configuration error, located at `file:line`, and any further errors found in the same
/// run: a file with three mistakes gets three lines, not three runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
pub struct ConfigError {
    /// The file the error is in.
    pub file: PathBuf,
    /// 1-based line; 0 when the error concerns the whole file.
    pub line: u64,
    /// What is wrong, for a human.
    pub message: String,
    /// Further errors, each with its own place (none inside them).
    pub also: Vec<ConfigError>,
}

impl ConfigError {
    /// An error at `file:line`.
    pub fn at(file: impl Into<PathBuf>, line: u64, message: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            line,
            message: message.into(),
            also: Vec::new(),
        }
    }

    /// Several errors as one (in the order given, each said once); `None` if there are none.
    pub fn all(errors: impl IntoIterator<Item = ConfigError>) -> Option<Self> {
        let mut seen = std::collections::HashSet::new();
        let mut flat = errors
            .into_iter()
            .flat_map(ConfigError::into_each)
            .filter(|e| seen.insert(e.clone()));
        let mut first = flat.next()?;
        first.also = flat.collect();
        Some(first)
    }

    /// This error and its further ones, each alone.
    pub fn into_each(mut self) -> impl Iterator<Item = ConfigError> {
        let also = std::mem::take(&mut self.also);
        std::iter::once(self).chain(also)
    }

    /// How many errors this is (itself and its further ones).
    pub fn count(&self) -> usize {
        1 + self.also.len()
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)?;
        } else {
            write!(f, "{}: {}", self.file.display(), self.message)?;
        }
        for more in self.also.iter().take(MOST_SHOWN - 1) {
            write!(f, "\n{more}")?;
        }
        if let Some(rest) = self.count().checked_sub(MOST_SHOWN).filter(|&n| n > 0) {
            write!(f, "\n… and {rest} more errors (fix these first)")?;
        }
        Ok(())
    }
}
