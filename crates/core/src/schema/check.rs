//! `check:`: the proxy in front of the HTTP check port (`--check-addr`), and the one header each
//! part of the request it asks about is read from.

use serde::Deserialize;
use serde_saphyr::Spanned;

/// `check:`: who asks sluice's HTTP check, so which headers carry the request being decided.
/// A proxy passes a client's own headers on to the check (nginx, Caddy and Traefik all do), so
/// sluice must read each part from the one header the proxy overwrites, and no other.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckConfig {
    /// The proxy: its preset names the header of each part, and the status of a denial.
    pub proxy: Option<Spanned<CheckProxy>>,
    /// Headers naming each part, over the preset's (each: the one header read for it).
    #[serde(default)]
    pub headers: CheckHeadersConfig,
    /// The status a denial is answered with: 429, or 401 / 403 for a proxy that turns any other
    /// into an error (nginx's `auth_request`; the preset's default there).
    pub deny_status: Option<Spanned<u64>>,
}

/// The proxies with a preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckProxy {
    /// nginx `auth_request`, with the headers of sluice's recipe.
    Nginx,
    /// Caddy `forward_auth` (or the `reverse_proxy` it stands for).
    Caddy,
    /// Traefik's `ForwardAuth` middleware.
    Traefik,
    /// Envoy's ext_authz filter with an `http_service`: the check request is the request.
    Envoy,
}

impl CheckProxy {
    /// The name it is written with.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckProxy::Nginx => "nginx",
            CheckProxy::Caddy => "caddy",
            CheckProxy::Traefik => "traefik",
            CheckProxy::Envoy => "envoy",
        }
    }
}

/// `check.headers`: the header each part of the forwarded request is read from.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckHeadersConfig {
    /// The method (`method` source).
    pub method: Option<Spanned<String>>,
    /// The request target: path and query (`path` source, the `api_key` query parameter).
    pub uri: Option<Spanned<String>>,
    /// The host (`host` source).
    pub host: Option<Spanned<String>>,
}
