//! Reading configuration: one file, or a directory; `include:` globs; `maps:` files.
//!
//! A file whose top level has `domain:` is an envoyproxy/ratelimit domain file, read as it is;
//! any other file is a sluice config file. Everything is validated before anything is returned,
//! so a caller either gets a complete [`Config`] or its errors, each with its file and line: a
//! part of a file that does not parse is left out and the rest still checked (`yaml.rs`), and
//! the descriptor trees report every bad level, so one run shows every mistake it can.
//!
//! Loading is a function of what a [`ConfigReader`] hands it: [`load_config`] reads the file system
//! (through [`FsReader`], the edge), [`parse_config`] a string, [`load_from`] anything else.
//!
//! Which files a path and its `include:` globs stand for is `files.rs`; turning YAML text into
//! the model, `yaml.rs`; the checks of `redis:`, `redis.rs` (all in `config/`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_saphyr::Spanned;

use super::files::{expand_include, top_level_files};
use super::fs::FsReader;
use super::reader::{ConfigReader, MemReader};
use super::redis::validate_redis;
use super::secrets::{self, At};
pub use super::secrets::{ResetToken, TlsMaterial};
use super::yaml::{parse_all_errors, parse_yaml};
use crate::authz::{AuthzPlan, ValueMap};
use crate::check::CheckPlan;
use crate::error::ConfigError;
use crate::hash::{FNV_OFFSET, fnv1a};
use crate::rules::RuleSet;
use crate::schema::{
    ConfigFile, DomainFile, EngineConfig, MapConfig, RedisSettings, ResponseSettings,
};

/// A loaded, validated configuration.
#[derive(Debug)]
pub struct Config {
    /// Compiled descriptor rules of every domain.
    pub rules: RuleSet,
    /// How ext_authz requests become descriptors, if configured.
    pub authz: Option<AuthzPlan>,
    /// Where the HTTP check reads the request its proxy forwards (`check:`); the check port
    /// needs it (the binary refuses `--check-addr` without it).
    pub check: Option<CheckPlan>,
    /// Engine tuning.
    pub engine: EngineConfig,
    /// Response options.
    pub response: ResponseSettings,
    /// The global store, if not the embedded one.
    pub redis: Option<RedisSettings>,
    /// Dry run for every rule (`shadow_mode: true` at the top level).
    pub shadow_mode: bool,
    /// The `ResetQuota` bearer token, when resets are allowed.
    pub reset_token: Option<ResetToken>,
    /// The bearer token the Quota read API needs, if any.
    pub read_token: Option<ResetToken>,
    /// TLS material for the gRPC port, read at load time.
    pub tls: Option<TlsMaterial>,
    /// Every file read, in order (config, includes, map files): what a reload watches.
    pub files: Vec<PathBuf>,
    /// A short hash of every file's path and content, identifying this configuration.
    pub version: String,
    /// Where `redis:` is written, for errors found after loading (the Redis client's own
    /// URL parser runs at the edge: see [`Config::redis_error`]).
    redis_at: (PathBuf, u64),
}

impl Config {
    /// An error about the `redis:` section, located where it is written.
    pub fn redis_error(&self, message: impl Into<String>) -> ConfigError {
        let (file, line) = &self.redis_at;
        ConfigError::at(file, *line, format!("redis: {}", message.into()))
    }
}

/// The name `parse_config` gives its text.
pub const INLINE_CONFIG: &str = "config.yaml";

/// Parses and validates a config given as text (a sluice config file or a domain file, with
/// nothing to include or read besides it; errors name [`INLINE_CONFIG`]).
pub fn parse_config(text: &str) -> Result<Config, ConfigError> {
    load_from(
        &MemReader::new().file(INLINE_CONFIG, text),
        Path::new(INLINE_CONFIG),
    )
}

/// Loads and validates the configuration at `path` (a sluice config file, a domain file, or a
/// directory of either) from the file system.
pub fn load_config(path: &Path) -> Result<Config, ConfigError> {
    load_from(&FsReader, path)
}

/// Loads and validates the configuration at `path` from `source`.
pub fn load_from(source: &dyn ConfigReader, path: &Path) -> Result<Config, ConfigError> {
    let mut reader = Reader::new(source);
    let result = load_parts(&mut reader, source, path);
    // Parts of a file that did not parse were left out and the rest checked: their errors and
    // what the checks found come together, by file (in the order read) and line.
    let mut errors = std::mem::take(&mut reader.errors);
    match result {
        Ok((rules, authz, settings)) if errors.is_empty() => {
            Ok(reader.finish(rules, authz, settings))
        }
        result => {
            errors.extend(result.err().into_iter().flat_map(ConfigError::into_each));
            let order = |e: &ConfigError| {
                let file = reader.files.iter().position(|f| *f == e.file);
                (file.unwrap_or(usize::MAX), e.line)
            };
            errors.sort_by_key(order);
            Err(ConfigError::all(errors).expect("at least one error"))
        }
    }
}

/// The checked parts of a configuration: its rules, its ext_authz plan, its settings.
type Parts = (RuleSet, Option<AuthzPlan>, Settings);

fn load_parts(
    reader: &mut Reader<'_>,
    source: &dyn ConfigReader,
    path: &Path,
) -> Result<Parts, ConfigError> {
    let mut sluice_file: Option<(PathBuf, ConfigFile)> = None;
    let mut domains: Vec<(PathBuf, DomainFile)> = Vec::new();

    for file in top_level_files(source, path)? {
        match reader.read_any(&file)? {
            AnyFile::Domain(d) => domains.push((file, d)),
            AnyFile::Sluice(c) => {
                if let Some((first, _)) = &sluice_file {
                    return Err(ConfigError::at(
                        &file,
                        0,
                        format!(
                            "a second sluice config file in one directory (the first is {})",
                            first.display()
                        ),
                    ));
                }
                sluice_file = Some((file, *c));
            }
        }
    }

    let Some((config_path, mut file)) = sluice_file else {
        let rules = RuleSet::compile(&domains)?;
        let settings = Settings {
            redis_at: (path.to_path_buf(), 0),
            ..Settings::default()
        };
        return Ok((rules, None, settings));
    };

    for (path, domain) in std::mem::take(&mut file.domains)
        .into_iter()
        .map(|d| (config_path.clone(), d))
    {
        domains.push((path, domain));
    }
    let base = config_path.parent().unwrap_or(Path::new("."));
    for pattern in &file.include {
        for included in expand_include(source, &config_path, base, pattern)? {
            match reader.read_any(&included)? {
                AnyFile::Domain(d) => domains.push((included, d)),
                AnyFile::Sluice(_) => {
                    return Err(ConfigError::at(
                        &included,
                        0,
                        "included files must be envoyproxy/ratelimit domain files (with a top-level `domain:`)",
                    ));
                }
            }
        }
    }
    let at = |line: u64| At {
        file: &config_path,
        base,
        line,
    };
    let mut redis_line = 0;
    let redis = match file.redis.take() {
        None => None,
        Some(spanned) => {
            redis_line = spanned.referenced.line();
            let mut redis = spanned.value;
            validate_redis(source, at(redis_line), &redis)?;
            if let Some(ca) = &redis.tls_ca_file {
                redis.tls_ca_pem = Some(secrets::pem(
                    source,
                    at(redis_line),
                    "redis.tls_ca_file",
                    ca,
                )?);
            }
            Some(redis)
        }
    };
    let rules = RuleSet::compile(&domains)?
        .with_limit_overrides(file.limit_overrides)
        .with_quota_mode(file.quota_mode);
    let maps = load_maps(reader, &config_path, base, &file.maps)?;
    let authz = file
        .authz
        .as_ref()
        .map(|a| AuthzPlan::compile(&config_path, a, &maps, &rules))
        .transpose()?;
    let (reset_token, read_token) = match &file.admin {
        Some(admin) => {
            let at = at(admin.referenced.line());
            (
                secrets::reset_token(source, at, &admin.value)?,
                secrets::read_token(source, at, &admin.value)?,
            )
        }
        None => (None, None),
    };
    let tls = file
        .tls
        .as_ref()
        .map(|t| secrets::tls_material(source, at(t.referenced.line()), &t.value))
        .transpose()?;
    let check = file
        .check
        .as_ref()
        .map(|c| CheckPlan::compile(&config_path, c))
        .transpose()?;
    let settings = Settings {
        engine: file.engine,
        check,
        response: file.response,
        redis,
        shadow_mode: file.shadow_mode,
        reset_token,
        read_token,
        tls,
        redis_at: (config_path.clone(), redis_line),
    };
    Ok((rules, authz, settings))
}

/// The settings part of a config, defaulted for a bare domain file or directory.
#[derive(Default)]
struct Settings {
    engine: EngineConfig,
    check: Option<CheckPlan>,
    response: ResponseSettings,
    redis: Option<RedisSettings>,
    shadow_mode: bool,
    reset_token: Option<ResetToken>,
    read_token: Option<ResetToken>,
    tls: Option<TlsMaterial>,
    redis_at: (PathBuf, u64),
}

fn load_maps(
    reader: &mut Reader<'_>,
    config: &Path,
    base: &Path,
    maps: &BTreeMap<String, Spanned<MapConfig>>,
) -> Result<HashMap<String, Arc<ValueMap>>, ConfigError> {
    let mut out = HashMap::new();
    for (name, spec) in maps {
        let line = spec.referenced.line();
        let entries = match (&spec.value.file, &spec.value.entries) {
            (Some(file), None) => {
                let path = base.join(file);
                reader.parse::<BTreeMap<String, String>>(&path)?
            }
            (None, Some(entries)) => entries.clone(),
            _ => {
                return Err(ConfigError::at(
                    config,
                    line,
                    format!("map '{name}' needs exactly one of `file` or `entries`"),
                ));
            }
        };
        let map = ValueMap {
            entries: entries.into_iter().collect(),
            default: spec.value.default.clone(),
        };
        out.insert(name.clone(), Arc::new(map));
    }
    Ok(out)
}

enum AnyFile {
    Domain(DomainFile),
    Sluice(Box<ConfigFile>),
}

/// Reads files, remembering each one's path and content for the config version.
struct Reader<'s> {
    source: &'s dyn ConfigReader,
    files: Vec<PathBuf>,
    /// FNV-1a 64 over every (path, content) read, in order.
    hash: u64,
    /// Errors of files read without the parts that had them (see `config::yaml`).
    errors: Vec<ConfigError>,
}

impl<'s> Reader<'s> {
    fn new(source: &'s dyn ConfigReader) -> Self {
        Self {
            source,
            files: Vec::new(),
            hash: FNV_OFFSET,
            errors: Vec::new(),
        }
    }

    fn read(&mut self, path: &Path) -> Result<String, ConfigError> {
        let text = self
            .source
            .read_text(path)
            .map_err(|e| ConfigError::at(path, 0, e.to_string()))?;
        self.hash = fnv1a(self.hash, path.to_string_lossy().as_bytes());
        self.hash = fnv1a(self.hash, text.as_bytes());
        self.files.push(path.to_path_buf());
        Ok(text)
    }

    fn parse<T: DeserializeOwned>(&mut self, path: &Path) -> Result<T, ConfigError> {
        let text = self.read(path)?;
        parse_yaml(path, &text)
    }

    fn read_any(&mut self, path: &Path) -> Result<AnyFile, ConfigError> {
        /// Which top-level keys a file has (whatever their values, `null` included).
        #[derive(Deserialize)]
        struct Probe {
            #[serde(default, deserialize_with = "present")]
            domain: bool,
            #[serde(default, deserialize_with = "present")]
            descriptors: bool,
        }
        fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
            IgnoredAny::deserialize(d).map(|_| true)
        }
        let text = self.read(path)?;
        if text.trim().is_empty() {
            return Err(ConfigError::at(path, 0, "file is empty"));
        }
        let probe: Probe = parse_yaml(path, &text)?;
        if probe.descriptors && !probe.domain {
            // A domain file without its domain, not a sluice file with a stray field: its own
            // errors first (a misspelled `domain`, say), then the missing domain.
            if let Err(e) = parse_yaml::<DomainFile>(path, &text)
                && !e.message.contains("`domain`")
            {
                return Err(e);
            }
            return Err(ConfigError::at(
                path,
                0,
                "config file cannot have empty domain (a domain file needs a top-level `domain:`)",
            ));
        }
        Ok(if probe.domain {
            AnyFile::Domain(self.recover(parse_all_errors(path, &text))?)
        } else {
            AnyFile::Sluice(Box::new(self.recover(parse_all_errors(path, &text))?))
        })
    }

    /// A document parsed without the parts that had errors: kept, with the errors noted for
    /// the end of loading. Nothing recovered is the errors now.
    fn recover<T>(
        &mut self,
        (doc, errors): (Option<T>, Vec<ConfigError>),
    ) -> Result<T, ConfigError> {
        match doc {
            Some(doc) => {
                self.errors.extend(errors);
                Ok(doc)
            }
            None => Err(ConfigError::all(errors).expect("a document or its errors")),
        }
    }

    fn finish(self, rules: RuleSet, authz: Option<AuthzPlan>, settings: Settings) -> Config {
        Config {
            rules,
            authz,
            check: settings.check,
            engine: settings.engine,
            response: settings.response,
            redis: settings.redis,
            shadow_mode: settings.shadow_mode,
            reset_token: settings.reset_token,
            read_token: settings.read_token,
            tls: settings.tls,
            files: self.files,
            version: format!("{:016x}", self.hash),
            redis_at: settings.redis_at,
        }
    }
}
