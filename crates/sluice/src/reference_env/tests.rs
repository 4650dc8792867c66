use std::collections::{BTreeMap, BTreeSet};

use std::time::Duration;

use super::*;
use crate::xds::XdsTls;

/// Every variable upstream's `src/settings/settings.go` reads (main at f2fb157: 114).
const UPSTREAM: &[&str] = &[
    "BACKEND_TYPE",
    "CACHE_KEY_PREFIX",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_TYPE",
    "DEBUG_HOST",
    "DEBUG_PORT",
    "DISABLE_STATS",
    "EXPIRATION_JITTER_MAX_SECONDS",
    "EXTRA_TAGS",
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
    "GRPC_HOST",
    "GRPC_MAX_CONNECTION_AGE",
    "GRPC_MAX_CONNECTION_AGE_GRACE",
    "GRPC_PORT",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_SERVER_USE_TLS",
    "GRPC_UDS",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "HOST",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LOCAL_CACHE_SIZE_IN_BYTES",
    "LOG_FORMAT",
    "LOG_LEVEL",
    "MEMCACHE_HOST_PORT",
    "MEMCACHE_MAX_IDLE_CONNS",
    "MEMCACHE_SRV",
    "MEMCACHE_SRV_REFRESH",
    "MEMCACHE_TLS",
    "MEMCACHE_TLS_CACERT",
    "MEMCACHE_TLS_CLIENT_CERT",
    "MEMCACHE_TLS_CLIENT_KEY",
    "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
    "MERGE_DOMAIN_CONFIG",
    "NEAR_LIMIT_RATIO",
    "PORT",
    "PROMETHEUS_ADDR",
    "PROMETHEUS_MAPPER_YAML",
    "PROMETHEUS_PATH",
    "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    "QUOTA_MODE",
    "REDIS_AUTH",
    "REDIS_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
    "REDIS_PERSECOND",
    "REDIS_PERSECOND_AUTH",
    "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_PERSECOND_PIPELINE_LIMIT",
    "REDIS_PERSECOND_PIPELINE_WINDOW",
    "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_PERSECOND_POOL_SIZE",
    "REDIS_PERSECOND_SENTINEL_AUTH",
    "REDIS_PERSECOND_SOCKET_TYPE",
    "REDIS_PERSECOND_TIMEOUT",
    "REDIS_PERSECOND_TLS",
    "REDIS_PERSECOND_TYPE",
    "REDIS_PERSECOND_URL",
    "REDIS_PIPELINE_LIMIT",
    "REDIS_PIPELINE_WINDOW",
    "REDIS_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_POOL_SIZE",
    "REDIS_SENTINEL_AUTH",
    "REDIS_SOCKET_TYPE",
    "REDIS_STARTUP_INITIAL_INTERVAL",
    "REDIS_STARTUP_MAX_ELAPSED_TIME",
    "REDIS_STARTUP_MAX_INTERVAL",
    "REDIS_TIMEOUT",
    "REDIS_TLS",
    "REDIS_TLS_CACERT",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_TYPE",
    "REDIS_URL",
    "RESPONSE_DYNAMIC_METADATA",
    "RUNTIME_APPDIRECTORY",
    "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_WATCH_ROOT",
    "SHADOW_MODE",
    "STATSD_HOST",
    "STATSD_PORT",
    "STATS_FLUSH_INTERVAL",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "TRACING_ENABLED",
    "TRACING_EXPORTER_PROTOCOL",
    "TRACING_SAMPLING_RATE",
    "TRACING_SERVICE_INSTANCE_ID",
    "TRACING_SERVICE_NAME",
    "TRACING_SERVICE_NAMESPACE",
    "USE_DOG_STATSD",
    "USE_DOG_STATSD_MOGRIFIERS",
    "USE_PROMETHEUS",
    "USE_STATSD",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_JITTER",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
];

/// The variables [`read`] acts on itself.
const READ: &[&str] = &[
    "HOST",
    "PORT",
    "GRPC_HOST",
    "GRPC_PORT",
    "GRPC_UDS",
    "GRPC_SERVER_USE_TLS",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
    "LOG_LEVEL",
    "LOG_FORMAT",
    "CONFIG_TYPE",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "BACKEND_TYPE",
    "CACHE_KEY_PREFIX",
    "SHADOW_MODE",
    "QUOTA_MODE",
    "RESPONSE_DYNAMIC_METADATA",
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_URL",
    "REDIS_AUTH",
    "REDIS_SENTINEL_AUTH",
    "REDIS_TLS",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "REDIS_TLS_CACERT",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_TIMEOUT",
];

fn env(vars: &[(&str, &str)]) -> Result<FromEnv, EnvError> {
    let vars: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    read(&|name| vars.get(name).cloned())
}

fn refused(vars: &[(&str, &str)]) -> String {
    env(vars).expect_err("refused").0
}

/// What Envoy Gateway's rendered ratelimit Deployment sets
/// (`deploy/examples/migrating/envoy-gateway-ratelimit.yaml`), with files instead of xDS.
const ENVOY_GATEWAY: &[(&str, &str)] = &[
    ("RUNTIME_ROOT", "/data"),
    ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
    ("RUNTIME_WATCH_ROOT", "false"),
    ("LOG_LEVEL", "info"),
    ("USE_STATSD", "true"),
    ("STATSD_PORT", "9125"),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
    ("REDIS_SOCKET_TYPE", "tcp"),
    ("REDIS_URL", "redis.redis-system.svc.cluster.local:6379"),
    ("GRPC_SERVER_USE_TLS", "true"),
    ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
    ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
    ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
];

#[test]
fn every_upstream_variable_is_read_or_named() {
    let upstream: BTreeSet<&str> = UPSTREAM.iter().copied().collect();
    assert_eq!(upstream.len(), 114);
    // Named always, or named with files and read with xDS (XDS_ONLY).
    let named: BTreeSet<&str> = notes::NOT_APPLICABLE
        .iter()
        .chain(notes::XDS_ONLY)
        .map(|(n, _)| *n)
        .collect();
    let read: BTreeSet<&str> = READ.iter().copied().collect();
    assert_eq!(
        named.len(),
        notes::NOT_APPLICABLE.len() + notes::XDS_ONLY.len(),
        "a variable named twice"
    );
    assert!(
        named.is_disjoint(&read),
        "{:?}",
        named.intersection(&read).collect::<Vec<_>>()
    );
    let covered: BTreeSet<&str> = named.union(&read).copied().collect();
    assert_eq!(covered, upstream);
    for (name, _) in notes::NOT_UPSTREAMS {
        assert!(!upstream.contains(name), "{name} is upstream's");
    }
}

#[test]
fn envoy_gateways_environment_is_a_config() {
    let from = env(ENVOY_GATEWAY).expect("valid");
    assert_eq!(
        from.limits,
        Limits::Files(PathBuf::from("/data/ratelimit/config"))
    );
    assert_eq!(from.grpc_addr, "0.0.0.0:8081".parse().expect("addr"));
    assert_eq!(from.admin_addr, "0.0.0.0:8080".parse().expect("addr"));
    assert_eq!((from.log_filter, from.json_logs), (Some("info"), false));
    assert_eq!(
        from.yaml,
        "# envoyproxy/ratelimit's environment, as sluice reads it\n\
         tls:\n  cert_file: \"/certs/tls.crt\"\n  key_file: \"/certs/tls.key\"\n\
         redis:\n  url: \"redis://redis.redis-system.svc.cluster.local:6379\"\n"
    );
    let named: Vec<&str> = from.notes.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        named,
        [
            "USE_STATSD",
            "STATSD_PORT",
            "RUNTIME_WATCH_ROOT",
            "RUNTIME_IGNOREDOTFILES",
            "FORCE_START_WITHOUT_INITIAL_CONFIG",
            "GRPC_SERVER_TLS_CA_CERT"
        ]
    );
    assert!(
        from.with_files(Path::new("/data/ratelimit/config"))
            .ends_with("include: [\"/data/ratelimit/config\"]\n")
    );
    // Envoy Gateway's own: limits over xDS, with mutual TLS to its management server.
    let mut xds = ENVOY_GATEWAY.to_vec();
    xds.extend([
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
    ]);
    let from = env(&xds).expect("valid");
    let Limits::Xds(settings) = &from.limits else {
        panic!("{:?}", from.limits)
    };
    assert_eq!(
        *settings,
        XdsSettings {
            server: "envoy-gateway:18001".into(),
            node_id: "envoy-ratelimit".into(),
            tls: Some(XdsTls {
                ca: Some("/certs/ca.crt".into()),
                identity: Some(("/certs/tls.crt".into(), "/certs/tls.key".into())),
                server_name: None,
            }),
            backoff: (Duration::from_secs(10), Duration::from_secs(60)),
            max_message: 4 << 20,
            force_start: true,
        }
    );
    // FORCE_START_WITHOUT_INITIAL_CONFIG is read now: the statsd and runtime ones, and the CA
    // variable upstream does not read either, are named.
    assert_eq!(from.notes.len(), 5, "{:?}", from.notes);
}

#[test]
fn nothing_set_is_upstreams_defaults_on_the_embedded_store() {
    let from = env(&[]).expect("valid");
    assert_eq!(
        from.limits,
        Limits::Files(PathBuf::from("/srv/runtime_data/current/config"))
    );
    assert_eq!(from.grpc_addr, "0.0.0.0:8081".parse().expect("addr"));
    assert!(!from.yaml.contains("redis:"));
    assert_eq!(from.notes.len(), 1);
    assert_eq!(from.notes[0].0, "REDIS_URL");
    // Set to the empty string is unset.
    let from = env(&[("REDIS_URL", ""), ("GRPC_PORT", "")]).expect("valid");
    assert_eq!(from.grpc_addr.port(), 8081);
}

fn redis_yaml(vars: &[(&str, &str)]) -> String {
    let yaml = env(vars).expect("valid").yaml;
    yaml[yaml.find("redis:").expect("a redis section")..].to_string()
}

#[test]
fn redis_addresses_in_each_form_upstream_takes() {
    let tcp = [("REDIS_SOCKET_TYPE", "tcp")];
    let with = |more: &[(&'static str, &'static str)]| {
        let mut v = tcp.to_vec();
        v.extend_from_slice(more);
        redis_yaml(&v)
    };
    assert_eq!(
        with(&[("REDIS_URL", "r:6379")]),
        "redis:\n  url: \"redis://r:6379\"\n"
    );
    // A redis:// URL works with any socket type (upstream's client parses it whole).
    assert_eq!(
        redis_yaml(&[("REDIS_URL", "redis://u:p@r:6379/2")]),
        "redis:\n  url: \"redis://u:p@r:6379/2\"\n"
    );
    // REDIS_AUTH wins over the URL's credentials; its parts are percent-encoded.
    assert_eq!(
        with(&[
            ("REDIS_URL", "redis://old@r:6379"),
            ("REDIS_AUTH", "app:p@ss:w/rd")
        ]),
        "redis:\n  url: \"redis://app:p%40ss%3Aw%2Frd@r:6379\"\n"
    );
    assert_eq!(
        with(&[("REDIS_URL", "r:6379"), ("REDIS_AUTH", "secret")]),
        "redis:\n  url: \"redis://:secret@r:6379\"\n"
    );
    assert_eq!(
        with(&[
            ("REDIS_URL", "r:6380"),
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_CACERT", "/ca.pem")
        ]),
        "redis:\n  url: \"rediss://r:6380\"\n  tls_ca_file: \"/ca.pem\"\n"
    );
    assert_eq!(
        redis_yaml(&[
            ("REDIS_TYPE", "cluster"),
            ("REDIS_URL", "a:7000, b:7000,c:7000")
        ]),
        "redis:\n  cluster_nodes: [\"redis://a:7000\", \"redis://b:7000\", \"redis://c:7000\"]\n"
    );
    // Sentinel: the master's name, then the sentinels; REDIS_AUTH is the master's,
    // REDIS_SENTINEL_AUTH the sentinels', REDIS_TLS both's (the socket type does not apply).
    let sentinel = redis_yaml(&[
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "mymaster,s1:26379, s2:26379"),
        ("REDIS_AUTH", "app:pw"),
        ("REDIS_SENTINEL_AUTH", "spw"),
        ("REDIS_TLS", "true"),
    ]);
    assert_eq!(
        sentinel,
        "redis:\n  sentinel:\n    master: \"rediss://app:pw@mymaster\"\n    nodes: [\"rediss://:spw@s1:26379\", \"rediss://:spw@s2:26379\"]\n"
    );
    let loaded = sluice_core::config::parse_config(&sentinel).expect("loads");
    let got = loaded.redis.and_then(|r| r.sentinel).expect("sentinel");
    assert_eq!(got.nodes.len(), 2);
    assert_eq!(
        with(&[
            ("REDIS_URL", "r:6379"),
            ("REDIS_TIMEOUT", "2s"),
            ("CACHE_KEY_PREFIX", "fleet-a_")
        ]),
        "redis:\n  url: \"redis://r:6379\"\n  connect_timeout: 2000ms\n  key_prefix: \"fleet-a_\"\n"
    );
}

#[test]
fn what_cannot_work_stops_the_start_naming_the_variable() {
    for (vars, starts) in [
        (
            vec![("REDIS_URL", "/var/run/nutcracker/ratelimit.sock")],
            "REDIS_SOCKET_TYPE: \"unix\"",
        ),
        (
            vec![("REDIS_TYPE", "sentinel"), ("REDIS_URL", "s1:26379")],
            "REDIS_URL: with REDIS_TYPE=SENTINEL, the master's name",
        ),
        (
            vec![
                ("REDIS_TYPE", "sentinel"),
                ("REDIS_URL", "user@master,s1:26379"),
            ],
            "REDIS_URL: with REDIS_TYPE=SENTINEL, the master's name",
        ),
        (
            vec![("REDIS_TYPE", "sentinel"), ("REDIS_URL", "mymaster")],
            "REDIS_URL: with REDIS_TYPE=SENTINEL, the master's name",
        ),
        (
            vec![("REDIS_TYPE", "ring"), ("REDIS_URL", "r:1")],
            "REDIS_TYPE: \"RING\"",
        ),
        (
            vec![("BACKEND_TYPE", "memcache")],
            "BACKEND_TYPE: \"memcache\"",
        ),
        (
            vec![
                ("REDIS_URL", "redis://r:1"),
                ("REDIS_TLS_CLIENT_CERT", "/c.pem"),
            ],
            "REDIS_TLS_CLIENT_CERT:",
        ),
        (
            vec![
                ("REDIS_URL", "redis://r:1"),
                ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
            ],
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION:",
        ),
        (
            vec![("REDIS_URL", "redis://r:1"), ("CACHE_KEY_PREFIX", "{a}")],
            "CACHE_KEY_PREFIX: no `{`",
        ),
        (
            vec![("REDIS_URL", "http://r:1")],
            "REDIS_URL: a http:// address",
        ),
        (
            vec![("GRPC_PORT", "80a")],
            "GRPC_PORT: \"80a\" is not a port",
        ),
        (
            vec![("GRPC_PORT", "70000")],
            "GRPC_PORT: \"70000\" is not a port",
        ),
        (
            vec![("HOST", "localhost")],
            "HOST: \"localhost\" is not an IP address",
        ),
        (
            vec![("SHADOW_MODE", "yes")],
            "SHADOW_MODE: \"yes\" is not a boolean",
        ),
        (vec![("LOG_LEVEL", "loud")], "LOG_LEVEL: \"loud\""),
        (vec![("GRPC_UDS", "/tmp/rl.sock")], "GRPC_UDS:"),
        (
            vec![("GRPC_CLIENT_TLS_SAN", "envoy")],
            "GRPC_CLIENT_TLS_SAN:",
        ),
        (
            vec![("GRPC_SERVER_USE_TLS", "true")],
            "GRPC_SERVER_USE_TLS: needs",
        ),
        (
            vec![("RUNTIME_ROOT", "/data/*")],
            "RUNTIME_ROOT, RUNTIME_SUBDIRECTORY",
        ),
        (vec![("CONFIG_TYPE", "file")], "CONFIG_TYPE: \"file\""),
        (
            vec![
                ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ],
            "CONFIG_GRPC_XDS_SERVER_USE_TLS: needs",
        ),
        (
            vec![
                ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "a:b"),
            ],
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS:",
        ),
    ] {
        let why = refused(&vars);
        assert!(why.starts_with(starts), "{vars:?}: {why}");
    }
}

#[test]
fn modes_and_logging() {
    let from = env(&[
        ("SHADOW_MODE", "1"),
        ("QUOTA_MODE", "True"),
        ("RESPONSE_DYNAMIC_METADATA", "t"),
        ("LOG_LEVEL", "WARNING"),
        ("LOG_FORMAT", "JSON"),
        ("GRPC_HOST", "::1"),
        ("GRPC_PORT", "9081"),
        ("RUNTIME_APPDIRECTORY", "limits"),
    ])
    .expect("valid");
    assert!(
        from.yaml.contains(
            "\nshadow_mode: true\nquota_mode: true\nresponse: {rls_dynamic_metadata: true}\n"
        ),
        "{}",
        from.yaml
    );
    assert_eq!((from.log_filter, from.json_logs), (Some("warn"), true));
    assert_eq!(from.grpc_addr, "[::1]:9081".parse().expect("addr"));
    assert_eq!(
        from.limits,
        Limits::Files(PathBuf::from("/srv/runtime_data/current/limits"))
    );
}

#[test]
fn limit_headers_with_upstreams_names_or_the_ones_given() {
    let yaml = |vars: &[(&str, &str)]| env(vars).expect("valid").yaml;
    let response = |y: &str| -> Option<sluice_core::config::model::RlsHeaders> {
        let loaded = sluice_core::config::parse_config(y);
        loaded.expect("loads").response.rls_headers
    };
    let on = yaml(&[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")]);
    assert!(on.contains("\nresponse: {rls_headers: {}}\n"), "{on}");
    assert_eq!(response(&on), Some(Default::default()));
    let named = yaml(&[
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("RESPONSE_DYNAMIC_METADATA", "true"),
        ("LIMIT_REMAINING_HEADER", "X-Left"),
    ]);
    let got = response(&named).expect("on");
    assert_eq!(
        (got.limit.as_str(), got.remaining.as_str()),
        ("RateLimit-Limit", "X-Left")
    );
    assert!(
        named.contains(
            "response: {rls_dynamic_metadata: true, rls_headers: {remaining: \"X-Left\"}}"
        ),
        "{named}"
    );
    // A name given while the headers are off does nothing, as upstream: named at start.
    let off = env(&[("LIMIT_RESET_HEADER", "X-Reset")]).expect("valid");
    assert!(!off.yaml.contains("rls_headers"), "{}", off.yaml);
    assert!(
        off.notes
            .iter()
            .any(|(var, _)| *var == "LIMIT_RESET_HEADER"),
        "{:?}",
        off.notes
    );
    // A name Envoy cannot take stops the start, naming the variable.
    for (name, why) in [
        ("a b", "is not a header name"),
        ("Content-Length", "frames the response"),
    ] {
        let e = refused(&[
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_LIMIT_HEADER", name),
        ]);
        assert!(
            e.starts_with("LIMIT_LIMIT_HEADER: ") && e.contains(why),
            "{e}"
        );
    }
}
