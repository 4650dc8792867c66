//! envoyproxy/ratelimit's variables that sluice does not act on, each with what sluice does
//! instead: named at start when set, so none is silently ignored (docs/migrating.md has the same
//! table). The list is upstream's `src/settings/settings.go` (114 variables, main at f2fb157)
//! less those `reference_env.rs` reads.

/// `(variable, what sluice does instead)`.
pub(super) const NOT_APPLICABLE: &[(&str, &str)] = &[
    (
        "DEBUG_HOST",
        "no debug port: /config and /metrics are on PORT",
    ),
    (
        "DEBUG_PORT",
        "no debug port: /config and /metrics are on PORT",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE",
        "connections are kept; idle ones are pinged every 30 s and closed after 10 s unanswered",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        "connections are kept; idle ones are pinged every 30 s and closed after 10 s unanswered",
    ),
    (
        "USE_STATSD",
        "no statsd: Prometheus metrics on PORT's /metrics",
    ),
    (
        "STATSD_HOST",
        "no statsd: Prometheus metrics on PORT's /metrics",
    ),
    (
        "STATSD_PORT",
        "no statsd: Prometheus metrics on PORT's /metrics",
    ),
    (
        "USE_DOG_STATSD",
        "no statsd: Prometheus metrics on PORT's /metrics",
    ),
    (
        "USE_DOG_STATSD_MOGRIFIERS",
        "no statsd: Prometheus metrics on PORT's /metrics",
    ),
    (
        "USE_PROMETHEUS",
        "Prometheus metrics are always on, on PORT's /metrics",
    ),
    (
        "PROMETHEUS_ADDR",
        "Prometheus metrics are on PORT's /metrics",
    ),
    (
        "PROMETHEUS_PATH",
        "Prometheus metrics are on PORT's /metrics",
    ),
    (
        "PROMETHEUS_MAPPER_YAML",
        "sluice's metrics have native names (docs/metrics.md)",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "latencies are in seconds",
    ),
    (
        "EXTRA_TAGS",
        "add labels in Prometheus (relabelling, or the PodMonitor)",
    ),
    (
        "STATS_FLUSH_INTERVAL",
        "nothing is pushed: Prometheus scrapes /metrics",
    ),
    ("DISABLE_STATS", "metrics are always on; nothing is pushed"),
    (
        "RUNTIME_WATCH_ROOT",
        "the config directory is polled every second: edits in place and symlink swaps are both seen",
    ),
    ("RUNTIME_IGNOREDOTFILES", "hidden files are always skipped"),
    (
        "MERGE_DOMAIN_CONFIG",
        "a domain in two files is refused, naming both",
    ),
    (
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
        "sluice starts only with a valid config; a bad edit later keeps the config in force",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "a bucket's key expires when the bucket would be full again",
    ),
    (
        "NEAR_LIMIT_RATIO",
        "no near-limit metric: `sluice quota get` shows what a key has left",
    ),
    (
        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
        "a denied request is never charged",
    ),
    (
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "decisions are made from local leases; tracked keys are bounded by engine.max_keys",
    ),
    (
        "REDIS_POOL_SIZE",
        "one multiplexed connection per Redis node",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "one multiplexed connection per Redis node",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        "lease calls are batched: redis.batch_linger, one pipeline per node",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "lease calls are batched: redis.batch_max",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "lease calls are batched: one pipeline per node",
    ),
    (
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "/healthcheck stays 200 while Redis is down: the fallbacks keep deciding",
    ),
    (
        "REDIS_STARTUP_INITIAL_INTERVAL",
        "sluice starts degraded without Redis and connects when it answers",
    ),
    (
        "REDIS_STARTUP_MAX_INTERVAL",
        "sluice starts degraded without Redis and connects when it answers",
    ),
    (
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        "sluice starts degraded without Redis and connects when it answers",
    ),
    (
        "REDIS_PERSECOND",
        "one store: per-second limits go to REDIS_URL too (leases keep most of them off Redis)",
    ),
    (
        "REDIS_PERSECOND_SOCKET_TYPE",
        "one store: per-second limits go to REDIS_URL too",
    ),
    (
        "REDIS_PERSECOND_TYPE",
        "one store: per-second limits go to REDIS_URL too",
    ),
    (
        "REDIS_PERSECOND_URL",
        "one store: per-second limits go to REDIS_URL too",
    ),
    (
        "REDIS_PERSECOND_POOL_SIZE",
        "one store: per-second limits go to REDIS_URL too",
    ),
    (
        "REDIS_PERSECOND_AUTH",
        "one store: per-second limits go to REDIS_URL too",
    ),
    (
        "REDIS_PERSECOND_TLS",
        "one store: per-second limits go to REDIS_URL too",
    ),
    (
        "REDIS_PERSECOND_SENTINEL_AUTH",
        "one store: per-second limits go to REDIS_URL too",
    ),
    (
        "REDIS_PERSECOND_PIPELINE_WINDOW",
        "one store: per-second limits go to REDIS_URL too",
    ),
    (
        "REDIS_PERSECOND_PIPELINE_LIMIT",
        "one store: per-second limits go to REDIS_URL too",
    ),
    (
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        "one store: per-second limits go to REDIS_URL too",
    ),
    (
        "REDIS_PERSECOND_TIMEOUT",
        "one store: per-second limits go to REDIS_URL too",
    ),
    (
        "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
        "one store: per-second limits go to REDIS_URL too",
    ),
    (
        "MEMCACHE_HOST_PORT",
        "no memcache (BACKEND_TYPE=memcache is refused)",
    ),
    (
        "MEMCACHE_SRV",
        "no memcache (BACKEND_TYPE=memcache is refused)",
    ),
    (
        "MEMCACHE_SRV_REFRESH",
        "no memcache (BACKEND_TYPE=memcache is refused)",
    ),
    (
        "MEMCACHE_MAX_IDLE_CONNS",
        "no memcache (BACKEND_TYPE=memcache is refused)",
    ),
    (
        "MEMCACHE_TLS",
        "no memcache (BACKEND_TYPE=memcache is refused)",
    ),
    (
        "MEMCACHE_TLS_CLIENT_CERT",
        "no memcache (BACKEND_TYPE=memcache is refused)",
    ),
    (
        "MEMCACHE_TLS_CLIENT_KEY",
        "no memcache (BACKEND_TYPE=memcache is refused)",
    ),
    (
        "MEMCACHE_TLS_CACERT",
        "no memcache (BACKEND_TYPE=memcache is refused)",
    ),
    (
        "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        "no memcache (BACKEND_TYPE=memcache is refused)",
    ),
    ("TRACING_ENABLED", "no OpenTelemetry tracing"),
    ("TRACING_SERVICE_NAME", "no OpenTelemetry tracing"),
    ("TRACING_SERVICE_NAMESPACE", "no OpenTelemetry tracing"),
    ("TRACING_SERVICE_INSTANCE_ID", "no OpenTelemetry tracing"),
    ("TRACING_EXPORTER_PROTOCOL", "no OpenTelemetry tracing"),
    ("TRACING_SAMPLING_RATE", "no OpenTelemetry tracing"),
    (
        "CONFIG_GRPC_XDS_NODE_METADATA",
        "the xDS node is sent with its id only",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "a failed xDS stream is reopened after XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, doubling up to _MAX_INTERVAL",
    ),
    (
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        "the wait between xDS streams doubles (upstream takes this as its multiplier: 0.5 keeps it at the initial interval)",
    ),
    (
        "XDS_CLIENT_BACKOFF_JITTER",
        "always on: each wait between xDS streams is a random 50-100 % of the interval",
    ),
];

/// The xDS client's variables, named when set while limits come from files (`CONFIG_TYPE=FILE`);
/// with `GRPC_XDS_SOTW` they are read ([`crate::xds`]).
pub(super) const XDS_ONLY: &[(&str, &str)] = &[
    (
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "with files, sluice starts only with a valid config",
    ),
    (
        "CONFIG_GRPC_XDS_NODE_ID",
        "read only with CONFIG_TYPE=GRPC_XDS_SOTW",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_URL",
        "read only with CONFIG_TYPE=GRPC_XDS_SOTW",
    ),
    (
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
        "read only with CONFIG_TYPE=GRPC_XDS_SOTW",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_USE_TLS",
        "read only with CONFIG_TYPE=GRPC_XDS_SOTW",
    ),
    (
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
        "read only with CONFIG_TYPE=GRPC_XDS_SOTW",
    ),
    (
        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
        "read only with CONFIG_TYPE=GRPC_XDS_SOTW",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
        "read only with CONFIG_TYPE=GRPC_XDS_SOTW",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
        "read only with CONFIG_TYPE=GRPC_XDS_SOTW",
    ),
    (
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        "read only with CONFIG_TYPE=GRPC_XDS_SOTW",
    ),
    (
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        "read only with CONFIG_TYPE=GRPC_XDS_SOTW",
    ),
    (
        "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
        "read only with CONFIG_TYPE=GRPC_XDS_SOTW",
    ),
];

/// Variables Envoy Gateway sets that envoyproxy/ratelimit does not read: named when set, so the
/// reason one changes nothing is on record.
pub(super) const NOT_UPSTREAMS: &[(&str, &str)] = &[(
    "GRPC_SERVER_TLS_CA_CERT",
    "envoyproxy/ratelimit does not read it either (it reads GRPC_CLIENT_TLS_CACERT): no client certificate is required",
)];
