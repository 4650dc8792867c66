//! Loading the configuration as `serve` and `config check` both do: the core's loader, then the
//! checks only the binary's dependencies can make (the Redis client's own URL parser), and what
//! only `serve`'s flags can require (`check:` for the HTTP check port).

use std::path::Path;

use sluice_core::ConfigError;
use sluice_core::config::Config;

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
