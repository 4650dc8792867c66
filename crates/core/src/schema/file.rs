//! [`ConfigFile`]: the top level of sluice's own config file, and its `tls:` and `admin:`
//! sections (what the loader reads secrets and certificates from).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::authz::{AuthzConfig, MapConfig};
use super::check::CheckConfig;
use super::domain::DomainFile;
use super::modes::LimitOverrides;
use super::settings::{EngineConfig, RedisSettings, ResponseSettings};

/// sluice's own config file (the file given to `sluice serve --config`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Domains written inline, in envoyproxy/ratelimit's format.
    #[serde(default)]
    pub domains: Vec<DomainFile>,
    /// Paths or globs (relative to this file) of envoyproxy/ratelimit domain files.
    #[serde(default)]
    pub include: Vec<Spanned<String>>,
    /// How ext_authz requests become descriptors; without it, `Check` allows every request.
    pub authz: Option<AuthzConfig>,
    /// The proxy in front of the HTTP check (`--check-addr`), which needs it: which headers
    /// carry the request it asks about.
    pub check: Option<Spanned<CheckConfig>>,
    /// Named value maps for `authz` entries (e.g. API key → tier).
    #[serde(default)]
    pub maps: BTreeMap<String, Spanned<MapConfig>>,
    /// Engine tuning: key bounds and lease sizing (every field checks itself where written).
    #[serde(default)]
    pub engine: EngineConfig,
    /// What responses carry besides the decision.
    #[serde(default)]
    pub response: ResponseSettings,
    /// The global store; without it sluice runs on its embedded in-memory store.
    pub redis: Option<Spanned<RedisSettings>>,
    /// Dry run for every rule: decide and count, but always answer OK.
    #[serde(default)]
    pub shadow_mode: bool,
    /// Every rule is a quota (`quota_mode` on every descriptor): a request is OVER_LIMIT only
    /// if all its limits deny it (envoyproxy/ratelimit's `QUOTA_MODE`).
    #[serde(default)]
    pub quota_mode: bool,
    /// Which of Envoy's per-descriptor `limit` overrides apply.
    #[serde(default)]
    pub limit_overrides: LimitOverrides,
    /// Operator API settings.
    pub admin: Option<Spanned<AdminConfig>>,
    /// TLS on the gRPC port (mutual TLS with `client_ca_file`).
    pub tls: Option<Spanned<TlsConfig>>,
}

/// `tls:`: certificates for the gRPC port (paths relative to the config file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The server certificate chain (PEM).
    pub cert_file: String,
    /// The server's private key (PEM).
    pub key_file: String,
    /// CA certificates (PEM) that client certificates must chain to; set for mutual TLS.
    pub client_ca_file: Option<String>,
}

/// `admin:`: what the operator API may do.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Allow `ResetQuota` (with the bearer token).
    #[serde(default)]
    pub allow_reset: bool,
    /// An environment variable holding the reset token.
    pub reset_token_env: Option<String>,
    /// A file holding the reset token (e.g. a mounted Kubernetes Secret).
    pub reset_token_file: Option<String>,
    /// An environment variable holding the read token: when set (or `read_token_file`), the
    /// Quota read API (`GetQuota`, `ListQuotas`, `WatchQuota`, `ListRules`) and admin `/config`
    /// and `/quota` need `authorization: Bearer <read token>` (the reset token works too).
    pub read_token_env: Option<String>,
    /// A file holding the read token.
    pub read_token_file: Option<String>,
}
