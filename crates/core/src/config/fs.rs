//! The edge: the real file system and environment. The only file of `sluice-core` that reads
//! either; everything else parses and validates what a [`ConfigReader`] hands it.

use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

use super::reader::{ConfigReader, MAX_DIR_ENTRIES, MAX_FILE_BYTES};

/// Reads `path` if it is a regular file of at most `max` bytes. Opened without blocking (a FIFO
/// opens at once) and checked on the open handle: a FIFO, device or socket is an error naming
/// what it is, never a read that waits for a writer (which wedged `config check` and reloads).
pub fn read_regular_file(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}: sluice reads configuration from regular files only"),
        ));
    }
    if meta.len() > max {
        return Err(too_large(max));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large(max));
    }
    Ok(bytes)
}

fn too_large(max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "larger than {} MiB, the most a config file may hold",
            max >> 20
        ),
    )
}

/// The process's file system and environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsReader;

impl ConfigReader for FsReader {
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        read_regular_file(path, MAX_FILE_BYTES)
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let listed: Vec<PathBuf> = std::fs::read_dir(path)?
            .take(MAX_DIR_ENTRIES + 1)
            .map(|entry| entry.map(|e| e.path()))
            .collect::<io::Result<_>>()?;
        if listed.len() > MAX_DIR_ENTRIES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "holds more than {MAX_DIR_ENTRIES} entries, the most a config directory may \
                     hold: keep the config files in a directory of their own"
                ),
            ));
        }
        Ok(listed)
    }

    fn glob(&self, pattern: &str) -> Result<Vec<PathBuf>, String> {
        let mut paths = Vec::new();
        for p in glob::glob(pattern).map_err(|e| e.to_string())? {
            paths.push(p.map_err(|e| e.to_string())?);
            if paths.len() > MAX_DIR_ENTRIES {
                return Err(format!(
                    "matches more than {MAX_DIR_ENTRIES} paths, the most an include may name"
                ));
            }
        }
        paths.sort();
        Ok(paths)
    }

    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}
