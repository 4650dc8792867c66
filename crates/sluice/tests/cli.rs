//! The `sluice` binary as a user runs it: config check, bad config at start, SIGTERM.

mod common;

use std::process::Command;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

const GOOD: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
const BAD: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, brust: 3}\n";

#[test]
fn config_check_exits_0_or_64_with_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("good.yaml");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&good, GOOD).expect("write");
    std::fs::write(&bad, BAD).expect("write");

    let ok = sluice()
        .args(["config", "check"])
        .arg(&good)
        .output()
        .expect("run");
    assert_eq!(ok.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("ok (1 domain, 1 rule, version"));

    let err = sluice()
        .args(["config", "check"])
        .arg(&bad)
        .output()
        .expect("run");
    assert_eq!(err.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&err.stderr);
    assert!(
        stderr.starts_with(&format!("{}:4: ", bad.display())),
        "{stderr}"
    );
    assert!(stderr.contains("brust"), "{stderr}");

    // Every sluice config shipped as an example, in deploy/examples and its directories.
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples");
    let mut checked = Vec::new();
    for dir in std::iter::once(examples.clone()).chain(
        std::fs::read_dir(&examples)
            .expect("deploy/examples")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.is_dir()),
    ) {
        for file in std::fs::read_dir(&dir).expect("dir") {
            let path = file.expect("entry").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if !(name.starts_with("sluice") && name.ends_with(".yaml")) {
                continue;
            }
            let shipped = sluice()
                .args(["config", "check"])
                .arg(&path)
                .output()
                .expect("run");
            assert_eq!(
                shipped.status.code(),
                Some(0),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&shipped.stderr)
            );
            checked.push(name.to_string());
        }
    }
    assert!(checked.len() >= 7, "found only {checked:?}");
}

#[test]
fn serve_refuses_a_bad_config_before_binding_any_port() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, BAD).expect("write");
    let out = sluice()
        .args(["serve", "--config"])
        .arg(&bad)
        .args(["--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.yaml:4: "));
}

/// Settings that passed `config check` and then broke `serve` (a panic in the heartbeat task, a
/// wrap, exit 1): now exit 64 with the line, from both.
#[test]
fn settings_that_would_fail_later_are_config_errors_at_their_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text, line, needle) in [
        (
            "url.yaml",
            "shadow_mode: false\nredis:\n  url: redis://user:hunter2@host:abc/0\n",
            3,
            "redis: url: invalid port number",
        ),
        (
            "port.yaml",
            "redis:\n  url: redis://127.0.0.1:99999\n",
            2,
            "redis: url: invalid port number",
        ),
        (
            "db.yaml",
            "redis:\n  url: redis://127.0.0.1:6379/abc\n",
            2,
            "redis: url: Invalid database number",
        ),
        (
            "heartbeat.yaml",
            "redis:\n  url: redis://127.0.0.1:1\n  heartbeat_interval: 18446744073709551616s\n",
            3,
            "longer than the maximum of 365 days",
        ),
        (
            "idle.yaml",
            "engine:\n  idle_timeout: 18000000000000s\n",
            2,
            "longer than the maximum of 365 days",
        ),
        (
            "cluster.yaml",
            "redis:\n  cluster_nodes: [redis://127.0.0.1:7000, \"redis://:pw@h:99999\"]\n",
            2,
            "cluster_nodes[1]: invalid port number",
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        let expected = format!("{}:{line}: ", path.display());
        let check = sluice()
            .args(["config", "check"])
            .arg(&path)
            .output()
            .expect("run");
        let serve = sluice()
            .args(["serve", "--config"])
            .arg(&path)
            .args(["--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
            .output()
            .expect("run");
        for out in [check, serve] {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "{name}: {stderr}");
            assert!(stderr.contains(&expected), "{name}: {stderr}");
            assert!(stderr.contains(needle), "{name}: {stderr}");
            assert!(
                !stderr.contains("hunter2"),
                "{name}: a password leaked: {stderr}"
            );
        }
    }
}

#[test]
fn version_prints_the_crate_version() {
    let out = sluice().arg("--version").output().expect("run");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        concat!("sluice ", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn sigterm_drains_and_exits_0() {
    let mut s = common::start(GOOD);
    let mut stream = std::net::TcpStream::connect(s.admin).expect("admin up");
    use std::io::{Read, Write};
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut body = String::new();
    stream.read_to_string(&mut body).expect("read");
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert_eq!(s.terminate(), Some(0));
    let logs: Vec<String> = s.stderr.try_iter().collect();
    assert!(logs.iter().any(|l| l.contains("NOT_SERVING")), "{logs:?}");
    assert!(logs.iter().any(|l| l.contains("\"stopped\"")), "{logs:?}");
}

#[test]
fn check_quota_and_rules_commands_talk_to_a_running_sluice() {
    let s = common::start(GOOD);
    let addr = s.grpc.to_string();
    let run = |args: &[&str]| {
        let out = sluice()
            .args(args)
            .args(["--addr", &addr])
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, stdout, _) = run(&["check", "--domain", "d", "-d", "k=v"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.starts_with("OK  limit: 1 per second  remaining: 0"),
        "an unnamed rule has no \"()\": {stdout}"
    );
    let (code, stdout, stderr) = run(&["check", "--domain", "d", "-d", "k=v"]);
    assert_eq!(code, Some(1), "over the limit exits 1");
    assert!(
        stdout.starts_with("OVER_LIMIT") && stderr.contains("over the limit"),
        "{stdout} {stderr}"
    );

    let (code, stdout, _) = run(&["quota", "get", "--domain", "d", "-d", "k=v", "-o", "json"]);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(
        (v["matched"].as_bool(), v["requests_per_unit"].as_u64()),
        (Some(true), Some(1))
    );
    assert!(
        v["reason"].as_str().is_some_and(|r| r.starts_with("k (")),
        "{v}"
    );

    let (_, stdout, _) = run(&["quota", "list"]);
    assert!(
        stdout.contains("k=v") && stdout.contains("1 of 1 tracked keys"),
        "{stdout}"
    );
    let (_, stdout, _) = run(&["rules", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(v["rules"][0]["path"], "k");

    let (code, _, stderr) = run(&["quota", "get", "--domain", "", "-d", "k=v"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("domain must not be empty"), "{stderr}");
    // Typos in a domain or rule name are errors, not "not limited" or "0 of 0".
    let (code, _, stderr) = run(&["quota", "get", "--domain", "D", "-d", "k=v"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("no domain \"D\" in the loaded config"),
        "{stderr}"
    );
    let (code, _, stderr) = run(&["quota", "list", "--rule", "d:kk"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("no rule \"d:kk\""), "{stderr}");
    let (code, stdout, _) = run(&["quota", "list", "--rule", "d:k"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("1 of 1 tracked keys"), "{stdout}");
    let admin = s.admin.port();
    let q = common::http_get(admin, "/quota?domain=d&k=v", &[]);
    assert_eq!(q.status, 200);
    assert!(q.body.contains("\"rule\":\"d:k\""), "{}", q.body);
    assert_eq!(common::http_get(admin, "/quota?k=v", &[]).status, 400);
    assert!(
        common::http_get(admin, "/config", &[])
            .body
            .contains("\"version\"")
    );
}

#[test]
fn worker_threads_out_of_range_exit_2_before_serving() {
    for (value, why) in [
        ("0", "0 is not in 1..=1024"),
        ("1025", "1025 is not in 1..=1024"),
        ("99999999999999999999", "number too large"),
    ] {
        let out = sluice()
            .args([
                "serve",
                "--config",
                "/nonexistent.yaml",
                "--worker-threads",
                value,
            ])
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(stderr.contains(why), "{value}: {stderr}");
    }
}

#[test]
fn quota_watch_prints_a_timed_line_per_change_only() {
    use std::io::BufRead as _;
    let s = common::start(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    );
    let addr = s.grpc.to_string();
    let mut watch = sluice()
        .args([
            "quota",
            "watch",
            "--domain",
            "d",
            "-d",
            "k=v",
            "--interval",
            "50ms",
        ])
        .args(["--addr", &addr])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("watch");
    let stdout = watch.stdout.take().expect("stdout");
    let lines = std::thread::spawn(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    // About 20 ticks before a request, 20 after: two states, so two timed lines.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let spent = sluice()
        .args(["check", "--domain", "d", "-d", "k=v", "--addr", &addr])
        .output()
        .expect("check");
    assert_eq!(spent.status.code(), Some(0));
    std::thread::sleep(std::time::Duration::from_secs(1));
    watch.kill().expect("kill");
    watch.wait().expect("wait");
    let lines = lines.join().expect("reader");
    assert_eq!(
        lines.first().map(String::as_str),
        Some("rule d:k: 2 per hour (burst 2), mode strict, store memory"),
        "{lines:?}"
    );
    let timed: Vec<(&str, &str)> = lines[1..]
        .iter()
        .map(|l| l.split_once("  ").expect("time, then the numbers"))
        .collect();
    let numbers: Vec<&str> = timed.iter().map(|(_, n)| *n).collect();
    assert_eq!(
        numbers,
        ["remaining 2.00  lease 0", "remaining 1.00  lease 0"],
        "a line per change, none for the ticks in between: {lines:?}"
    );
    for (time, _) in timed {
        assert!(
            time.len() == "2026-11-25T13:51:10.123Z".len()
                && time.ends_with('Z')
                && time.as_bytes()[10] == b'T',
            "an RFC 3339 UTC time with milliseconds: {time}"
        );
    }
}

#[test]
fn redis_down_at_start_is_said_at_once_and_quota_reads_say_unknown() {
    // Nothing listens on this port. The URL carries a password, which must never be printed.
    let port = common::free_port();
    let s = common::start(&format!(
        "redis:\n  url: redis://app:hunter2hunter2@127.0.0.1:{port}\ndomains:\n  - domain: d\n    \
         descriptors: [{{key: k, rate_limit: {{unit: second, requests_per_unit: 1}}}}]\n"
    ));
    // With no request at all (before, only failing decisions said anything, after the breaker
    // had counted them), the log names where Redis was asked and the OS's error.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let line = loop {
        let line = s
            .stderr
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .expect("a warning that Redis is not reachable");
        if line.contains("Redis is not reachable") {
            break line;
        }
    };
    assert!(
        line.contains(&format!("127.0.0.1:{port}")) && line.contains("Connection refused"),
        "{line}"
    );
    assert!(!line.contains("hunter2"), "{line}");

    let addr = s.grpc.to_string();
    let get = |json: bool| {
        let mut cmd = sluice();
        cmd.args([
            "quota", "get", "--domain", "d", "-d", "k=v", "--addr", &addr,
        ]);
        if json {
            cmd.args(["-o", "json"]);
        }
        let out = cmd.output().expect("run");
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let table = get(false);
    assert!(
        table.contains("global remaining       unknown: ")
            && table.contains("full again in          unknown")
            && table.contains("DEGRADED")
            && !table.contains("0.00"),
        "no made-up 0 while Redis is down:\n{table}"
    );
    let v: serde_json::Value = serde_json::from_str(&get(true)).expect("json");
    assert!(
        v["global_remaining"].is_null() && v["until_full_seconds"].is_null(),
        "{v}"
    );
    assert!(
        v["store_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{v}"
    );
}

#[test]
fn quota_reset_needs_the_token_and_refills_the_bucket() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("token"), "s3cret-reset-token-0123\n").expect("write");
    let yaml = format!(
        "domains:\n  - {}\nadmin:\n  allow_reset: true\n  reset_token_file: {}\n",
        GOOD.replace('\n', "\n    ").trim_end(),
        dir.path().join("token").display()
    );
    let s = common::start(&yaml);
    let addr = s.grpc.to_string();
    let run = |args: &[&str], token: &str| {
        let out = sluice()
            .args(args)
            .args(["--addr", &addr])
            .env("SLUICE_RESET_TOKEN", token)
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    assert_eq!(run(&["check", "--domain", "d", "-d", "k=v"], "").0, Some(0));
    assert_eq!(
        run(&["check", "--domain", "d", "-d", "k=v"], "").0,
        Some(1),
        "1 per second: over"
    );
    let (code, stderr) = run(
        &["quota", "reset", "--domain", "d", "-d", "k=v"],
        "wrong-token-wrong-token",
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("Unauthenticated") || stderr.contains("unauthenticated"),
        "{stderr}"
    );
    assert_eq!(
        run(
            &["quota", "reset", "--domain", "d", "-d", "k=v"],
            "s3cret-reset-token-0123"
        )
        .0,
        Some(0)
    );
    assert_eq!(
        run(&["check", "--domain", "d", "-d", "k=v"], "").0,
        Some(0),
        "full again after the reset"
    );
    let metrics = common::http_get(s.admin.port(), "/metrics", &[]).body;
    for line in [
        r#"sluice_quota_resets_total{outcome="unauthenticated"} 1"#,
        r#"sluice_quota_resets_total{outcome="ok"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
}

#[test]
fn quota_reset_is_refused_unless_enabled() {
    let s = common::start(GOOD);
    let out = sluice()
        .args([
            "quota",
            "reset",
            "--domain",
            "d",
            "-d",
            "k=v",
            "--addr",
            &s.grpc.to_string(),
        ])
        .env("SLUICE_RESET_TOKEN", "anything-anything-anything")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ResetQuota is disabled"));
}

/// A CLI command that cannot reach sluice says where it tried and why, once, and exits non-zero.
#[test]
fn an_unreachable_address_is_said_once() {
    // Nothing listens on port 1 of loopback: the connection is refused at once.
    let out = sluice()
        .args([
            "quota",
            "get",
            "--addr",
            "127.0.0.1:1",
            "--domain",
            "d",
            "-d",
            "k=v",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot reach sluice at http://127.0.0.1:1: "),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("onnection refused").count(),
        1,
        "the reason once: {stderr}"
    );
    assert!(!stderr.contains("tcp connect error"), "{stderr}");
}

/// The HTTP check port reads the request from headers only a named proxy sets (issue 41): with
/// `--check-addr`, a config without `check:` is refused before any port is bound.
#[test]
fn the_check_port_needs_the_proxy_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sluice.yaml");
    std::fs::write(
        &path,
        "domains:\n  - domain: edge\n    descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n",
    )
    .expect("write");
    let out = sluice()
        .args(["serve", "--config"])
        .arg(&path)
        .args(["--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
        .args(["--check-addr", "127.0.0.1:0"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: the HTTP check (--check-addr) needs a `check:` section naming the proxy in front",
            path.display()
        )),
        "{stderr}"
    );
}
