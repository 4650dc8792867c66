//! `deploy/examples/{nginx,caddy,traefik}` end to end, as shipped: a real proxy in front of a
//! stand-in API, asking sluice's HTTP check (`--check-addr`) with the API-key tiers of the Envoy
//! example. The files are used unchanged but for their ports (and nginx's pid file); every proxy
//! runs the same scenario and answers the client what a user of that proxy can expect.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{HttpResponse, free_port, http_get};
use sluice_testkit::process::Sluice;

/// The proxies with an example.
#[derive(Clone, Copy, PartialEq)]
enum Proxy {
    Nginx,
    Caddy,
    Traefik,
}

impl Proxy {
    fn dir(self) -> &'static str {
        match self {
            Proxy::Nginx => "nginx",
            Proxy::Caddy => "caddy",
            Proxy::Traefik => "traefik",
        }
    }

    /// The proxy's binary: `SLUICE_<NAME>_BIN`, else `.tools/bin/<name>` (scripts/setup.sh
    /// installs Traefik there), else `<name>` on PATH (nginx and Caddy from Debian's packages).
    fn binary(self) -> PathBuf {
        let name = self.dir();
        if let Ok(p) = std::env::var(format!("SLUICE_{}_BIN", name.to_uppercase())) {
            return PathBuf::from(p);
        }
        let local = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../.tools/bin")
            .join(name);
        if local.exists() { local } else { name.into() }
    }

    /// Whether the client gets sluice's RateLimit headers on an allowed request: Traefik can
    /// only pass them on to the API (`authResponseHeaders`).
    fn headers_on_allowed(self) -> bool {
        self != Proxy::Traefik
    }
}

/// A proxy process, stopped when dropped.
struct Running(Child);

impl Drop for Running {
    /// A graceful stop (SIGTERM), which stops nginx's workers too: SIGKILL would leave them
    /// running, orphaned.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Stack {
    proxy: Proxy,
    http: u16,
    sluice: Sluice,
    _proxy: Running,
    dir: tempfile::TempDir,
}

/// `text` with each of `pairs`' first strings (each must be present) replaced by the second.
fn replace_all(text: &str, pairs: &[(&str, String)]) -> String {
    pairs.iter().fold(text.to_string(), |t, (from, to)| {
        assert!(t.contains(from), "the example has no {from:?}");
        t.replace(from, to)
    })
}

/// A stand-in API on `port` for the proxies whose example has none (Traefik): answers `ok` and
/// echoes the RateLimit headers it was sent as `x-api-saw-ratelimit`.
fn stand_in_api(port: u16) {
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the stand-in API");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(&stream);
                loop {
                    let mut saw = String::new();
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if line.to_ascii_lowercase().starts_with("ratelimit:") {
                            saw = line["ratelimit:".len()..].trim().to_string();
                        }
                    }
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nx-api-saw-ratelimit: {saw}\r\n\r\nok\n"
                    );
                    if (&stream).write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
}

fn stack(proxy: Proxy) -> Stack {
    let dir = tempfile::tempdir().expect("tempdir");
    let example = |name: &str| common::example(proxy.dir(), name);
    for name in ["sluice.yaml", "tiers.yaml"] {
        std::fs::write(dir.path().join(name), example(name)).expect("write");
    }
    let check = free_port();
    let sluice = Sluice::start_path(
        common::bin(),
        &dir.path().join("sluice.yaml"),
        &["--check-addr", &format!("127.0.0.1:{check}")],
    );
    let (http, api) = (free_port(), free_port());
    // The shipped addresses: sluice's check, the proxy's listener, the API.
    let check_at = ("127.0.0.1:8082", format!("127.0.0.1:{check}"));
    let http_at = ("127.0.0.1:8000", format!("127.0.0.1:{http}"));
    let api_at = ("127.0.0.1:9000", format!("127.0.0.1:{api}"));
    let write = |name: &str, pairs: &[(&str, String)]| {
        let text = replace_all(&example(name), pairs);
        std::fs::write(dir.path().join(name), text).expect("write");
        dir.path().join(name).display().to_string()
    };
    let args: Vec<String> = match proxy {
        Proxy::Nginx => {
            let d = dir.path().display();
            let conf = write(
                "nginx.conf",
                &[
                    check_at,
                    http_at,
                    api_at,
                    (
                        "pid /tmp/sluice-nginx-example.pid;",
                        format!("pid {d}/nginx.pid;"),
                    ),
                    ("error_log stderr warn;", "error_log error.log warn;".into()),
                ],
            );
            let d = d.to_string();
            vec![
                "-p".into(),
                d.clone(),
                "-c".into(),
                conf,
                "-e".into(),
                format!("{d}/error.log"),
            ]
        }
        Proxy::Caddy => {
            let conf = write(
                "Caddyfile",
                &[
                    check_at,
                    api_at,
                    (":8000 {", format!(":{http} {{")),
                    (":9000 {", format!(":{api} {{")),
                ],
            );
            ["run", "--adapter", "caddyfile", "--config", &conf]
                .map(String::from)
                .to_vec()
        }
        Proxy::Traefik => {
            let conf = write("traefik.yaml", &[http_at]);
            write("dynamic.yaml", &[check_at, api_at]);
            stand_in_api(api);
            vec![format!("--configFile={conf}")]
        }
    };
    let bin = proxy.binary();
    let log = std::fs::File::create(dir.path().join("proxy.log")).expect("log");
    let child = Command::new(&bin)
        .args(&args)
        .current_dir(dir.path())
        // Caddy keeps its state under HOME/XDG dirs: the test's own.
        .env("XDG_DATA_HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        // Not the test's own pipes: a worker holding them would keep the test run open.
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/setup.sh installs nginx-light, caddy and traefik)",
                bin.display()
            )
        });
    let running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    // Listening is not enough for Traefik (routes load after): wait for a routed answer.
    while !std::net::TcpStream::connect(("127.0.0.1", http)).is_ok_and(|_| {
        http_get(http, "/health-of-the-route", &[("x-api-key", "warm-up")]).status != 404
    }) {
        assert!(
            Instant::now() < deadline,
            "{} did not answer within 20 s: {}",
            proxy.dir(),
            std::fs::read_to_string(dir.path().join("proxy.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Stack {
        proxy,
        http,
        sluice,
        _proxy: running,
        dir,
    }
}

impl Stack {
    fn get(&self, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
        http_get(self.http, path, headers)
    }

    /// The address keys sluice tracks (`sluice quota list`).
    fn addresses(&self) -> Vec<String> {
        let out = Command::new(common::bin())
            .args([
                "quota",
                "list",
                "--addr",
                &format!("http://{}", self.sluice.grpc),
            ])
            .output()
            .expect("sluice quota list");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter(|w| w.starts_with("remote_address="))
            .map(str::to_string)
            .collect()
    }
}

/// The tiers through `proxy`: 5 requests a second for an unknown key, then 429 with
/// `Retry-After` and problem+json; a premium key unaffected; the per-minute limit holds; a
/// client's own X-Forwarded-For does not change the address it is counted under.
fn tiers_through(proxy: Proxy) {
    let s = stack(proxy);
    common::next_second();
    // A key not in tiers.yaml is basic: 5 a second (and 20 a minute), whichever way it is sent.
    for i in 0..5 {
        let spoofed = format!("10.9.9.{i}");
        let ok = s.get(
            "/v1/items?api_key=k-new",
            &[("x-forwarded-for", spoofed.as_str())],
        );
        assert_eq!(ok.status, 200, "{}: request {i}: {ok:?}", proxy.dir());
        assert_eq!(ok.body, "ok\n");
        let policy = if s.proxy.headers_on_allowed() {
            assert!(ok.headers.contains_key("ratelimit"), "{ok:?}");
            ok.headers
                .get("ratelimit-policy")
                .expect("RateLimit-Policy")
        } else {
            // The API got them.
            ok.headers
                .get("x-api-saw-ratelimit")
                .expect("the API's echo")
        };
        assert!(
            policy.contains("\"basic_per_second\";"),
            "{}: {policy}",
            proxy.dir()
        );
    }
    let denied = s.get("/v1/items", &[("x-api-key", "k-new")]);
    assert_eq!(denied.status, 429, "{}: {denied:?}", proxy.dir());
    assert_eq!(
        denied.headers.get("retry-after").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        denied.headers.get("content-type").map(String::as_str),
        Some("application/problem+json")
    );
    for h in ["ratelimit-policy", "ratelimit"] {
        assert!(
            denied.headers.contains_key(h),
            "{}: {denied:?}",
            proxy.dir()
        );
    }
    assert!(denied.body.contains("Too Many Requests"), "{denied:?}");
    // A premium key (tiers.yaml) in the same second: its own limits, 100 a second.
    let premium = s.get("/v1/items", &[("authorization", "Bearer key-premium-0001")]);
    assert_eq!(premium.status, 200, "{premium:?}");
    // Whatever X-Forwarded-For the client sent, it was counted as the address the proxy saw.
    assert_eq!(
        s.addresses(),
        ["remote_address=127.0.0.1"],
        "{}",
        proxy.dir()
    );
    // The per-minute limit holds when the per-second one allows: 20 a minute for basic keys
    // (a token bucket: 20, and one more every 3 s since the first request).
    let started = Instant::now();
    let mut passed = 5;
    for _ in 0..4 {
        common::next_second();
        for _ in 0..5 {
            passed += usize::from(s.get("/", &[("x-api-key", "k-new")]).status == 200);
        }
    }
    let most = 20 + (started.elapsed().as_secs_f64() / 3.0).ceil() as usize;
    assert!(
        (20..=most).contains(&passed),
        "{}: {passed} passed, at most {most}",
        proxy.dir()
    );
    assert!(passed < 25, "the per-minute limit denied some");
    drop(s.dir);
}

#[test]
fn nginx_answers_200_with_ratelimit_headers_then_429_with_retry_after() {
    tiers_through(Proxy::Nginx);
}

#[test]
fn caddy_answers_200_with_ratelimit_headers_then_429_with_retry_after() {
    tiers_through(Proxy::Caddy);
}

#[test]
fn traefik_answers_200_then_429_with_retry_after_and_the_api_sees_the_headers() {
    tiers_through(Proxy::Traefik);
}

/// The three examples' sluice configs differ only in their comments: one set of rules.
#[test]
fn the_proxies_examples_share_one_set_of_rules() {
    let rules = |dir: &str| -> Vec<String> {
        common::example(dir, "sluice.yaml")
            .lines()
            .map(|l| l.split(" #").next().unwrap_or("").trim_end().to_string())
            .filter(|l| !l.trim_start().starts_with('#') && !l.is_empty())
            .collect()
    };
    assert_eq!(rules("caddy"), rules("nginx"));
    assert_eq!(rules("traefik"), rules("nginx"));
    for dir in ["caddy", "traefik"] {
        assert_eq!(
            common::example(dir, "tiers.yaml"),
            common::example("nginx", "tiers.yaml")
        );
    }
}
