//! YAML text into the model: the parser's errors as `file:line: message`, and one document per
//! file.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::error::ConfigError;

/// Parses YAML into `T`, turning the parser's error into `file:line: message`.
pub(crate) fn parse_yaml<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    let docs: Vec<T> = serde_saphyr::from_multiple(text).map_err(|e| {
        let line = e.location().map(|l| l.line()).unwrap_or(0);
        let rendered = e.without_snippet().to_string();
        let first = rendered.lines().next().unwrap_or("invalid YAML").trim();
        // The location goes in front (`file:line:`), not again at the end.
        let message = match first.rfind(" at line ") {
            Some(at) if first[at..].contains(", column ") => &first[..at],
            _ => first,
        }
        .to_string();
        ConfigError::at(path, line, message)
    })?;
    let count = docs.len();
    let mut docs = docs.into_iter();
    match (docs.next(), count) {
        (Some(doc), 1) => Ok(doc),
        (None, _) => Err(ConfigError::at(path, 0, "holds no YAML document")),
        _ => Err(ConfigError::at(
            path,
            0,
            format!(
                "holds {count} YAML documents; write one per file (envoyproxy/ratelimit would silently read only the first)"
            ),
        )),
    }
}
