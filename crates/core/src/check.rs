//! The compiled `check:` section: where the HTTP check reads each part of the request a proxy
//! asks about, and how it answers a denial.
//!
//! A proxy's forward-auth request carries the original request in headers, next to every header
//! the client sent, which the proxy passes on too (nginx, Caddy and Traefik all do). A client
//! can therefore send `X-Forwarded-Uri` or `X-Original-URI` itself: sluice must read each part
//! from the one header its proxy overwrites, never the first of several it finds. So each part
//! is read from exactly one place ([`Part`]), named by a preset per proxy ([`CheckProxy`]) or
//! by the operator, and a request carrying that header twice is refused rather than guessed at.

use std::path::Path;

use serde_saphyr::Spanned;

use crate::error::ConfigError;
pub use crate::schema::CheckProxy;
use crate::schema::{CheckConfig, CheckHeadersConfig};

/// Where one part of the forwarded request is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// This header (lower-case), which must come exactly once.
    Header(String),
    /// The check request itself (its method, path or `Host`): Envoy's `http_service` sends the
    /// request being decided as the check request.
    Request,
}

/// The compiled `check:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckPlan {
    /// The proxy named, if any (shown in logs and errors).
    pub proxy: Option<CheckProxy>,
    /// Where the method comes from.
    pub method: Part,
    /// Where the request target (path and query) comes from.
    pub uri: Part,
    /// Where the host comes from.
    pub host: Part,
    /// The status of a denial: 429, or 401 / 403 for a proxy that passes on no other (nginx).
    pub deny_status: u16,
}

impl CheckPlan {
    /// The preset for `proxy`: the headers its shipped recipe sets (docs/forward-auth.md).
    pub fn preset(proxy: CheckProxy) -> Self {
        let header = |name: &str| Part::Header(name.to_string());
        let forwarded = |uri: &str, deny_status| Self {
            proxy: Some(proxy),
            method: header("x-forwarded-method"),
            uri: header(uri),
            host: header("x-forwarded-host"),
            deny_status,
        };
        match proxy {
            // `auth_request` turns any status but 2xx, 401 and 403 into a 500: the recipe
            // turns sluice's 403 back into a 429 (`error_page 403`).
            CheckProxy::Nginx => forwarded("x-original-uri", 403),
            CheckProxy::Caddy | CheckProxy::Traefik => forwarded("x-forwarded-uri", 429),
            CheckProxy::Envoy => Self {
                proxy: Some(proxy),
                method: Part::Request,
                uri: Part::Request,
                host: Part::Request,
                deny_status: 429,
            },
        }
    }

    /// Validates `check:` (written in `file`): a proxy, or a header for every part; header
    /// names that are HTTP tokens; a deny status of 401, 403 or 429.
    pub fn compile(file: &Path, config: &Spanned<CheckConfig>) -> Result<Self, ConfigError> {
        let line = config.referenced.line();
        let config = &config.value;
        let CheckHeadersConfig { method, uri, host } = &config.headers;
        let mut plan = match &config.proxy {
            Some(proxy) => Self::preset(proxy.value),
            None if method.is_some() && uri.is_some() && host.is_some() => Self {
                proxy: None,
                method: Part::Request,
                uri: Part::Request,
                host: Part::Request,
                deny_status: 429,
            },
            None => {
                return Err(ConfigError::at(
                    file,
                    line,
                    "check: name the proxy in front (`proxy: nginx`, `caddy`, `traefik` or `envoy`), or the one header each of `headers.method`, `headers.uri` and `headers.host` is read from",
                ));
            }
        };
        for (field, name, part) in [
            ("method", method, &mut plan.method),
            ("uri", uri, &mut plan.uri),
            ("host", host, &mut plan.host),
        ] {
            if let Some(name) = name {
                *part = Part::Header(header_name(file, field, name)?);
            }
        }
        if let Some(status) = &config.deny_status {
            plan.deny_status = match status.value {
                401 => 401,
                403 => 403,
                429 => 429,
                other => {
                    return Err(ConfigError::at(
                        file,
                        status.referenced.line(),
                        format!("check.deny_status: {other} is not 401, 403 or 429"),
                    ));
                }
            };
        }
        Ok(plan)
    }
}

/// `name`, lower-cased, if it is an HTTP header name (a token: RFC 9110 §5.1).
fn header_name(file: &Path, field: &str, name: &Spanned<String>) -> Result<String, ConfigError> {
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.value.is_empty() || !name.value.chars().all(tchar) {
        return Err(ConfigError::at(
            file,
            name.referenced.line(),
            format!(
                "check.headers.{field}: {:?} is not a header name",
                name.value
            ),
        ));
    }
    Ok(name.value.to_ascii_lowercase())
}
