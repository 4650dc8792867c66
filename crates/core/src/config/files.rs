//! Which files a path stands for: the file itself, or a directory's YAML files; and the files
//! an `include:` glob matches.

use std::path::{Path, PathBuf};

use serde_saphyr::Spanned;

use super::reader::ConfigReader;
use crate::error::ConfigError;

/// The files a path stands for: itself, or the `*.yaml`/`*.yml` files of a directory, sorted.
pub(super) fn top_level_files(
    source: &dyn ConfigReader,
    path: &Path,
) -> Result<Vec<PathBuf>, ConfigError> {
    if !source.is_dir(path) {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = source
        .list_dir(path)
        .map_err(|e| ConfigError::at(path, 0, e.to_string()))?;
    let mut files: Vec<PathBuf> = entries
        .into_iter()
        .filter(|p| is_yaml(p) && !source.is_dir(p))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ConfigError::at(
            path,
            0,
            "directory holds no .yaml or .yml files",
        ));
    }
    Ok(files)
}

fn is_yaml(p: &Path) -> bool {
    let hidden = p
        .file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'));
    !hidden && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
}

pub(super) fn expand_include(
    source: &dyn ConfigReader,
    config: &Path,
    base: &Path,
    pattern: &Spanned<String>,
) -> Result<Vec<PathBuf>, ConfigError> {
    let line = pattern.referenced.line();
    let full = base.join(&pattern.value);
    let paths = source
        .glob(&full.to_string_lossy())
        .map_err(|e| ConfigError::at(config, line, format!("include '{}': {e}", pattern.value)))?;
    let mut found = Vec::new();
    for p in paths {
        if source.is_dir(&p) {
            found.extend(top_level_files(source, &p)?);
        } else {
            found.push(p);
        }
    }
    if found.is_empty() {
        return Err(ConfigError::at(
            config,
            line,
            format!("include '{}' matches no file", pattern.value),
        ));
    }
    Ok(found)
}
