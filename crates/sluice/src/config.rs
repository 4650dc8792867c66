//! Loading the configuration as `serve` and `config check` both do: the core's loader, then the
//! checks only the binary's dependencies can make (the Redis client's own URL parser).

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
