//! The edge: the real file system and environment. The only file of `sluice-core` that reads
//! either; everything else parses and validates what a [`ConfigReader`] hands it.

use std::io;
use std::path::{Path, PathBuf};

use super::reader::ConfigReader;

/// The process's file system and environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsReader;

impl ConfigReader for FsReader {
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        std::fs::read_dir(path)?
            .map(|entry| entry.map(|e| e.path()))
            .collect()
    }

    fn glob(&self, pattern: &str) -> Result<Vec<PathBuf>, String> {
        let mut paths = Vec::new();
        for p in glob::glob(pattern).map_err(|e| e.to_string())? {
            paths.push(p.map_err(|e| e.to_string())?);
        }
        paths.sort();
        Ok(paths)
    }

    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}
