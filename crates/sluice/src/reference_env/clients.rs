//! The two clients the environment configures: of Redis (`REDIS_*`, `BACKEND_TYPE`,
//! `CACHE_KEY_PREFIX`) and of the xDS management server (`CONFIG_GRPC_XDS_*`, `XDS_CLIENT_*`).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use super::{EnvError, boolean, quoted};
use crate::xds::{XdsSettings, XdsTls};

/// `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*`, with upstream's defaults.
pub(super) fn xds_settings(get: &dyn Fn(&str) -> Option<String>) -> Result<XdsSettings, EnvError> {
    let fail = |name: &str, why: &str| Err(EnvError(format!("{name}: {why}")));
    if get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS").is_some() {
        return fail(
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "sluice does not send extra headers to the management server yet; one that needs them would refuse it",
        );
    }
    let duration = |name: &str, default: Duration| -> Result<Duration, EnvError> {
        match get(name) {
            None => Ok(default),
            Some(text) => humantime::parse_duration(&text)
                .map_err(|_| EnvError(format!("{name}: {text:?} is not a duration (10s, 500ms)"))),
        }
    };
    let backoff = (
        duration(
            "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
            Duration::from_secs(10),
        )?,
        duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", Duration::from_secs(60))?,
    );
    let max_message = match get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") {
        None => 4 << 20,
        Some(n) => n.parse().map_err(|_| {
            EnvError(format!(
                "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: {n:?} is not a size in bytes"
            ))
        })?,
    };
    let tls = if boolean(get, "CONFIG_GRPC_XDS_SERVER_USE_TLS")? {
        let Some(ca) = get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT") else {
            return fail(
                "CONFIG_GRPC_XDS_SERVER_USE_TLS",
                "needs CONFIG_GRPC_XDS_SERVER_TLS_CACERT: sluice verifies the management server against that CA",
            );
        };
        let identity = match (
            get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
            get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
        ) {
            (Some(cert), Some(key)) => Some((PathBuf::from(cert), PathBuf::from(key))),
            (None, None) => None,
            _ => {
                return fail(
                    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                    "give both CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY, or neither",
                );
            }
        };
        Some(XdsTls {
            ca: Some(PathBuf::from(ca)),
            identity,
            server_name: get("CONFIG_GRPC_XDS_SERVER_TLS_SAN"),
        })
    } else {
        None
    };
    Ok(XdsSettings {
        server: get("CONFIG_GRPC_XDS_SERVER_URL").unwrap_or_else(|| "localhost:18000".into()),
        node_id: get("CONFIG_GRPC_XDS_NODE_ID").unwrap_or_else(|| "default".into()),
        tls,
        backoff,
        max_message,
        force_start: boolean(get, "FORCE_START_WITHOUT_INITIAL_CONFIG")?,
    })
}

/// The `redis:` section, or `None` for the embedded store (no `REDIS_URL`).
pub(super) fn redis(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<String>, EnvError> {
    let fail = |name: &str, why: &str| Err(EnvError(format!("{name}: {why}")));
    match get("BACKEND_TYPE").as_deref() {
        None | Some("redis") => {}
        Some(other) => {
            return fail(
                "BACKEND_TYPE",
                &format!("{other:?}: sluice keeps global limits in Redis (redis) only"),
            );
        }
    }
    let Some(url) = get("REDIS_URL") else {
        return Ok(None);
    };
    for name in ["REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY"] {
        if get(name).is_some() {
            return fail(
                name,
                "sluice sends no client certificate to Redis; a Redis that requires one refuses it",
            );
        }
    }
    if boolean(get, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")? {
        return fail(
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
            "sluice always verifies Redis's hostname; give REDIS_URL the name its certificate carries",
        );
    }
    let kind = get("REDIS_TYPE").unwrap_or_else(|| "SINGLE".into());
    let tls = boolean(get, "REDIS_TLS")?;
    let auth = get("REDIS_AUTH");
    let mut yaml = String::from("redis:\n");
    match kind.to_ascii_uppercase().as_str() {
        "SINGLE" => {
            let socket = get("REDIS_SOCKET_TYPE").unwrap_or_else(|| "unix".into());
            // A URL (upstream's client parses a redis:// one whole, whatever the socket type).
            let is_url = url.contains("://");
            if socket != "tcp" && !is_url {
                return fail(
                    "REDIS_SOCKET_TYPE",
                    &format!(
                        "{socket:?}: sluice connects to Redis over TCP only; set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port"
                    ),
                );
            }
            let url = redis_url(&url, tls, auth.as_deref())?;
            writeln!(yaml, "  url: {}", quoted(&url)).expect("a String");
        }
        "CLUSTER" => {
            let nodes = url
                .split(',')
                .map(|node| redis_url(node.trim(), tls, auth.as_deref()))
                .collect::<Result<Vec<_>, _>>()?;
            let nodes: Vec<String> = nodes.iter().map(|n| quoted(n)).collect();
            writeln!(yaml, "  cluster_nodes: [{}]", nodes.join(", ")).expect("a String");
        }
        "SENTINEL" => {
            // `mastername,host:port[,host:port…]`: the master's name, then the sentinels
            // (upstream's REDIS_SOCKET_TYPE does not apply: always TCP). REDIS_AUTH is the
            // master's, REDIS_SENTINEL_AUTH the sentinels'; REDIS_TLS is for both.
            let mut parts = url.split(',').map(str::trim);
            let master = parts.next().unwrap_or_default();
            let sentinel_auth = get("REDIS_SENTINEL_AUTH");
            let nodes = parts
                .map(|node| redis_url(node, tls, sentinel_auth.as_deref()))
                .collect::<Result<Vec<_>, _>>()?;
            let name_char = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
            if master.is_empty() || !master.chars().all(name_char) || nodes.is_empty() {
                return fail(
                    "REDIS_URL",
                    "with REDIS_TYPE=SENTINEL, the master's name (letters, digits, `.`, `_`, `-`) then the sentinels: mymaster,host:26379[,host:26379…]",
                );
            }
            let master = redis_url(master, tls, auth.as_deref())?;
            let nodes: Vec<String> = nodes.iter().map(|n| quoted(n)).collect();
            writeln!(yaml, "  sentinel:\n    master: {}", quoted(&master)).expect("a String");
            writeln!(yaml, "    nodes: [{}]", nodes.join(", ")).expect("a String");
        }
        other => {
            return fail(
                "REDIS_TYPE",
                &format!("{other:?}: one of SINGLE, CLUSTER, SENTINEL"),
            );
        }
    }
    if let Some(ca) = get("REDIS_TLS_CACERT") {
        writeln!(yaml, "  tls_ca_file: {}", quoted(&ca)).expect("a String");
    }
    if let Some(timeout) = get("REDIS_TIMEOUT") {
        let d = humantime::parse_duration(&timeout).map_err(|_| {
            EnvError(format!(
                "REDIS_TIMEOUT: {timeout:?} is not a duration (10s, 500ms)"
            ))
        })?;
        // Upstream's is a dial timeout only.
        writeln!(yaml, "  connect_timeout: {}ms", d.as_millis().max(1)).expect("a String");
    }
    if let Some(prefix) = get("CACHE_KEY_PREFIX") {
        sluice_core::config::check_key_prefix(&prefix)
            .map_err(|why| EnvError(format!("CACHE_KEY_PREFIX: {why}")))?;
        writeln!(yaml, "  key_prefix: {}", quoted(&prefix)).expect("a String");
    }
    Ok(Some(yaml))
}

/// One Redis address as a URL: `host:port` or a `redis://` URL as upstream takes them, with
/// `rediss://` for `REDIS_TLS` and `REDIS_AUTH` (`password` or `user:password`, split at the
/// first `:`) in place of any credentials the URL has, as upstream lets it win.
fn redis_url(address: &str, tls: bool, auth: Option<&str>) -> Result<String, EnvError> {
    let (scheme, rest) = match address.split_once("://") {
        Some(("redis", rest)) => (if tls { "rediss" } else { "redis" }, rest),
        Some(("rediss", rest)) => ("rediss", rest),
        Some((other, _)) => {
            return Err(EnvError(format!(
                "REDIS_URL: a {other}:// address; give host:port or a redis:// URL"
            )));
        }
        None => (if tls { "rediss" } else { "redis" }, address),
    };
    if rest.is_empty() {
        return Err(EnvError("REDIS_URL: an empty address".into()));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((userinfo, host)) => (Some(userinfo.to_string()), host),
        None => (None, authority),
    };
    let userinfo = match auth {
        None => userinfo,
        Some(auth) => Some(match auth.split_once(':') {
            Some((user, password)) => format!("{}:{}", encoded(user), encoded(password)),
            None => format!(":{}", encoded(auth)),
        }),
    };
    Ok(match userinfo {
        Some(u) => format!("{scheme}://{u}@{host}{path}"),
        None => format!("{scheme}://{host}{path}"),
    })
}

/// `text` percent-encoded for a URL's user information (RFC 3986 unreserved bytes as they are).
fn encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            write!(out, "%{b:02X}").expect("a String");
        }
    }
    out
}
