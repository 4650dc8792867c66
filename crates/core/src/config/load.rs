//! Reading configuration: one file, or a directory; `include:` globs; `maps:` files.
//!
//! A file whose top level has `domain:` is an envoyproxy/ratelimit domain file, read as it is;
//! any other file is a sluice config file. Everything is validated before anything is returned,
//! so a caller either gets a complete [`Config`] or the first error with its file and line.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_saphyr::Spanned;

use super::model::{ConfigFile, DomainFile, MapConfig};
use super::{ConfigError, EngineSettings, RedisSettings, ResponseSettings};
use crate::authz::{AuthzPlan, ValueMap};
use crate::hash::{FNV_OFFSET, fnv1a};
use crate::rules::RuleSet;

/// A loaded, validated configuration.
#[derive(Debug)]
pub struct Config {
    /// Compiled descriptor rules of every domain.
    pub rules: RuleSet,
    /// How ext_authz requests become descriptors, if configured.
    pub authz: Option<AuthzPlan>,
    /// Engine tuning.
    pub engine: EngineSettings,
    /// Response options.
    pub response: ResponseSettings,
    /// The global store, if not the embedded one.
    pub redis: Option<RedisSettings>,
    /// Dry run for every rule (`shadow_mode: true` at the top level).
    pub shadow_mode: bool,
    /// The `ResetQuota` bearer token, when resets are allowed.
    pub reset_token: Option<ResetToken>,
    /// TLS material for the gRPC port, read at load time.
    pub tls: Option<TlsMaterial>,
    /// Every file read, in order (config, includes, map files): what a reload watches.
    pub files: Vec<PathBuf>,
    /// A short hash of every file's path and content, identifying this configuration.
    pub version: String,
}

/// Loads and validates the configuration at `path` (a sluice config file, a domain file, or a
/// directory of either).
pub fn load_config(path: &Path) -> Result<Config, ConfigError> {
    let mut reader = Reader::new();
    let mut sluice_file: Option<(PathBuf, ConfigFile)> = None;
    let mut domains: Vec<(PathBuf, DomainFile)> = Vec::new();

    for file in top_level_files(path)? {
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
        return Ok(reader.finish(rules, None, Settings::default()));
    };

    for (path, domain) in std::mem::take(&mut file.domains)
        .into_iter()
        .map(|d| (config_path.clone(), d))
    {
        domains.push((path, domain));
    }
    let base = config_path.parent().unwrap_or(Path::new("."));
    for pattern in &file.include {
        for included in expand_include(&config_path, base, pattern)? {
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
    validate_engine(&config_path, &file.engine)?;
    if let Some(redis) = &mut file.redis {
        validate_redis(&config_path, redis)?;
        if let Some(ca) = &redis.tls_ca_file {
            let pem = std::fs::read(base.join(ca)).map_err(|e| {
                ConfigError::at(&config_path, 0, format!("redis.tls_ca_file {ca}: {e}"))
            })?;
            redis.tls_ca_pem = Some(pem);
        }
    }
    let rules = RuleSet::compile(&domains)?;
    let maps = load_maps(&mut reader, &config_path, base, &file.maps)?;
    let authz = file
        .authz
        .as_ref()
        .map(|a| AuthzPlan::compile(&config_path, a, &maps, &rules))
        .transpose()?;
    let reset_token = reset_token(&config_path, base, &file.admin)?;
    let tls = file
        .tls
        .as_ref()
        .map(|t| tls_material(&config_path, base, t))
        .transpose()?;
    let settings = Settings {
        engine: file.engine,
        response: file.response,
        redis: file.redis,
        shadow_mode: file.shadow_mode,
        reset_token,
        tls,
    };
    Ok(reader.finish(rules, authz, settings))
}

/// The files a path stands for: itself, or the `*.yaml`/`*.yml` files of a directory, sorted.
fn top_level_files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let meta = std::fs::metadata(path).map_err(|e| ConfigError::at(path, 0, e.to_string()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path).map_err(|e| ConfigError::at(path, 0, e.to_string()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| is_yaml(p) && p.is_file())
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

fn expand_include(
    config: &Path,
    base: &Path,
    pattern: &Spanned<String>,
) -> Result<Vec<PathBuf>, ConfigError> {
    let line = pattern.referenced.line();
    let full = base.join(&pattern.value);
    let full = full.to_string_lossy();
    let paths = glob::glob(&full)
        .map_err(|e| ConfigError::at(config, line, format!("include '{}': {e}", pattern.value)))?;
    let mut found = Vec::new();
    for p in paths {
        let p = p.map_err(|e| {
            ConfigError::at(config, line, format!("include '{}': {e}", pattern.value))
        })?;
        if p.is_dir() {
            found.extend(top_level_files(&p)?);
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

fn validate_engine(config: &Path, engine: &EngineSettings) -> Result<(), ConfigError> {
    let bad = |m: &str| Err(ConfigError::at(config, 0, format!("engine: {m}")));
    if engine.max_keys == 0 {
        return bad("max_keys must be at least 1");
    }
    if !(engine.max_lease_fraction > 0.0 && engine.max_lease_fraction <= 1.0) {
        return bad("max_lease_fraction must be in (0, 1]");
    }
    if engine.lease_horizon.0.is_zero()
        || engine.lease_ttl.0.is_zero()
        || engine.idle_timeout.0.is_zero()
    {
        return bad("lease_horizon, lease_ttl and idle_timeout must be above zero");
    }
    Ok(())
}

/// Checks `redis:`: exactly one of `url` and `cluster_nodes`, with Redis URL schemes.
fn validate_redis(config: &Path, redis: &RedisSettings) -> Result<(), ConfigError> {
    let bad = |m: String| Err(ConfigError::at(config, 0, format!("redis: {m}")));
    let urls: Vec<&String> = redis.url.iter().chain(&redis.cluster_nodes).collect();
    match (&redis.url, redis.cluster_nodes.is_empty()) {
        (Some(_), false) => return bad("give either `url` or `cluster_nodes`, not both".into()),
        (None, true) => {
            return bad("needs `url` (standalone) or `cluster_nodes` (Redis Cluster)".into());
        }
        _ => {}
    }
    for u in urls {
        if !(u.starts_with("redis://") || u.starts_with("rediss://")) {
            // Never echo the URL: it may hold a password.
            return bad("every address must start with redis:// or rediss://".into());
        }
    }
    if redis.timeout.0.is_zero() || redis.connect_timeout.0.is_zero() {
        return bad("timeout and connect_timeout must be above zero".into());
    }
    if redis.breaker_failures == 0 {
        return bad("breaker_failures must be at least 1".into());
    }
    if let Some(var) = &redis.password_env
        && std::env::var_os(var).is_none()
    {
        return bad(format!("password_env names {var}, which is not set"));
    }
    Ok(())
}

/// PEM contents for the gRPC port's TLS; the key is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsMaterial {
    /// Server certificate chain.
    pub cert_pem: Vec<u8>,
    /// Server private key.
    pub key_pem: Vec<u8>,
    /// CA bundle for client certificates (mutual TLS).
    pub client_ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("mutual", &self.client_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

/// Reads the `tls:` files; each must exist and look like PEM.
fn tls_material(
    config: &Path,
    base: &Path,
    tls: &super::model::TlsConfig,
) -> Result<TlsMaterial, ConfigError> {
    let read = |name: &str, file: &str| -> Result<Vec<u8>, ConfigError> {
        let bytes = std::fs::read(base.join(file))
            .map_err(|e| ConfigError::at(config, 0, format!("tls.{name} {file}: {e}")))?;
        if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
            return Err(ConfigError::at(
                config,
                0,
                format!("tls.{name} {file}: not a PEM file"),
            ));
        }
        Ok(bytes)
    };
    Ok(TlsMaterial {
        cert_pem: read("cert_file", &tls.cert_file)?,
        key_pem: read("key_file", &tls.key_file)?,
        client_ca_pem: tls
            .client_ca_file
            .as_deref()
            .map(|f| read("client_ca_file", f))
            .transpose()?,
    })
}

/// A secret bearer token; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ResetToken(String);

impl ResetToken {
    /// Compares in time independent of where the first difference is.
    pub fn matches(&self, presented: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), presented.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl std::fmt::Debug for ResetToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResetToken(<redacted>)")
    }
}

/// The reset token when `admin.allow_reset` is on: from exactly one of an environment variable or a
/// file, non-empty.
fn reset_token(
    config: &Path,
    base: &Path,
    admin: &super::model::AdminConfig,
) -> Result<Option<ResetToken>, ConfigError> {
    let bad = |m: String| Err(ConfigError::at(config, 0, format!("admin: {m}")));
    if !admin.allow_reset {
        return Ok(None);
    }
    let token = match (&admin.reset_token_env, &admin.reset_token_file) {
        (Some(var), None) => match std::env::var(var) {
            Ok(t) => t,
            Err(_) => return bad(format!("reset_token_env names {var}, which is not set")),
        },
        (None, Some(file)) => match std::fs::read_to_string(base.join(file)) {
            Ok(t) => t,
            Err(e) => return bad(format!("reset_token_file {file}: {e}")),
        },
        _ => {
            return bad(
                "allow_reset needs exactly one of reset_token_env or reset_token_file".into(),
            );
        }
    };
    let token = token.trim();
    if token.len() < 16 {
        return bad("the reset token must be at least 16 characters".into());
    }
    Ok(Some(ResetToken(token.to_string())))
}

/// The settings part of a config, defaulted for a bare domain file or directory.
#[derive(Default)]
struct Settings {
    engine: EngineSettings,
    response: ResponseSettings,
    redis: Option<RedisSettings>,
    shadow_mode: bool,
    reset_token: Option<ResetToken>,
    tls: Option<TlsMaterial>,
}

fn load_maps(
    reader: &mut Reader,
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
struct Reader {
    files: Vec<PathBuf>,
    /// FNV-1a 64 over every (path, content) read, in order.
    hash: u64,
}

impl Reader {
    fn new() -> Self {
        Self {
            files: Vec::new(),
            hash: FNV_OFFSET,
        }
    }

    fn read(&mut self, path: &Path) -> Result<String, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| ConfigError::at(path, 0, e.to_string()))?;
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
        #[derive(Deserialize)]
        struct Probe {
            domain: Option<IgnoredAny>,
        }
        let text = self.read(path)?;
        if text.trim().is_empty() {
            return Err(ConfigError::at(path, 0, "file is empty"));
        }
        let probe: Probe = parse_yaml(path, &text)?;
        Ok(if probe.domain.is_some() {
            AnyFile::Domain(parse_yaml(path, &text)?)
        } else {
            AnyFile::Sluice(Box::new(parse_yaml(path, &text)?))
        })
    }

    fn finish(self, rules: RuleSet, authz: Option<AuthzPlan>, settings: Settings) -> Config {
        Config {
            rules,
            authz,
            engine: settings.engine,
            response: settings.response,
            redis: settings.redis,
            shadow_mode: settings.shadow_mode,
            reset_token: settings.reset_token,
            tls: settings.tls,
            files: self.files,
            version: format!("{:016x}", self.hash),
        }
    }
}

/// Parses YAML into `T`, turning the parser's error into `file:line: message`.
pub(crate) fn parse_yaml<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    let docs: Vec<T> = serde_saphyr::from_multiple(text).map_err(|e| {
        let line = e.location().map(|l| l.line()).unwrap_or(0);
        let rendered = e.without_snippet().to_string();
        let message = rendered
            .lines()
            .next()
            .unwrap_or("invalid YAML")
            .trim()
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
