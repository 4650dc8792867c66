//! Loading the configuration as `serve` and `config check` both do: the core's loader, then the
//! checks only the binary's dependencies can make (the Redis client's own URL parser), and what
//! only `serve`'s flags can require (`check:` for the HTTP check port); and the config that
//! envoyproxy/ratelimit's environment stands for, without `--config`.

use std::path::{Path, PathBuf};

use sluice_core::ConfigError;
use sluice_core::config::{Config, ConfigReader, FsReader};

use crate::reference_env::{ENV_FILE, FromEnv};

/// Loads and validates `path` completely: whatever passes here starts serving.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let config = sluice_core::load_config(path)?;
    if let Some(redis) = &config.redis {
        sluice_redis::check_settings(redis).map_err(|m| config.redis_error(m))?;
    }
    Ok(config)
}

/// [`load`], for a server with the HTTP check port on (`--check-addr`): the config must name
/// the proxy in front (`check:`), since which headers carry the request being decided depends
/// on it, and no default is safe for every proxy (each passes a client's own headers on). Used
/// at start (exit 64) and for every reload, so a change that drops `check:` is rejected.
pub fn load_for_check(path: &Path) -> Result<Config, ConfigError> {
    let config = load(path)?;
    if config.check.is_none() {
        return Err(ConfigError::at(
            path,
            0,
            "the HTTP check (--check-addr) needs a `check:` section naming the proxy in front (`check: {proxy: nginx}`, or caddy, traefik, envoy): it says which headers carry the request the proxy asks about (docs/forward-auth.md)",
        ));
    }
    Ok(config)
}

/// Loads the configuration envoyproxy/ratelimit's environment stands for
/// ([`crate::reference_env`]) with limits from files: its config file, held in memory in the
/// config directory, read by the same loader as any file, so every check is the file path's.
pub fn load_env(from: &FromEnv, dir: &Path) -> Result<Config, ConfigError> {
    if !dir.is_dir() {
        return Err(ConfigError::at(
            dir,
            0,
            "no such directory: the config files' directory is RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (or give --config)",
        ));
    }
    load_text(dir.join(ENV_FILE), from.with_files(dir))
}

/// The same with limits pushed over xDS (`domains`: [`crate::xds::domains_yaml`]) as the
/// server's `version`, the file named as if in the working directory (where relative TLS paths
/// are read from). The config's version (what `sluice rules` and `/readyz` show) names the
/// server's version after the hash of what it loaded.
pub fn load_pushed(from: &FromEnv, domains: &str, version: &str) -> Result<Config, ConfigError> {
    let mut config = load_text(PathBuf::from(XDS_FILE), from.with_domains(domains))?;
    config.version = format!("{}/xds:{version}", config.version);
    Ok(config)
}

/// What errors name the config pushed over xDS.
pub const XDS_FILE: &str = "(envoyproxy-ratelimit-environment-and-xds).yaml";

/// Loads `text` as the config file at `path` (held in memory; every other file from disk).
fn load_text(path: PathBuf, text: String) -> Result<Config, ConfigError> {
    let reader = Overlay {
        path: path.clone(),
        text,
    };
    let config = sluice_core::config::load_from(&reader, &path)?;
    if let Some(redis) = &config.redis {
        sluice_redis::check_settings(redis).map_err(|m| config.redis_error(m))?;
    }
    Ok(config)
}

/// [`load_env`] for a reload: the environment read again (it is the process's, so the same),
/// and the directory's files as they are now. `dir` is the directory reloads watch.
pub fn reload_env(dir: &Path) -> Result<Config, ConfigError> {
    let from = crate::reference_env::read(&|name| std::env::var(name).ok())
        .map_err(|e| ConfigError::at(ENV_FILE, 0, e.to_string()))?;
    load_env(&from, dir)
}

/// The real file system, with one more file held in memory: the config file the environment
/// stands for.
struct Overlay {
    path: PathBuf,
    text: String,
}

impl ConfigReader for Overlay {
    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        if path == self.path {
            return Ok(self.text.clone().into_bytes());
        }
        FsReader.read(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        path != self.path && FsReader.is_dir(path)
    }

    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<PathBuf>> {
        FsReader.list_dir(path)
    }

    fn glob(&self, pattern: &str) -> Result<Vec<PathBuf>, String> {
        FsReader.glob(pattern)
    }

    fn env(&self, name: &str) -> Option<String> {
        FsReader.env(name)
    }
}
