//! Redis Sentinel: one multiplexed connection to the master the sentinels name, found again
//! after a failover.
//!
//! redis-rs asks the sentinels for the master (and checks with `ROLE` that it is one) but keeps
//! no connection across a failover: its `ConnectionManager` reconnects to one fixed address. So
//! [`Sentinel`] holds the master's connection and drops it when the sentinels announce a new
//! master (`+switch-master`, to which a task stays subscribed on one sentinel after another) or
//! a call shows the master is gone or demoted (the socket fails or times out, or a write
//! answers `READONLY`: Sentinel makes the old master a replica, up to 10 s after the switch,
//! and kills its clients). The next call asks the sentinels again, one caller at a time, within
//! `2 × connect_timeout + 1 s`. Calls that fail meanwhile fail as on a standalone Redis that is down: the
//! circuit breaker and the rules' fallbacks take them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, IntoConnectionInfo, Pipeline,
    RedisError, RedisFuture, RedisResult, ServerErrorKind, TlsMode, Value,
};
use sluice_core::config::{RedisSettings, SentinelSettings};

/// A connection to the master of `redis.sentinel`, cheap to clone (clones share it).
#[derive(Clone)]
pub struct Sentinel {
    inner: Arc<Inner>,
}

struct Inner {
    /// Asks the sentinels; locked while one caller looks the master up.
    sentinels: tokio::sync::Mutex<Asking>,
    /// To build the sentinels' client again with another sentinel first.
    settings: RedisSettings,
    /// The master's connection and the lookup it came from.
    master: ArcSwapOption<(u64, MultiplexedConnection)>,
    /// Lookups made so far (each one's number names the connection it made).
    lookups: AtomicU64,
    /// The number of the last lookup that failed (0: none).
    failed: AtomicU64,
    /// New masters the sentinels announced so far (`+switch-master`).
    switches: AtomicU64,
    config: AsyncConnectionConfig,
    /// The longest one lookup may take: redis-rs asks each sentinel with its own timeouts (1 s
    /// to connect, 0.5 s to answer), then checks the master.
    lookup_timeout: Duration,
    db: i64,
}

/// The sentinels' client, and which sentinel it asks first.
struct Asking {
    client: SentinelClient,
    first: usize,
}

impl Sentinel {
    /// A connection that looks the master up on first use, and the task that follows the
    /// sentinels' announcements (call inside a Tokio runtime; it ends with the last clone).
    pub fn new(settings: &RedisSettings) -> RedisResult<Self> {
        let (client, db) = client_from(settings, 0)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(settings.connect_timeout.0))
            .set_response_timeout(Some(settings.timeout.0));
        let inner = Arc::new(Inner {
            sentinels: tokio::sync::Mutex::new(Asking { client, first: 0 }),
            settings: settings.clone(),
            master: ArcSwapOption::empty(),
            lookups: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            switches: AtomicU64::new(0),
            config,
            lookup_timeout: settings.connect_timeout.0 * 2 + Duration::from_secs(1),
            db,
        });
        let announcers = announcers(settings)?;
        let name = master_name(settings)?;
        tokio::spawn(follow_switches(
            Arc::downgrade(&inner),
            announcers,
            name,
            settings.connect_timeout.0,
        ));
        Ok(Self { inner })
    }

    /// The master's connection: the one in use, or a new one to the master the sentinels name
    /// now. The lookup runs in a task of its own: a caller that stops waiting (a decision's
    /// deadline is shorter than a lookup) does not stop it.
    async fn master(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(current) = self.inner.master.load_full() {
            return Ok((*current).clone());
        }
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move { inner.look_up().await })
            .await
            .map_err(|e| RedisError::from(std::io::Error::other(e.to_string())))?
    }

    /// Drops the connection of `lookup` (not a newer one another caller made since), so the
    /// next call asks the sentinels again.
    fn forget(&self, lookup: u64) {
        self.inner.master.rcu(|current| match current {
            Some(c) if c.0 == lookup => None,
            other => other.clone(),
        });
    }
}

impl Inner {
    /// Asks the sentinels for the master and connects to it, one caller at a time. A caller
    /// that waited while a lookup failed takes that failure rather than asking again, so calls
    /// that pile up while no master can be found cost one lookup, not one each (the circuit
    /// breaker spaces the next ones).
    async fn look_up(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let seen = self.lookups.load(Ordering::Acquire);
        let mut asking = self.sentinels.lock().await;
        if let Some(current) = self.master.load_full() {
            return Ok((*current).clone());
        }
        let done = self.lookups.load(Ordering::Acquire);
        if done != seen && self.failed.load(Ordering::Acquire) == done {
            return Err(lost("the sentinels named no master that answered"));
        }
        let switches = self.switches.load(Ordering::Acquire);
        let config = &self.config;
        let client = &mut asking.client;
        let lookup = async {
            let master = client.async_get_client().await?;
            master
                .get_multiplexed_async_connection_with_config(config)
                .await
        };
        let started = std::time::Instant::now();
        let found = tokio::time::timeout(self.lookup_timeout, lookup).await;
        let lookup = self.lookups.fetch_add(1, Ordering::AcqRel) + 1;
        // redis-rs takes the sentinels' answers in their order: one that does not answer holds
        // up every lookup behind it until its timeout. After a lookup that failed or was slow,
        // the next asks the next sentinel first (a silent one ends up last, where its answer
        // holds up nothing once an earlier sentinel named a master).
        if found.as_ref().map_or(true, Result::is_err) || started.elapsed() > SLOW_LOOKUP {
            let count = (self.settings.sentinel.as_ref()).map_or(1, |s| s.nodes.len().max(1));
            let next = (asking.first + 1) % count;
            if let Ok((client, _)) = client_from(&self.settings, next) {
                *asking = Asking {
                    client,
                    first: next,
                };
            }
        }
        let failed = match found {
            // A master announced while this one was looked up: it may be the old one.
            Ok(Ok(_)) if self.switches.load(Ordering::Acquire) != switches => {
                lost("the sentinels announced a new master during the lookup")
            }
            Ok(Ok(conn)) => {
                self.master.store(Some(Arc::new((lookup, conn.clone()))));
                return Ok((lookup, conn));
            }
            Ok(Err(e)) => e,
            Err(_) => RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)),
        };
        self.failed.store(lookup, Ordering::Release);
        Err(failed)
    }
}

/// A lookup slower than this moves the sentinel asked first to the end of the list.
const SLOW_LOOKUP: Duration = Duration::from_millis(250);

/// An error that drops the master's connection ([`master_lost`]).
fn lost(why: &'static str) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, why))
}

/// Stays subscribed to `+switch-master` on one of `sentinels` after another (a second apart when
/// none answers) and drops the master's connection when the sentinels announce a new master for
/// `name` (`<name> <old ip> <old port> <new ip> <new port>`): without it, writes would go on
/// reaching the old master until Sentinel demotes it, and be lost then. A sentinel that stops
/// answering PING (every 10 s) is left for the next. Ends once `inner` is gone.
async fn follow_switches(
    inner: std::sync::Weak<Inner>,
    sentinels: Vec<redis::Client>,
    name: String,
    connect_timeout: Duration,
) {
    use futures_util::StreamExt as _;
    const CHECK_EVERY: Duration = Duration::from_secs(1);
    const PING_EVERY: u32 = 10;
    let refused = sluice_core::SampledLine::new();
    for client in sentinels.iter().cycle() {
        if inner.strong_count() == 0 {
            return;
        }
        let subscribed = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, RedisError>(pubsub)
        };
        let pubsub = match tokio::time::timeout(connect_timeout, subscribed).await {
            Ok(Ok(pubsub)) => pubsub,
            failed => {
                if let Some(unlogged) = refused.sample_now() {
                    let error = match failed {
                        Ok(Err(e)) => format!("{:?}", e.kind()),
                        _ => "timed out".to_string(),
                    };
                    tracing::warn!(%error, unlogged_since_last_line = unlogged, "Redis Sentinel: a sentinel refused the subscription to its announcements; asking the next (sampled: at most one line a second)");
                }
                tokio::time::sleep(CHECK_EVERY).await;
                continue;
            }
        };
        let (mut sink, mut messages) = pubsub.split();
        let mut idle = 0u32;
        loop {
            tokio::select! {
                message = messages.next() => {
                    // None: the subscription is lost; the next sentinel is asked.
                    let Some(message) = message else { break };
                    let text = String::from_utf8_lossy(message.get_payload_bytes());
                    if text.split(' ').next() == Some(name.as_str())
                        && let Some(inner) = inner.upgrade()
                    {
                        tracing::info!(switch = %text, "Redis Sentinel: a new master; connecting to it");
                        inner.switches.fetch_add(1, Ordering::AcqRel);
                        inner.master.store(None);
                    }
                }
                () = tokio::time::sleep(CHECK_EVERY) => {
                    if inner.strong_count() == 0 {
                        return;
                    }
                    idle += 1;
                    if idle.is_multiple_of(PING_EVERY) {
                        let ping = tokio::time::timeout(connect_timeout, sink.ping::<String>());
                        if !matches!(ping.await, Ok(Ok(_))) {
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// A client of each sentinel, for its announcements: the sentinels' credentials (as
/// [`client`] takes them: the first URL that has some), each URL's TLS, the trusted CA of
/// `tls_ca_file`.
fn announcers(settings: &RedisSettings) -> RedisResult<Vec<redis::Client>> {
    let nodes = (settings.sentinel.iter().flat_map(|s| &s.nodes))
        .map(|url| url.as_str().into_connection_info())
        .collect::<RedisResult<Vec<_>>>()?;
    let shared = (nodes.iter().map(|n| n.redis_settings()))
        .find(|r| r.password().is_some() || r.username().is_some())
        .cloned();
    nodes
        .into_iter()
        .map(|mut info| {
            if let Some(auth) = &shared {
                let mut redis = info.redis_settings().clone();
                if let Some(user) = auth.username() {
                    redis = redis.set_username(user);
                }
                if let Some(password) = auth.password() {
                    redis = redis.set_password(password);
                }
                info = info.set_redis_settings(redis);
            }
            let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
            match &settings.tls_ca_pem {
                Some(ca) if tls => {
                    redis::Client::build_with_tls(info, super::connection::tls_certificates(ca))
                }
                _ => redis::Client::open(info),
            }
        })
        .collect()
}

/// The name the sentinels monitor the master under.
fn master_name(settings: &RedisSettings) -> RedisResult<String> {
    let sentinel = (settings.sentinel.as_ref()).ok_or_else(|| invalid("no `sentinel` settings"))?;
    Ok(master(sentinel, false)?.0)
}

/// Whether `e` says this master is no longer the one to write to: its socket failed, it did
/// not answer in time, or it is a replica now.
fn master_lost(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

/// Whether a pipeline's replies hold a `READONLY` (a pipeline's errors come back as values).
fn any_read_only(replies: &[Value]) -> bool {
    replies
        .iter()
        .any(|v| matches!(v, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::ReadOnly)))
}

impl ConnectionLike for Sentinel {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (lookup, mut conn) = self.master().await?;
            let reply = conn.req_packed_command(cmd).await;
            match &reply {
                Err(e) if master_lost(e) => self.forget(lookup),
                Ok(v) if any_read_only(std::slice::from_ref(v)) => self.forget(lookup),
                _ => {}
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (lookup, mut conn) = self.master().await?;
            let replies = conn.req_packed_commands(pipeline, offset, count).await;
            match &replies {
                Err(e) if master_lost(e) => self.forget(lookup),
                Ok(v) if any_read_only(v) => self.forget(lookup),
                _ => {}
            }
            replies
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.db
    }
}

/// The sentinels' client for `redis.sentinel`, and the master's database. Credentials in a
/// sentinel's URL are the sentinels' (the first URL that has some: sentinels of one master share
/// them); the master's come from its URL, with `password_env` winning as it does for `url`.
/// TLS: the sentinels' URLs say it for them; a master URL says it for the master, a bare name
/// takes the sentinels'. `tls_ca_file` is trusted for both.
pub(crate) fn client(settings: &RedisSettings) -> RedisResult<(SentinelClient, i64)> {
    client_from(settings, 0)
}

/// [`client`], asking the sentinel `first` first (then the ones after it, in order).
fn client_from(settings: &RedisSettings, first: usize) -> RedisResult<(SentinelClient, i64)> {
    let sentinel = settings
        .sentinel
        .as_ref()
        .ok_or_else(|| invalid("no `sentinel` settings"))?;
    let mut nodes = sentinel
        .nodes
        .iter()
        .map(|u| u.as_str().into_connection_info())
        .collect::<RedisResult<Vec<_>>>()?;
    if !nodes.is_empty() {
        let first = first % nodes.len();
        nodes.rotate_left(first);
    }
    let sentinels_tls = matches!(
        nodes.first().map(|n| n.addr()),
        Some(ConnectionAddr::TcpTls { .. })
    );
    let (name, master) = master(sentinel, sentinels_tls)?;
    let addrs = nodes.iter().map(|n| n.addr().clone());
    let mut builder = SentinelClientBuilder::new(addrs, name, SentinelServerType::Master)?;
    if let Some(auth) = nodes
        .iter()
        .map(|n| n.redis_settings())
        .find(|r| r.password().is_some() || r.username().is_some())
    {
        if let Some(user) = auth.username() {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = auth.password() {
            builder = builder.set_client_to_sentinel_password(password);
        }
    }
    let password = super::connection::password(settings).or(master.password);
    if let Some(user) = master.username {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = password {
        builder = builder.set_client_to_redis_password(password);
    }
    builder = builder.set_client_to_redis_db(master.db);
    if master.tls {
        builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
    }
    if let Some(ca) = &settings.tls_ca_pem {
        let certs = super::connection::tls_certificates(ca);
        if sentinels_tls {
            builder = builder.set_client_to_sentinel_certificates(certs.clone());
        }
        if master.tls {
            builder = builder.set_client_to_redis_certificates(certs);
        }
    }
    Ok((builder.build()?, master.db))
}

/// How to reach the master, besides the address the sentinels give.
struct Master {
    username: Option<String>,
    password: Option<String>,
    db: i64,
    tls: bool,
}

/// The master's name, and what its URL says (a bare name says nothing; TLS as the sentinels').
fn master(sentinel: &SentinelSettings, sentinels_tls: bool) -> RedisResult<(String, Master)> {
    if !sentinel.master.contains("://") {
        let bare = Master {
            username: None,
            password: None,
            db: 0,
            tls: sentinels_tls,
        };
        return Ok((sentinel.master.clone(), bare));
    }
    let info = sentinel.master.as_str().into_connection_info()?;
    let (name, tls) = match info.addr() {
        ConnectionAddr::Tcp(host, _) => (host.clone(), false),
        ConnectionAddr::TcpTls { host, .. } => (host.clone(), true),
        _ => return Err(invalid("`master` is a redis:// or rediss:// URL")),
    };
    let redis = info.redis_settings();
    Ok((
        name,
        Master {
            username: redis.username().map(str::to_string),
            password: redis.password().map(str::to_string),
            db: redis.db(),
            tls,
        },
    ))
}

fn invalid(what: &'static str) -> RedisError {
    RedisError::from((ErrorKind::InvalidClientConfig, what))
}
