//! `authz:` and `maps:`: how an ext_authz request's parts become descriptor entries, and the
//! named value maps those entries may translate through.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_saphyr::Spanned;

/// `authz:`: how ext_authz `Check` requests become descriptors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthzConfig {
    /// The domain the built descriptors are checked in.
    pub domain: Spanned<String>,
    /// How many proxies in front of Envoy append to X-Forwarded-For (0: use the peer address).
    #[serde(default)]
    pub trusted_hops: u32,
    /// Descriptors to build, each a list of entries.
    pub descriptors: Vec<Vec<AuthzEntryConfig>>,
}

/// One entry of an authz descriptor: a key and where its value comes from.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthzEntryConfig {
    /// The descriptor key.
    pub key: Spanned<String>,
    /// Where the value comes from.
    pub from: Source,
    /// Translate the value through this named map.
    pub map: Option<Spanned<String>>,
    /// Keep the value only as a digest (`sha256:<32 hex digits>`) in bucket keys, the Quota API
    /// and Redis, so that secrets never show there. Default: on for an `api_key` without a
    /// `map` (the key itself would be the value), off otherwise.
    pub hash: Option<bool>,
}

/// Where an authz entry's value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Source {
    /// The client address: X-Forwarded-For (honouring `trusted_hops`), else the peer address.
    ClientIp,
    /// The request path, without the query string.
    Path,
    /// The HTTP method.
    Method,
    /// The Host / :authority.
    Host,
    /// A request header (case-insensitive name).
    Header(String),
    /// A context extension set on the route by Envoy's ext_authz per-route config.
    ContextExtension(String),
    /// An API key: `x-api-key` header, `Authorization: Bearer`, or the `api_key` query parameter.
    ApiKey(ApiKeySource),
    /// A literal value.
    Value(String),
}

/// Where to look for an API key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeySource {
    /// The header carrying the key.
    #[serde(default = "default_api_key_header")]
    pub header: String,
    /// The query parameter carrying the key.
    #[serde(default = "default_api_key_query")]
    pub query_param: String,
}

fn default_api_key_header() -> String {
    "x-api-key".to_string()
}

fn default_api_key_query() -> String {
    "api_key".to_string()
}

/// A named map: inline `entries` or a YAML `file` of `key: value` lines.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapConfig {
    /// A YAML file (relative to the config file) holding one mapping of strings.
    pub file: Option<String>,
    /// Inline entries.
    pub entries: Option<BTreeMap<String, String>>,
    /// The value for keys the map lacks; without it such a descriptor is skipped.
    pub default: Option<String>,
}
