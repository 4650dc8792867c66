//! Turning an HTTP request, as ext_authz presents it, into rate-limit descriptors.
//!
//! Each configured descriptor is a list of entries; each entry takes its value from one part of
//! the request (optionally translated through a named map). A descriptor any of whose values is
//! missing is skipped, as Envoy skips a `rate_limits` action whose header is absent.
//!
//! Identities are normalised, so that spellings of one client share one bucket: client addresses
//! are parsed and printed canonically (an X-Forwarded-For hop that is not an address is not
//! trusted: the peer address is used), API keys are taken from `x-api-key` (the configured
//! header) first, then `Authorization: Bearer` (the scheme in any case), then the query parameter
//! (percent-decoded).

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use crate::descriptor::{Descriptor, Entry};
use crate::error::ConfigError;
use crate::rules::RuleSet;
use crate::schema::{ApiKeySource, AuthzConfig, Source};

/// The parts of an HTTP request that descriptors can be built from.
pub trait RequestView {
    /// A header value by lower-case name.
    fn header(&self, lower_name: &str) -> Option<&str>;
    /// The path, including any query string.
    fn path(&self) -> &str;
    /// The method.
    fn method(&self) -> &str;
    /// The host (`:authority`).
    fn host(&self) -> &str;
    /// The address of the peer that connected to Envoy.
    fn peer_ip(&self) -> Option<&str>;
    /// A context extension set on the route.
    fn context_extension(&self, name: &str) -> Option<&str>;
}

/// A named map of values (e.g. API key → tier).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValueMap {
    /// The mapping.
    pub entries: HashMap<String, String>,
    /// The value for keys not in `entries`; `None` skips the descriptor.
    pub default: Option<String>,
}

impl ValueMap {
    fn translate(&self, value: &str) -> Option<&str> {
        self.entries
            .get(value)
            .map(String::as_str)
            .or(self.default.as_deref())
    }
}

#[derive(Debug, Clone)]
struct PlanEntry {
    key: String,
    source: Source,
    map: Option<Arc<ValueMap>>,
    /// Keep only a digest of the value (secrets such as API keys).
    hash: bool,
}

/// The compiled `authz:` section.
#[derive(Debug, Clone)]
pub struct AuthzPlan {
    /// The domain the descriptors are checked in.
    pub domain: String,
    trusted_hops: u32,
    descriptors: Vec<Vec<PlanEntry>>,
}

impl AuthzPlan {
    /// Validates `authz:` against the loaded maps and rules.
    pub fn compile(
        file: &Path,
        config: &AuthzConfig,
        maps: &HashMap<String, Arc<ValueMap>>,
        rules: &RuleSet,
    ) -> Result<Self, ConfigError> {
        let domain = config.domain.value.clone();
        if !rules.has_domain(&domain) {
            return Err(ConfigError::at(
                file,
                config.domain.referenced.line(),
                format!(
                    "authz.domain '{domain}' has no domain config (so Check would allow everything)"
                ),
            ));
        }
        let mut descriptors = Vec::with_capacity(config.descriptors.len());
        for d in &config.descriptors {
            let mut entries = Vec::with_capacity(d.len());
            for e in d {
                let map = match &e.map {
                    None => None,
                    Some(name) => Some(maps.get(&name.value).cloned().ok_or_else(|| {
                        ConfigError::at(
                            file,
                            name.referenced.line(),
                            format!("map '{}' is not defined under `maps:`", name.value),
                        )
                    })?),
                };
                if e.key.value.is_empty() {
                    return Err(ConfigError::at(
                        file,
                        e.key.referenced.line(),
                        "authz entry has empty key",
                    ));
                }
                let hash = e
                    .hash
                    .unwrap_or(matches!(e.from, Source::ApiKey(_)) && map.is_none());
                entries.push(PlanEntry {
                    key: e.key.value.clone(),
                    source: lowercase_header_names(e.from.clone()),
                    map,
                    hash,
                });
            }
            if entries.is_empty() {
                return Err(ConfigError::at(
                    file,
                    config.domain.referenced.line(),
                    "authz.descriptors holds an empty descriptor",
                ));
            }
            descriptors.push(entries);
        }
        Ok(Self {
            domain,
            trusted_hops: config.trusted_hops,
            descriptors,
        })
    }

    /// The descriptors for `request`; those with a missing source are left out.
    pub fn descriptors(&self, request: &impl RequestView) -> Vec<Descriptor> {
        self.descriptors
            .iter()
            .filter_map(|entries| {
                let built: Option<Vec<Entry>> = entries
                    .iter()
                    .map(|e| {
                        let raw = self.source_value(&e.source, request)?;
                        let value = match &e.map {
                            Some(map) => map.translate(&raw)?,
                            None => &raw,
                        };
                        if e.hash {
                            return Some(Entry::new(e.key.as_str(), digest(value)));
                        }
                        Some(Entry::new(e.key.as_str(), value))
                    })
                    .collect();
                built.map(|entries| Descriptor {
                    entries,
                    ..Descriptor::default()
                })
            })
            .collect()
    }

    fn source_value<'r>(
        &'r self,
        source: &'r Source,
        req: &'r impl RequestView,
    ) -> Option<Cow<'r, str>> {
        match source {
            Source::ClientIp => self.client_ip(req),
            // One spelling of the path, so `//login` is not a bucket of its own (`path.rs`).
            Source::Path => Some(crate::path::normalized(req.path())),
            Source::Method => Some(req.method().into()),
            Source::Host => Some(req.host().into()),
            // Header names were lowercased when the plan was built.
            Source::Header(name) => req.header(name).map(|v| Cow::Borrowed(first_value(v))),
            Source::ContextExtension(name) => req.context_extension(name).map(Cow::Borrowed),
            Source::ApiKey(spec) => api_key(req, spec),
            Source::Value(v) => Some(v.into()),
        }
    }

    /// With `trusted_hops: N` (N ≥ 1), the Nth address from the right of X-Forwarded-For (the one
    /// the outermost trusted proxy saw); with 0, too few addresses, or a hop there that is not an
    /// IP address, the peer address. Printed canonically (IPv6 lower-case and compressed, an
    /// IPv4-mapped IPv6 address as IPv4), so spellings of one address share a bucket.
    fn client_ip<'r>(&self, req: &'r impl RequestView) -> Option<Cow<'r, str>> {
        if self.trusted_hops > 0
            && let Some(xff) = req.header("x-forwarded-for")
        {
            let hops: Vec<&str> = xff
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            let n = self.trusted_hops as usize;
            if hops.len() >= n
                && let Some(ip) = canonical_ip(hops[hops.len() - n])
            {
                return Some(ip);
            }
        }
        let peer = req.peer_ip()?;
        Some(canonical_ip(peer).unwrap_or(Cow::Borrowed(peer)))
    }
}

/// `sha256:` and the first 128 bits of the value's SHA-256, in hex: the same in every sidecar
/// (buckets are shared through Redis), not the secret itself.
pub fn digest(value: &str) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;
    let mut out = String::with_capacity(7 + 32);
    out.push_str("sha256:");
    for b in &Sha256::digest(value.as_bytes())[..16] {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// An IP address in canonical form (borrowed when it already is), or `None` if `s` is not one.
fn canonical_ip(s: &str) -> Option<Cow<'_, str>> {
    let ip = s.parse::<IpAddr>().ok()?.to_canonical();
    let text = ip.to_string();
    Some(if text == s {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(text)
    })
}

/// The first value of a header: a header sent several times reaches sluice joined with commas
/// (`victim,junk`), and only the first counts, so adding a copy of an identity header never
/// makes another identity (and so never buys a fresh bucket). A single value with commas is cut
/// at the first one too: one rule for every `header` and `api_key` source.
fn first_value(value: &str) -> &str {
    value.split(',').next().unwrap_or_default().trim()
}

/// The API key: the configured header, else `Authorization: Bearer <key>` (scheme in any case),
/// else the query parameter, percent-decoded; of a header sent several times, the first value
/// ([`first_value`]). Blank keys count as absent.
fn api_key<'r>(req: &'r impl RequestView, spec: &'r ApiKeySource) -> Option<Cow<'r, str>> {
    let bearer = || {
        let auth = first_value(req.header("authorization")?);
        let (scheme, key) = auth.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then_some(key)
    };
    let found = req
        .header(&spec.header)
        .map(|k| Cow::Borrowed(first_value(k)))
        .filter(|k| !k.is_empty())
        .or_else(|| bearer().map(|k| Cow::Borrowed(k.trim())))
        .filter(|k| !k.is_empty())
        .or_else(|| query_param(req.path(), &spec.query_param).map(percent_decoded))?;
    // A query value decoded to `victim,junk` is cut as a header's would be.
    let key = match found {
        Cow::Borrowed(k) => Cow::Borrowed(first_value(k)),
        Cow::Owned(k) => Cow::Owned(first_value(&k).to_string()),
    };
    (!key.is_empty()).then_some(key)
}

/// `%XX` escapes decoded (and `+` as a space, as forms encode it); the raw text if the result is
/// not UTF-8 or an escape is malformed.
fn percent_decoded(raw: &str) -> Cow<'_, str> {
    if !raw.contains(['%', '+']) {
        return Cow::Borrowed(raw);
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => out.push(b),
                    None => return Cow::Borrowed(raw),
                }
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_or(Cow::Borrowed(raw), Cow::Owned)
}

/// The raw value (not percent-decoded) of the first query parameter of `target` (a request
/// target: the query ends at a `#`) whose name is `name`, however the name is escaped
/// (`api%5Fkey` is `api_key` to the application too: it must not hide a key from sluice).
fn query_param<'a>(target: &'a str, name: &str) -> Option<&'a str> {
    let (_, query) = target.split_once('?')?;
    let query = query.split('#').next().unwrap_or_default();
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| percent_decoded(k) == name)
        .map(|(_, v)| v)
}

/// Header lookups are by lowercase name (`RequestView::header`): lowercase once, at load.
fn lowercase_header_names(source: Source) -> Source {
    match source {
        Source::Header(name) => Source::Header(name.to_ascii_lowercase()),
        Source::ApiKey(mut spec) => {
            spec.header.make_ascii_lowercase();
            Source::ApiKey(spec)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests;
