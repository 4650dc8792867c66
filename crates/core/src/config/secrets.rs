//! Secrets and certificates a config names: read through the [`ConfigReader`] at load time, never
//! printed.

use std::path::{Path, PathBuf};

use super::reader::ConfigReader;
use crate::error::ConfigError;
use crate::schema::{AdminConfig, TlsConfig};

/// PEM contents for the gRPC port's TLS; the key is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsMaterial {
    /// Server certificate chain.
    pub cert_pem: Vec<u8>,
    /// Server private key.
    pub key_pem: Vec<u8>,
    /// CA bundle for client certificates (mutual TLS).
    pub client_ca_pem: Option<Vec<u8>>,
    /// Where they were read from, to read them again as they rotate.
    pub files: TlsFiles,
}

/// Where the `tls:` files are (against the config file's directory).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TlsFiles {
    /// `tls.cert_file`.
    pub cert: PathBuf,
    /// `tls.key_file`.
    pub key: PathBuf,
    /// `tls.client_ca_file`.
    pub client_ca: Option<PathBuf>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("mutual", &self.client_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

/// Where a section is written, for its errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At<'a> {
    pub(crate) file: &'a Path,
    pub(crate) base: &'a Path,
    pub(crate) line: u64,
}

impl At<'_> {
    pub(crate) fn error(&self, message: String) -> ConfigError {
        ConfigError::at(self.file, self.line, message)
    }
}

/// Whether `bytes` look like PEM (a `-----BEGIN ` line somewhere).
pub fn looks_like_pem(bytes: &[u8]) -> bool {
    bytes.windows(11).any(|w| w == b"-----BEGIN ")
}

/// Reads a PEM file named by `field`; it must exist and look like PEM.
pub(crate) fn pem(
    source: &dyn ConfigReader,
    at: At<'_>,
    field: &str,
    file: &str,
) -> Result<Vec<u8>, ConfigError> {
    let bytes = source
        .read(&at.base.join(file))
        .map_err(|e| at.error(format!("{field} {file}: {e}")))?;
    if !looks_like_pem(&bytes) {
        return Err(at.error(format!("{field} {file}: not a PEM file")));
    }
    Ok(bytes)
}

/// Reads the `tls:` files.
pub(crate) fn tls_material(
    source: &dyn ConfigReader,
    at: At<'_>,
    tls: &TlsConfig,
) -> Result<TlsMaterial, ConfigError> {
    Ok(TlsMaterial {
        cert_pem: pem(source, at, "tls.cert_file", &tls.cert_file)?,
        key_pem: pem(source, at, "tls.key_file", &tls.key_file)?,
        client_ca_pem: tls
            .client_ca_file
            .as_deref()
            .map(|f| pem(source, at, "tls.client_ca_file", f))
            .transpose()?,
        files: TlsFiles {
            cert: at.base.join(&tls.cert_file),
            key: at.base.join(&tls.key_file),
            client_ca: tls.client_ca_file.as_deref().map(|f| at.base.join(f)),
        },
    })
}

/// A secret bearer token; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ResetToken(String);

impl ResetToken {
    /// Compares in time that depends only on the length of what was presented: neither where
    /// the first difference is nor the token's own length shows in the timing (the old compare
    /// returned at once on a length mismatch, which told a caller the token's length).
    pub fn matches(&self, presented: &str) -> bool {
        let (token, given) = (self.0.as_bytes(), presented.as_bytes());
        // Non-zero when the lengths differ; then every presented byte is still compared.
        let mut diff = (token.len() ^ given.len()) as u64;
        for (i, b) in given.iter().enumerate() {
            let t = token.get(i % token.len().max(1)).copied().unwrap_or(0);
            diff |= u64::from(t ^ b);
        }
        diff == 0
    }
}

impl std::fmt::Debug for ResetToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResetToken(<redacted>)")
    }
}

/// The reset token when `admin.allow_reset` is on: from exactly one of an environment variable or a
/// file, at least 16 characters.
pub(crate) fn reset_token(
    source: &dyn ConfigReader,
    at: At<'_>,
    admin: &AdminConfig,
) -> Result<Option<ResetToken>, ConfigError> {
    if !admin.allow_reset {
        return Ok(None);
    }
    let (env, file) = (&admin.reset_token_env, &admin.reset_token_file);
    if env.is_none() && file.is_none() {
        return Err(at.error(
            "admin: allow_reset needs exactly one of reset_token_env or reset_token_file".into(),
        ));
    }
    token(source, at, "reset_token", env, file)
}

/// The read token, if `admin.read_token_env` or `read_token_file` names one.
pub(crate) fn read_token(
    source: &dyn ConfigReader,
    at: At<'_>,
    admin: &AdminConfig,
) -> Result<Option<ResetToken>, ConfigError> {
    token(
        source,
        at,
        "read_token",
        &admin.read_token_env,
        &admin.read_token_file,
    )
}

/// A bearer token `<what>_env` / `<what>_file` names: exactly one of them, at least 16
/// characters; `None` if neither is set.
fn token(
    source: &dyn ConfigReader,
    at: At<'_>,
    what: &str,
    env: &Option<String>,
    file: &Option<String>,
) -> Result<Option<ResetToken>, ConfigError> {
    let bad = |m: String| Err(at.error(format!("admin: {m}")));
    let token = match (env, file) {
        (None, None) => return Ok(None),
        (Some(var), None) => match source.env(var) {
            Some(t) => t,
            None => return bad(format!("{what}_env names {var}, which is not set")),
        },
        (None, Some(file)) => match source.read_text(&at.base.join(file)) {
            Ok(t) => t,
            Err(e) => return bad(format!("{what}_file {file}: {e}")),
        },
        (Some(_), Some(_)) => {
            return bad(format!("give one of {what}_env or {what}_file, not both"));
        }
    };
    let token = token.trim();
    if token.len() < 16 {
        return bad(format!(
            "the {} must be at least 16 characters",
            what.replace('_', " ")
        ));
    }
    Ok(Some(ResetToken(token.to_string())))
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_only_itself() {
        let t = ResetToken("0123456789abcdef".into());
        assert!(t.matches("0123456789abcdef"));
        for other in [
            "",
            "0123456789abcde",
            "0123456789abcdef0",
            "0123456789abcdef0123456789abcdef",
            "0123456789abcdeF",
            "x123456789abcdef",
        ] {
            assert!(!t.matches(other), "{other:?}");
        }
    }
}
