//! envoyproxy/ratelimit's environment as a configuration: what `sluice serve` (and the image's
//! `/bin/ratelimit`) does with no `--config`, so a Deployment written for the reference (Envoy
//! Gateway's, say) runs sluice by changing its image.
//!
//! The environment becomes a sluice config file held in memory (`ENV_FILE` in the config
//! directory, which it `include:`s), loaded by the same loader as any file, so every check and
//! every reload is the file path's; limits pushed over xDS (`CONFIG_TYPE=GRPC_XDS_SOTW`) are
//! that file's `domains:` ([`crate::xds`]). Each variable upstream's `src/settings/settings.go`
//! reads is either honoured here or named at start with what sluice does instead ([`notes`]); a
//! value that cannot work (memcache, a unix socket, a client certificate) stops the start with the
//! variable's name, never a silent pass. The reference's variables are read only without
//! `--config`: a file config and the environment are never mixed. docs/migrating.md has the table.

mod clients;
mod notes;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::xds::XdsSettings;
use clients::{redis, xds_settings};

/// The name of the config file the environment stands for, in the config directory: what errors
/// and `/config` name.
pub const ENV_FILE: &str = "(envoyproxy-ratelimit-environment).yaml";

/// Where the limits come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limits {
    /// `CONFIG_TYPE=FILE`: the domain files of `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
    /// RUNTIME_APPDIRECTORY`.
    Files(PathBuf),
    /// `CONFIG_TYPE=GRPC_XDS_SOTW`: pushed by a management server.
    Xds(XdsSettings),
}

/// What the environment says, ready to load.
#[derive(Debug)]
pub struct FromEnv {
    /// Where the limits come from.
    pub limits: Limits,
    /// The settings part of the sluice config file standing for the environment (its limits
    /// are [`with_files`](Self::with_files) or [`with_domains`](Self::with_domains)).
    pub yaml: String,
    /// `GRPC_HOST:GRPC_PORT`.
    pub grpc_addr: SocketAddr,
    /// `HOST:PORT`: sluice's admin port, which also answers `/healthcheck`.
    pub admin_addr: SocketAddr,
    /// `LOG_LEVEL`, as a log filter (`None`: sluice's default).
    pub log_filter: Option<&'static str>,
    /// `LOG_FORMAT=json`.
    pub json_logs: bool,
    /// `(variable, what sluice does instead)` for each variable set that sluice does not act on.
    pub notes: Vec<(&'static str, &'static str)>,
}

impl FromEnv {
    /// The config file with the limits of the files in `dir`.
    pub fn with_files(&self, dir: &Path) -> String {
        format!(
            "{}include: [{}]\n",
            self.yaml,
            quoted(&dir.to_string_lossy())
        )
    }

    /// The config file with pushed limits (`domains:` lines, [`crate::xds::domains_yaml`]).
    pub fn with_domains(&self, domains: &str) -> String {
        format!("{}{domains}", self.yaml)
    }
}

/// Why the environment cannot run sluice: the variable, and the reason.
#[derive(Debug, PartialEq, Eq)]
pub struct EnvError(pub String);

impl std::fmt::Display for EnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "envoyproxy/ratelimit environment: {}", self.0)
    }
}

/// Reads the environment through `var` (a variable set to the empty string counts as unset).
pub fn read(var: &dyn Fn(&str) -> Option<String>) -> Result<FromEnv, EnvError> {
    let get = |name: &str| var(name).filter(|v| !v.is_empty());
    let fail = |name: &str, why: &str| Err(EnvError(format!("{name}: {why}")));

    let xds = match get("CONFIG_TYPE").as_deref() {
        None | Some("FILE") => None,
        Some("GRPC_XDS_SOTW") => Some(xds_settings(&get)?),
        Some(kind) => {
            return fail(
                "CONFIG_TYPE",
                &format!("{kind:?}: FILE or GRPC_XDS_SOTW (upstream's spellings)"),
            );
        }
    };
    if let Some(uds) = get("GRPC_UDS") {
        return fail(
            "GRPC_UDS",
            &format!("{uds:?}: sluice serves gRPC on TCP only (GRPC_HOST, GRPC_PORT)"),
        );
    }
    if get("GRPC_CLIENT_TLS_SAN").is_some() {
        return fail(
            "GRPC_CLIENT_TLS_SAN",
            "sluice cannot require a client certificate's SAN; it accepts any client certificate that chains to GRPC_CLIENT_TLS_CACERT, and would admit more clients than this asks",
        );
    }
    let limits = match xds {
        Some(xds) => Limits::Xds(xds),
        None => Limits::Files(config_dir(&get)),
    };
    let grpc_addr = address(&get, "GRPC_HOST", "GRPC_PORT", 8081)?;
    let admin_addr = address(&get, "HOST", "PORT", 8080)?;

    let mut yaml = String::from("# envoyproxy/ratelimit's environment, as sluice reads it\n");
    let line = |yaml: &mut String, text: String| {
        yaml.push_str(&text);
        yaml.push('\n');
    };
    if let Limits::Files(dir) = &limits {
        glob_safe(dir)?;
    }
    for (name, field) in [("SHADOW_MODE", "shadow_mode"), ("QUOTA_MODE", "quota_mode")] {
        if boolean(&get, name)? {
            line(&mut yaml, format!("{field}: true"));
        }
    }
    let mut notes = Vec::new();
    let mut response = Vec::new();
    if boolean(&get, "RESPONSE_DYNAMIC_METADATA")? {
        response.push("rls_dynamic_metadata: true".to_string());
    }
    let header_names = [
        ("LIMIT_LIMIT_HEADER", "limit"),
        ("LIMIT_REMAINING_HEADER", "remaining"),
        ("LIMIT_RESET_HEADER", "reset"),
    ];
    if boolean(&get, "LIMIT_RESPONSE_HEADERS_ENABLED")? {
        let mut names = Vec::new();
        for (var, field) in header_names {
            if let Some(name) = get(var) {
                sluice_core::config::model::check_header_name(&name)
                    .map_err(|why| EnvError(format!("{var}: {why}")))?;
                names.push(format!("{field}: {}", quoted(&name)));
            }
        }
        response.push(format!("rls_headers: {{{}}}", names.join(", ")));
    } else {
        notes.extend(
            header_names
                .iter()
                .filter(|(var, _)| get(var).is_some())
                .map(|(var, _)| {
                    (
                        *var,
                        "read only with LIMIT_RESPONSE_HEADERS_ENABLED=true, which is not set",
                    )
                }),
        );
    }
    if !response.is_empty() {
        line(&mut yaml, format!("response: {{{}}}", response.join(", ")));
    }
    if boolean(&get, "GRPC_SERVER_USE_TLS")? {
        let (Some(cert), Some(key)) = (get("GRPC_SERVER_TLS_CERT"), get("GRPC_SERVER_TLS_KEY"))
        else {
            return fail(
                "GRPC_SERVER_USE_TLS",
                "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY",
            );
        };
        line(&mut yaml, "tls:".into());
        line(&mut yaml, format!("  cert_file: {}", quoted(&cert)));
        line(&mut yaml, format!("  key_file: {}", quoted(&key)));
        if let Some(ca) = get("GRPC_CLIENT_TLS_CACERT") {
            line(&mut yaml, format!("  client_ca_file: {}", quoted(&ca)));
        }
    }
    match redis(&get)? {
        Some(redis) => yaml.push_str(&redis),
        None if get("REDIS_URL").is_none() && get("BACKEND_TYPE").is_none() => notes.push((
            "REDIS_URL",
            "not set: limits are kept in sluice's embedded store, per instance",
        )),
        None => {}
    }
    let log_filter = match get("LOG_LEVEL") {
        None => None,
        Some(level) => Some(match level.to_ascii_lowercase().as_str() {
            "panic" | "fatal" | "error" => "error",
            "warn" | "warning" => "warn",
            "info" => "info",
            "debug" => "debug",
            "trace" => "trace",
            _ => {
                return fail(
                    "LOG_LEVEL",
                    &format!("{level:?}: one of error, warn, info, debug, trace"),
                );
            }
        }),
    };
    let json_logs = get("LOG_FORMAT").is_some_and(|f| f.eq_ignore_ascii_case("json"));
    let xds_only = match limits {
        Limits::Files(_) => notes::XDS_ONLY,
        Limits::Xds(_) => &[],
    };
    notes.extend(
        notes::NOT_APPLICABLE
            .iter()
            .chain(xds_only)
            .chain(notes::NOT_UPSTREAMS)
            .filter(|(name, _)| get(name).is_some())
            .copied(),
    );
    Ok(FromEnv {
        limits,
        yaml,
        grpc_addr,
        admin_addr,
        log_filter,
        json_logs,
        notes,
    })
}

/// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY` with upstream's defaults
/// (`/srv/runtime_data/current`, none, `config`); an empty part is left out.
fn config_dir(get: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    let mut dir =
        PathBuf::from(get("RUNTIME_ROOT").unwrap_or_else(|| "/srv/runtime_data/current".into()));
    for part in [
        get("RUNTIME_SUBDIRECTORY"),
        Some(get("RUNTIME_APPDIRECTORY").unwrap_or_else(|| "config".into())),
    ]
    .into_iter()
    .flatten()
    {
        dir.push(part);
    }
    dir
}

/// The directory as an `include:` pattern: refused if it has a glob's special characters, which
/// would match other directories than the one named.
fn glob_safe(dir: &Path) -> Result<String, EnvError> {
    let text = dir.to_string_lossy().into_owned();
    if text.contains(['*', '?', '[', ']']) {
        return Err(EnvError(format!(
            "RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY: {text:?} has a glob character (* ? [ ]), which sluice cannot read literally"
        )));
    }
    Ok(text)
}

/// `host:port` from two variables, with upstream's host `0.0.0.0` and `port` by default.
fn address(
    get: &dyn Fn(&str) -> Option<String>,
    host_var: &str,
    port_var: &str,
    port: u16,
) -> Result<SocketAddr, EnvError> {
    let host = get(host_var).unwrap_or_else(|| "0.0.0.0".into());
    let host: IpAddr = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| EnvError(format!("{host_var}: {host:?} is not an IP address")))?;
    let port = match get(port_var) {
        None => port,
        Some(p) => p
            .parse()
            .map_err(|_| EnvError(format!("{port_var}: {p:?} is not a port (0 to 65535)")))?,
    };
    Ok(SocketAddr::new(host, port))
}

/// A boolean as Go's `strconv.ParseBool` reads it (unset: false).
pub(crate) fn boolean(get: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<bool, EnvError> {
    match get(name).as_deref() {
        None => Ok(false),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(true),
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => Ok(false),
        Some(other) => Err(EnvError(format!(
            "{name}: {other:?} is not a boolean (true or false)"
        ))),
    }
}

/// `text` as a YAML double-quoted scalar (JSON's string syntax, which YAML reads the same).
pub(crate) fn quoted(text: &str) -> String {
    yaml_safe(&serde_json::to_string(text).expect("a string serializes"))
}

/// JSON text with the characters JSON leaves as they are but YAML refuses even inside quotes
/// (DEL, the C1 controls, U+FFFE and U+FFFF) written as `\uXXXX` escapes, which both read as
/// the same character: one such character in a pushed value must not make the push unreadable.
pub(crate) fn yaml_safe(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if matches!(c, '\u{7f}'..='\u{9f}' | '\u{fffe}' | '\u{ffff}') {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests;
