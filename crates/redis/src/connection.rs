//! Connections: a standalone Redis through a reconnecting `ConnectionManager`, a Redis Cluster,
//! or the master Redis Sentinel names ([`Sentinel`]).

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{IntoConnectionInfo, RedisError};
use sluice_core::config::RedisSettings;

use crate::sentinel::Sentinel;

/// A connection usable by scripts; cheap to clone (both kinds multiplex one socket per node).
#[derive(Clone)]
pub enum Conn {
    /// Standalone Redis.
    Single(ConnectionManager),
    /// Redis Cluster: commands are routed by key slot; MOVED/ASK are followed by redis-rs.
    Cluster(ClusterConnection),
    /// The master Redis Sentinel names, looked up again after a failover.
    Sentinel(Sentinel),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Conn::Single(_) => "Conn::Single",
            Conn::Cluster(_) => "Conn::Cluster",
            Conn::Sentinel(_) => "Conn::Sentinel",
        })
    }
}

impl Conn {
    /// Runs a script invocation on this connection.
    pub async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, RedisError> {
        match self {
            Conn::Single(c) => invocation.invoke_async(&mut c.clone()).await,
            Conn::Cluster(c) => invocation.invoke_async(&mut c.clone()).await,
            Conn::Sentinel(c) => invocation.invoke_async(&mut c.clone()).await,
        }
    }

    /// DEL one key.
    pub async fn del(&self, key: &str) -> Result<(), RedisError> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(key);
        match self {
            Conn::Single(c) => cmd.query_async::<i64>(&mut c.clone()).await.map(|_| ()),
            Conn::Cluster(c) => cmd.query_async::<i64>(&mut c.clone()).await.map(|_| ()),
            Conn::Sentinel(c) => cmd.query_async::<i64>(&mut c.clone()).await.map(|_| ()),
        }
    }

    /// PUBLISH `message` on `channel` (on a cluster, any node: it reaches every node's
    /// subscribers).
    pub async fn publish(&self, channel: &str, message: &[u8]) -> Result<(), RedisError> {
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(channel).arg(message);
        match self {
            Conn::Single(c) => cmd.query_async::<i64>(&mut c.clone()).await.map(|_| ()),
            Conn::Cluster(c) => cmd.query_async::<i64>(&mut c.clone()).await.map(|_| ()),
            Conn::Sentinel(c) => cmd.query_async::<i64>(&mut c.clone()).await.map(|_| ()),
        }
    }

    /// PING.
    pub async fn ping(&self) -> Result<(), RedisError> {
        let cmd = redis::cmd("PING");
        match self {
            Conn::Single(c) => cmd.query_async::<String>(&mut c.clone()).await.map(|_| ()),
            Conn::Cluster(c) => cmd.query_async::<String>(&mut c.clone()).await.map(|_| ()),
            Conn::Sentinel(c) => cmd.query_async::<String>(&mut c.clone()).await.map(|_| ()),
        }
    }
}

/// Checks what the Redis client will make of `settings`, without connecting: every URL parses
/// (scheme, host, port, database, credentials) and a client can be built from it (TLS roots
/// included). `sluice config check` and `sluice serve` run it before binding any port, so a
/// malformed URL is a config error (exit 64), not a failure at start. Messages never echo a URL:
/// it may hold a password.
pub fn check_settings(settings: &RedisSettings) -> Result<(), String> {
    let say = |which: &str, e: &RedisError| format!("{which}: {}", explain(e, settings));
    // The URL's own syntax first, with the URL parser's words (`invalid port number`), which
    // never echo the URL: the Redis client says only `InvalidClientConfig` for most of them.
    let urls = settings.url.iter().map(|u| ("url".to_string(), u));
    let nodes = (settings.cluster_nodes.iter().enumerate())
        .map(|(i, u)| (format!("cluster_nodes[{i}]"), u));
    let sentinels = (settings
        .sentinel
        .iter()
        .flat_map(|s| s.nodes.iter().enumerate()))
    .map(|(i, u)| (format!("sentinel.nodes[{i}]"), u));
    for (which, u) in urls.chain(nodes).chain(sentinels) {
        if let Err(e) = url::Url::parse(u) {
            return Err(format!("{which}: {e}"));
        }
    }
    if settings.sentinel.is_some() {
        crate::sentinel::client(settings).map_err(|e| say("sentinel", &e))?;
    } else if is_cluster(settings) {
        for (i, node) in settings.cluster_nodes.iter().enumerate() {
            node.as_str()
                .into_connection_info()
                .map_err(|e| say(&format!("cluster_nodes[{i}]"), &e))?;
        }
        cluster_builder(settings)
            .build()
            .map_err(|e| say("cluster_nodes", &e))?;
    } else {
        client(settings).map_err(|e| say("url", &e))?;
    }
    Ok(())
}

/// An error's own text (`Connection refused (os error 111)`), or only its kind where the text
/// holds a configured URL or the password: a URL may carry credentials.
pub fn explain(e: &RedisError, settings: &RedisSettings) -> String {
    let text = e.to_string();
    let sentinel = settings.sentinel.iter();
    let leaks = (settings.url.iter().chain(&settings.cluster_nodes))
        .chain(sentinel.clone().flat_map(|s| &s.nodes))
        .chain(sentinel.map(|s| &s.master))
        .map(String::as_str)
        .chain(password(settings).as_deref())
        .any(|secret| !secret.is_empty() && text.contains(secret));
    if leaks {
        format!("{:?}", e.kind())
    } else {
        text
    }
}

/// Where the settings point, for logs: `host:port` of the URL, or of each cluster seed node (never
/// a user name or password).
pub fn endpoints(settings: &RedisSettings) -> String {
    let addr = |url: &str| {
        url.into_connection_info()
            .map_or_else(|_| "(unparsable URL)".to_string(), |i| i.addr().to_string())
    };
    if let Some(sentinel) = &settings.sentinel {
        let nodes: Vec<String> = sentinel.nodes.iter().map(|u| addr(u)).collect();
        format!("the master of sentinels {}", nodes.join(", "))
    } else if is_cluster(settings) {
        settings
            .cluster_nodes
            .iter()
            .map(|u| addr(u))
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        addr(settings.url.as_deref().unwrap_or_default())
    }
}

/// Which kind of deployment the settings describe.
pub fn is_cluster(settings: &RedisSettings) -> bool {
    !settings.cluster_nodes.is_empty()
}

pub(crate) fn password(settings: &RedisSettings) -> Option<String> {
    settings
        .password_env
        .as_ref()
        .and_then(|v| std::env::var(v).ok())
}

/// Trust `ca` (PEM) for `rediss://` instead of the public web roots.
pub(crate) fn tls_certificates(ca: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    }
}

/// A standalone client (not connected).
fn client(settings: &RedisSettings) -> Result<redis::Client, RedisError> {
    client_for(settings.url.as_deref().unwrap_or_default(), settings)
}

/// A client of the one node at `url`, with the settings' password and TLS roots (not connected).
fn client_for(url: &str, settings: &RedisSettings) -> Result<redis::Client, RedisError> {
    let mut info = url.into_connection_info()?;
    if let Some(p) = password(settings) {
        let redis = info.redis_settings().clone().set_password(p);
        info = info.set_redis_settings(redis);
    }
    match &settings.tls_ca_pem {
        Some(ca) => redis::Client::build_with_tls(info, tls_certificates(ca)),
        None => redis::Client::open(info),
    }
}

/// A standalone connection manager, or the connection to Redis Sentinel's master. Both connect
/// lazily and reconnect by themselves, so sluice starts (degraded) even while Redis is down.
pub fn standalone(settings: &RedisSettings) -> Result<Conn, RedisError> {
    if settings.sentinel.is_some() {
        return Ok(Conn::Sentinel(Sentinel::new(settings)?));
    }
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(settings.connect_timeout.0))
        .set_response_timeout(Some(settings.timeout.0))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(500));
    Ok(Conn::Single(ConnectionManager::new_lazy_with_config(
        client(settings)?,
        config,
    )?))
}

/// A connection for pub/sub messages: to the standalone Redis, or to a cluster's seed node
/// `attempt` (round robin, so a node that is down is not asked forever). A message published on
/// any node of a cluster reaches the subscribers of every node.
pub async fn subscriber(
    settings: &RedisSettings,
    attempt: usize,
) -> Result<redis::aio::PubSub, RedisError> {
    let subscribe = async {
        let client = match settings.cluster_nodes.as_slice() {
            // Redis replicates a message to the replicas, but the master is the one sure to be
            // up; a failover kills its subscribers, and the caller subscribes again.
            [] if settings.sentinel.is_some() => {
                crate::sentinel::client(settings)?
                    .0
                    .async_get_client()
                    .await?
            }
            [] => client(settings)?,
            nodes => client_for(&nodes[attempt % nodes.len()], settings)?,
        };
        client.get_async_pubsub().await
    };
    match tokio::time::timeout(settings.connect_timeout.0, subscribe).await {
        Ok(pubsub) => pubsub,
        Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
    }
}

/// A cluster client builder (nothing connects until the client is used).
fn cluster_builder(settings: &RedisSettings) -> ClusterClientBuilder {
    let mut builder = ClusterClientBuilder::new(settings.cluster_nodes.clone())
        .connection_timeout(settings.connect_timeout.0)
        .response_timeout(settings.timeout.0)
        .retries(2);
    if let Some(p) = password(settings) {
        builder = builder.password(p);
    }
    if let Some(ca) = &settings.tls_ca_pem {
        builder = builder.certs(tls_certificates(ca));
    }
    builder
}

/// A cluster connection (discovers the slot map from the seed nodes).
pub async fn cluster(settings: &RedisSettings) -> Result<Conn, RedisError> {
    let client = cluster_builder(settings).build()?;
    Ok(Conn::Cluster(client.get_async_connection().await?))
}
