//! Settings sections (`engine:`, `redis:`, `admin:`, `tls:`): every error names its file and
//! line, and no number or duration can overflow, wrap or panic later.

use std::path::Path;
use std::time::Duration;

use sluice_core::config::{ConfigError, MAX_DURATION, MemReader, load_from, parse_config};

fn error(text: &str) -> ConfigError {
    parse_config(text).expect_err(text)
}

/// `(line, message contains)` of the error for `text`.
fn located(text: &str, line: u64, needle: &str) {
    let e = error(text);
    assert_eq!(e.line, line, "{text}\n=> {e}");
    assert!(e.message.contains(needle), "{text}\n=> {e}");
    assert!(
        !e.message.contains(" at line "),
        "the location is given once: {e}"
    );
}

#[test]
fn engine_errors_name_their_line() {
    located("engine:\n  max_keys: 0\n", 2, "max_keys must be at least 1");
    located(
        "shadow_mode: false\nengine: {max_lease_fraction: 2.0}\n",
        2,
        "max_lease_fraction must be in (0, 1]",
    );
    located(
        "engine:\n  max_lease_fraction: 0.5\n  lease_ttl: 0s\n",
        3,
        "must be above zero",
    );
    located("engine:\n  lease_horizon: 1.5s\n", 2, "unknown unit");
    for bad in ["0", "1000001", "18446744073709551615"] {
        located(
            &format!("engine:\n  starved_calls_per_sec: {bad}\n"),
            2,
            &format!("starved_calls_per_sec must be in [1, 1000000], not {bad}"),
        );
    }
    let ok = parse_config("engine:\n  starved_calls_per_sec: 1000000\n").expect("the most");
    assert_eq!(ok.engine.starved_calls_per_sec, 1_000_000);
    for bad in ["999ms", "61m", "2h"] {
        located(
            &format!("engine:\n  rate_lease_ttl: {bad}\n"),
            2,
            &format!("rate_lease_ttl must be from 1s to 1h, not {bad}"),
        );
    }
    located(
        "engine:\n  rate_lease_ttl: 0s\n",
        2,
        "rate_lease_ttl must be from 1s to 1h, not 0",
    );
    for (text, ttl) in [("1s", 1), ("10s", 10), ("1h", 3_600)] {
        let ok = parse_config(&format!("engine:\n  rate_lease_ttl: {text}\n")).expect(text);
        assert_eq!(
            ok.engine.rate_lease_ttl.map(|d| d.0),
            Some(std::time::Duration::from_secs(ttl))
        );
    }
    let on = parse_config("engine: {}\n").expect("defaults");
    assert_eq!(
        on.engine.rate_lease_ttl.map(|d| d.0),
        Some(std::time::Duration::from_secs(10)),
        "on unless set"
    );
    for off in ["off", "\" off \""] {
        let config = parse_config(&format!("engine:\n  rate_lease_ttl: {off}\n")).expect(off);
        assert!(
            config.engine.rate_lease_ttl.is_none(),
            "off when set so: {off}"
        );
    }
    located(
        "engine:\n  rate_lease_ttl: Off\n",
        2,
        "rate_lease_ttl is `off` or a duration: duration 'Off' must start with a whole number",
    );
}

/// Durations that overflowed later (a panic in the heartbeat task, a wrap to 0.45 s) are errors.
#[test]
fn durations_that_would_overflow_are_errors_where_written() {
    located(
        "redis:\n  url: redis://127.0.0.1:6379\n  heartbeat_interval: 18446744073709551615s\n",
        3,
        "longer than the maximum of 365 days",
    );
    located(
        "engine:\n  idle_timeout: 18000000000000s\n",
        2,
        "longer than the maximum of 365 days",
    );
    located(
        "engine:\n  idle_timeout: 307445734561825861m\n",
        2,
        "longer than the maximum of 365 days",
    );
    let ok = parse_config("engine:\n  idle_timeout: 8760h\n").expect("365 days is allowed");
    assert_eq!(ok.engine.idle_timeout.0, MAX_DURATION);
    let micros = u64::try_from(MAX_DURATION.as_micros()).expect("fits");
    assert!(
        micros.checked_mul(3).is_some(),
        "3 × the longest duration still fits"
    );
}

#[test]
fn redis_errors_name_their_line() {
    located(
        "shadow_mode: false\nredis:\n  url: redis://a:1\n  cluster_nodes: [redis://b:2]\n",
        3,
        "give one of `url`, `cluster_nodes` and `sentinel`",
    );
    located("redis:\n  url: http://a:1\n", 2, "must start with redis://");
    located(
        "redis:\n  url: redis://a:1\n  breaker_failures: 0\n",
        3,
        "breaker_failures must be at least 1",
    );
    located(
        "redis:\n  url: redis://a:1\n  password_env: SLUICE_TEST_UNSET_VARIABLE\n",
        2,
        "SLUICE_TEST_UNSET_VARIABLE, which is not set",
    );
    located(
        "redis:\n  url: redis://a:1\n  timeout: 0ms\n",
        3,
        "must be above zero",
    );
    // Sentinel: a master's name (a URL carries credentials, TLS and a database, not a port).
    let sentinel = |master: &str, nodes: &str| {
        format!("redis:\n  sentinel:\n    master: {master}\n    nodes: [{nodes}]\n")
    };
    for (master, nodes, why) in [
        ("m", "", "`nodes` lists no sentinel"),
        (
            "m",
            "redis://s:1, rediss://t:1",
            "mixes redis:// and rediss://",
        ),
        ("m", "http://s:1", "must start with redis://"),
        ("redis://m:6379", "redis://s:1", "no port"),
        (
            "'redis://u:p@'",
            "redis://s:1",
            "the URL's host is the master's name",
        ),
        ("'http://m'", "redis://s:1", "a name or a redis://"),
        ("''", "redis://s:1", "the name the sentinels monitor"),
    ] {
        located(&sentinel(master, nodes), 2, why);
    }
    located(
        "redis:\n  url: redis://a:1\n  sentinel: {master: m, nodes: [redis://s:1]}\n",
        2,
        "give one of `url`, `cluster_nodes` and `sentinel`",
    );
    for (master, nodes) in [
        ("mymaster", "redis://s:26379, redis://t:26379"),
        ("'rediss://user:pass@mymaster/2'", "rediss://:pw@s:26379"),
    ] {
        let config = parse_config(&sentinel(master, nodes)).expect("valid");
        let got = config.redis.and_then(|r| r.sentinel).expect("a sentinel");
        assert_eq!(got.master, master.trim_matches('\''));
        assert_eq!(got.nodes.len(), nodes.split(',').count());
    }
    // A key prefix: a `{` would make Redis Cluster hash the prefix instead of each bucket's tag.
    for (prefix, why) in [
        ("'fleet{a}:'", "no `{` or `}`"),
        ("''", "empty"),
        ("'a b'", "' ' is not visible ASCII"),
        (&format!("'{}'", "p".repeat(65)), "65 bytes, at most 64"),
    ] {
        located(
            &format!("redis:\n  url: redis://a:1\n  key_prefix: {prefix}\n"),
            2,
            &format!("key_prefix: {why}"),
        );
    }
    let config =
        parse_config("redis:\n  url: redis://a:1\n  key_prefix: 'fleet-a:'\n").expect("valid");
    assert_eq!(
        config.redis.and_then(|r| r.key_prefix).as_deref(),
        Some("fleet-a:")
    );
    // A call waits for its batch within the timeout: a wait as long as the timeout is refused.
    located(
        "redis:\n  url: redis://a:1\n  timeout: 20ms\n  batch_linger: 20ms\n",
        2,
        "batch_linger (20ms) must be shorter than timeout (20ms)",
    );
    located(
        "redis:\n  url: redis://a:1\n  batch_min_wait: 1s\n",
        2,
        "batch_min_wait (1s) must be shorter than timeout (20ms)",
    );
    located(
        "redis:\n  url: redis://a:1\n  batch_max: 0\n",
        3,
        "batch_max must be from 1 to 1024",
    );
    located(
        "redis:\n  url: redis://a:1\n  batch_max: 1025\n",
        3,
        "batch_max must be from 1 to 1024",
    );
    let ok = parse_config("redis:\n  url: redis://a:1\n  batch_min_wait: 5ms\n").expect("valid");
    let redis = ok.redis.expect("redis");
    assert_eq!(redis.batch_min_wait.map(|d| d.0.as_millis()), Some(5));
    assert_eq!((redis.batch_linger.0.as_millis(), redis.batch_max), (1, 64));
}

#[test]
fn a_url_with_a_password_is_never_echoed() {
    let e = error("redis:\n  url: http://user:hunter2@a:1\n");
    assert!(!e.to_string().contains("hunter2"), "{e}");
}

#[test]
fn admin_and_tls_errors_name_their_line() {
    located(
        "shadow_mode: false\nadmin:\n  allow_reset: true\n",
        3,
        "exactly one of reset_token_env or reset_token_file",
    );
    located(
        "\n\ntls:\n  cert_file: a.pem\n  key_file: b.pem\n",
        4,
        "tls.cert_file a.pem",
    );
}

/// Secrets and files come from the source, resolved next to the config file.
#[test]
fn secrets_are_read_through_the_source() {
    let pem = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n";
    let config = "admin:\n  allow_reset: true\n  reset_token_env: TOKEN\ntls:\n  cert_file: c.pem\n  key_file: k.pem\n";
    let source = MemReader::new()
        .file("etc/sluice.yaml", config)
        .file("etc/c.pem", pem)
        .file("etc/k.pem", pem)
        .var("TOKEN", "0123456789abcdef-secret");
    let loaded = load_from(&source, Path::new("etc/sluice.yaml")).expect("loads");
    assert!(
        loaded
            .reset_token
            .as_ref()
            .is_some_and(|t| t.matches("0123456789abcdef-secret"))
    );
    assert!(!format!("{loaded:?}").contains("secret"), "never printed");
    assert_eq!(
        loaded.tls.as_ref().map(|t| t.cert_pem.len()),
        Some(pem.len())
    );
    let short = source.var("TOKEN", "short");
    let e = load_from(&short, Path::new("etc/sluice.yaml")).expect_err("short token");
    assert_eq!(e.line, 2, "{e}");
}

#[test]
fn defaults_hold_without_sections() {
    let c = parse_config("shadow_mode: false\n").expect("loads");
    assert_eq!(c.engine.max_keys, 1_000_000);
    assert_eq!(c.engine.lease_ttl.0, Duration::from_secs(1));
    assert!(c.redis.is_none() && c.tls.is_none() && c.reset_token.is_none());
}
