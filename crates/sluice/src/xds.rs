//! Limits pushed over xDS, as envoyproxy/ratelimit takes them with `CONFIG_TYPE=GRPC_XDS_SOTW`
//! (Envoy Gateway's way): an ADS client, state of the world, subscribed to
//! `ratelimit.config.ratelimit.v3.RateLimitConfig` as the node `CONFIG_GRPC_XDS_NODE_ID`.
//!
//! This module owns the protocol only: it turns each pushed set of resources into the
//! `domains:` of a sluice config ([`domains_yaml`]) and hands it to whoever applies it
//! ([`Push`]), which answers whether it was applied; it ACKs the push's version then, or NACKs
//! it with the reason and keeps the version in force. The applying (the same loader, checks and
//! atomic swap as a file's) is `run.rs`'s. The stream is reopened after any failure, waiting
//! `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`, doubling up to `_MAX_INTERVAL`.

use std::path::PathBuf;
use std::time::Duration;

use prost::Message as _;
use sluice_proto::envoy::core::Node;
use sluice_proto::envoy::discovery::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use sluice_proto::envoy::discovery::{DiscoveryRequest, DiscoveryResponse};
use sluice_proto::envoy::rpc::Status;
use sluice_proto::ratelimit_config::{RateLimitConfig, RateLimitDescriptor, TYPE_URL};
use tokio::sync::{mpsc, oneshot};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// Where the limits come from, and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdsSettings {
    /// `CONFIG_GRPC_XDS_SERVER_URL` (`host:port`).
    pub server: String,
    /// `CONFIG_GRPC_XDS_NODE_ID`.
    pub node_id: String,
    /// `CONFIG_GRPC_XDS_SERVER_USE_TLS`, with `CONFIG_GRPC_XDS_SERVER_TLS_CACERT`,
    /// `CONFIG_GRPC_XDS_CLIENT_TLS_CERT`/`_KEY` and `CONFIG_GRPC_XDS_SERVER_TLS_SAN`.
    pub tls: Option<XdsTls>,
    /// `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`, `XDS_CLIENT_BACKOFF_MAX_INTERVAL`.
    pub backoff: (Duration, Duration),
    /// `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES` (gRPC's 4 MiB by default).
    pub max_message: usize,
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`: serve with no limits until the first push, instead
    /// of waiting for it before any port opens.
    pub force_start: bool,
}

/// TLS towards the management server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdsTls {
    /// The CA to verify it with (default: the system's roots).
    pub ca: Option<PathBuf>,
    /// This client's certificate and key (mutual TLS).
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The name its certificate must carry (default: the host of `server`).
    pub server_name: Option<String>,
}

/// One push to apply: the `domains:` list it makes, and where to say whether it was applied
/// (`Err` with the reason refuses it: NACKed, the limits in force kept).
pub struct Push {
    /// The version the server gave it.
    pub version: String,
    /// `domains:` YAML, one line per resource (`  - {…}`).
    pub domains: String,
    /// The answer.
    pub applied: oneshot::Sender<Result<(), String>>,
}

/// Starts the client on the current runtime; its pushes arrive on the returned channel, one at
/// a time (the next is asked for only after the last is answered).
pub fn start(settings: XdsSettings) -> mpsc::Receiver<Push> {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(client(settings, tx));
    rx
}

/// The shortest wait between two streams, whatever the settings: a zero interval would spin.
const LEAST_WAIT: Duration = Duration::from_millis(100);

/// Keeps a stream open to the server until the receiver of pushes is gone. A stream that ends
/// is reopened after the initial interval, doubling up to the maximum while streams fail before
/// any push is applied (a stream that applied one starts over from the initial interval); each wait is a
/// random 50–100 % of the interval, so a fleet cut off by one restart of the server does not
/// come back in step.
async fn client(settings: XdsSettings, pushes: mpsc::Sender<Push>) {
    let (initial, most) = backoff(settings.backoff);
    let mut interval = initial;
    // The version in force: a new stream starts from it, a NACK names it.
    let mut in_force = String::new();
    loop {
        let mut pushed = false;
        let error = match stream(&settings, &pushes, &mut in_force, &mut pushed).await {
            Ok(()) => return,
            Err(e) => e,
        };
        if pushed {
            interval = initial;
        }
        let wait = jittered(interval);
        tracing::warn!(server = %settings.server, error = %error, retry_in = ?wait, "xDS: no stream to the management server; the limits in force stay");
        tokio::time::sleep(wait).await;
        interval = interval.saturating_mul(2).min(most);
    }
}

/// The initial and longest interval between streams: at least [`LEAST_WAIT`], the initial one
/// no longer than the longest.
fn backoff((initial, most): (Duration, Duration)) -> (Duration, Duration) {
    let most = most.max(LEAST_WAIT);
    (initial.clamp(LEAST_WAIT, most), most)
}

/// A random 50–100 % of `interval`.
fn jittered(interval: Duration) -> Duration {
    use std::hash::BuildHasher as _;
    let random = std::hash::RandomState::new().hash_one(std::time::Instant::now());
    let fraction = 0.5 + 0.5 * (random as f64 / u64::MAX as f64);
    interval.mul_f64(fraction)
}

/// One stream: subscribes, then applies each push and ACKs or NACKs it (`pushed` once one
/// was applied). `Ok` once the receiver of pushes is gone (shutdown); `Err` when the stream fails or
/// ends.
async fn stream(
    settings: &XdsSettings,
    pushes: &mpsc::Sender<Push>,
    in_force: &mut String,
    pushed: &mut bool,
) -> Result<(), String> {
    let channel = channel(settings).await?;
    let mut ads = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(settings.max_message);
    let (requests, outbox) = mpsc::channel::<DiscoveryRequest>(4);
    let request = |version: &str, nonce: &str, error: Option<String>| DiscoveryRequest {
        version_info: version.to_string(),
        node: Some(Node {
            id: settings.node_id.clone(),
            user_agent_name: "sluice".into(),
            ..Node::default()
        }),
        type_url: TYPE_URL.into(),
        response_nonce: nonce.to_string(),
        error_detail: error.map(|message| Status {
            // INVALID_ARGUMENT, as envoyproxy/ratelimit NACKs.
            code: 3,
            message,
            details: Vec::new(),
        }),
        ..DiscoveryRequest::default()
    };
    requests
        .send(request(in_force, "", None))
        .await
        .map_err(|_| "closed")?;
    let mut answers = ads
        .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(outbox))
        .await
        .map_err(|s| format!("{}: {}", s.code(), s.message()))?
        .into_inner();
    tracing::info!(server = %settings.server, node = %settings.node_id, "xDS: subscribed to RateLimitConfig");
    loop {
        let response = match answers.message().await {
            Ok(Some(r)) => r,
            Ok(None) => return Err("the server ended the stream".into()),
            Err(s) => return Err(format!("{}: {}", s.code(), s.message())),
        };
        let answer = match configs(&response) {
            Err(why) => Err(why),
            Ok(domains) => {
                let (applied, outcome) = oneshot::channel();
                let push = Push {
                    version: response.version_info.clone(),
                    domains,
                    applied,
                };
                if pushes.send(push).await.is_err() {
                    return Ok(());
                }
                outcome.await.unwrap_or_else(|_| Err("not applied".into()))
            }
        };
        let next = match answer {
            Ok(()) => {
                *pushed = true;
                tracing::info!(version = %response.version_info, "xDS: limits applied (ACK)");
                in_force.clone_from(&response.version_info);
                request(in_force, &response.nonce, None)
            }
            Err(why) => {
                tracing::error!(version = %response.version_info, error = %why, "xDS: limits refused (NACK); the limits in force stay");
                request(in_force, &response.nonce, Some(why))
            }
        };
        requests.send(next).await.map_err(|_| "closed")?;
    }
}

/// The channel to the server, over TLS if asked.
async fn channel(settings: &XdsSettings) -> Result<Channel, String> {
    let scheme = if settings.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let url = format!("{scheme}://{}", settings.server);
    let mut endpoint = Channel::from_shared(url.clone())
        .map_err(|e| format!("CONFIG_GRPC_XDS_SERVER_URL {url}: {e}"))?
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(30));
    if let Some(tls) = &settings.tls {
        let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = &tls.ca {
            config = config.ca_certificate(Certificate::from_pem(read(ca)?));
        }
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        if let Some(name) = &tls.server_name {
            config = config.domain_name(name.clone());
        }
        endpoint = endpoint
            .tls_config(config)
            .map_err(|e| format!("TLS towards the management server: {e}"))?;
    }
    endpoint
        .connect()
        .await
        .map_err(|e| format!("cannot reach {url}: {}", source_of(&e)))
}

/// The innermost error of `e`'s chain (transport errors repeat their source's words).
fn source_of(e: &(dyn std::error::Error + 'static)) -> String {
    let mut root = e;
    while let Some(next) = root.source() {
        root = next;
    }
    root.to_string()
}

/// The pushed resources as `domains:` lines, or why they cannot be read.
fn configs(response: &DiscoveryResponse) -> Result<String, String> {
    if response.type_url != TYPE_URL {
        return Err(format!(
            "type {:?}: sluice subscribes to {TYPE_URL} only",
            response.type_url
        ));
    }
    let mut configs = Vec::with_capacity(response.resources.len());
    for any in &response.resources {
        if any.type_url != TYPE_URL {
            return Err(format!("a resource of type {:?}", any.type_url));
        }
        let config = RateLimitConfig::decode(any.value.as_slice())
            .map_err(|e| format!("a resource that does not decode: {e}"))?;
        configs.push(config);
    }
    domains_yaml(&configs)
}

/// `configs` as the lines of a sluice config's `domains:` list, one resource a line (JSON, which
/// YAML reads as it is), so an error's line number names the resource.
pub fn domains_yaml(configs: &[RateLimitConfig]) -> Result<String, String> {
    let mut yaml = String::from("domains:\n");
    if configs.is_empty() {
        yaml = "domains: []\n".into();
    }
    for config in configs {
        let descriptors = config
            .descriptors
            .iter()
            .map(descriptor)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|why| format!("{} (resource {:?}): {why}", config.domain, config.name))?;
        let domain = serde_json::json!({"domain": config.domain, "descriptors": descriptors});
        yaml.push_str(&format!(
            "  - {}\n",
            crate::reference_env::yaml_safe(&domain.to_string())
        ));
    }
    Ok(yaml)
}

/// One descriptor as a domain file writes it.
fn descriptor(d: &RateLimitDescriptor) -> Result<serde_json::Value, String> {
    let mut out = serde_json::Map::new();
    out.insert("key".into(), d.key.clone().into());
    if !d.value.is_empty() {
        out.insert("value".into(), d.value.clone().into());
    }
    if let Some(policy) = &d.rate_limit {
        let mut limit = serde_json::Map::new();
        if policy.unlimited {
            limit.insert("unlimited".into(), true.into());
        } else {
            // The reference's numbering: MONTH and YEAR came before WEEK.
            let unit = match policy.unit {
                1 => "second",
                2 => "minute",
                3 => "hour",
                4 => "day",
                5 => "month",
                6 => "year",
                7 => "week",
                other => return Err(format!("key {:?}: unit {other} is not a unit", d.key)),
            };
            limit.insert("unit".into(), unit.into());
            limit.insert("requests_per_unit".into(), policy.requests_per_unit.into());
        }
        if !policy.name.is_empty() {
            limit.insert("name".into(), policy.name.clone().into());
        }
        if !policy.replaces.is_empty() {
            let names: Vec<_> = policy
                .replaces
                .iter()
                .map(|r| serde_json::json!({"name": r.name}))
                .collect();
            limit.insert("replaces".into(), names.into());
        }
        out.insert("rate_limit".into(), limit.into());
    }
    if !d.descriptors.is_empty() {
        let inner = d
            .descriptors
            .iter()
            .map(descriptor)
            .collect::<Result<Vec<_>, _>>()?;
        out.insert("descriptors".into(), inner.into());
    }
    if d.shadow_mode {
        out.insert("shadow_mode".into(), true.into());
    }
    if d.detailed_metric {
        out.insert("detailed_metric".into(), true.into());
    }
    Ok(out.into())
}

#[cfg(test)]
mod tests;
