//! `deploy/examples/nginx` end to end, as shipped: a real nginx with `auth_request` in front of a
//! stand-in API, asking sluice's HTTP check (`--check-addr`) with the API-key tiers of the Envoy
//! example. The files are used unchanged but for their ports and nginx's pid file.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, http_get};
use sluice_testkit::process::Sluice;

fn example(name: &str) -> String {
    common::example("nginx", name)
}

/// nginx, stopped when dropped.
struct Nginx(Child);

impl Drop for Nginx {
    /// A fast shutdown (SIGTERM), which stops the workers too: SIGKILL would leave them
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
    http: u16,
    _sluice: Sluice,
    _nginx: Nginx,
    _dir: tempfile::TempDir,
}

fn stack() -> Stack {
    let dir = tempfile::tempdir().expect("tempdir");
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
    let conf = example("nginx.conf");
    for shipped in [
        "127.0.0.1:8082",
        "listen 127.0.0.1:8000;",
        "listen 127.0.0.1:9000;",
        "http://127.0.0.1:9000;",
        "pid /tmp/sluice-nginx-example.pid;",
    ] {
        assert!(conf.contains(shipped), "{shipped}");
    }
    let pid = dir.path().join("nginx.pid");
    let conf = conf
        .replace("127.0.0.1:8082", &format!("127.0.0.1:{check}"))
        .replace("127.0.0.1:8000", &format!("127.0.0.1:{http}"))
        .replace("127.0.0.1:9000", &format!("127.0.0.1:{api}"))
        .replace(
            "pid /tmp/sluice-nginx-example.pid;",
            &format!("pid {};", pid.display()),
        )
        .replace("error_log stderr warn;", "error_log error.log warn;");
    std::fs::write(dir.path().join("nginx.conf"), conf).expect("write");
    let nginx = Command::new(std::env::var("SLUICE_NGINX_BIN").unwrap_or_else(|_| "nginx".into()))
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(dir.path().join("nginx.conf"))
        .arg("-e")
        .arg(dir.path().join("error.log"))
        // Not the test's own pipes: a worker holding them would keep the test run open.
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx (apt-get install nginx-light; scripts/setup.sh installs it)");
    let nginx = Nginx(nginx);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", http)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not listen within 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Stack {
        http,
        _sluice: sluice,
        _nginx: nginx,
        _dir: dir,
    }
}

#[test]
fn nginx_answers_200_with_ratelimit_headers_then_429_with_retry_after() {
    let s = stack();
    common::next_second();
    // A key not in tiers.yaml is basic: 5 a second (and 20 a minute), whichever way it is sent.
    for i in 0..5 {
        let ok = http_get(s.http, "/v1/items?api_key=k-new", &[]);
        assert_eq!(ok.status, 200, "request {i}: {ok:?}");
        assert_eq!(ok.body, "ok\n");
        let policy = ok
            .headers
            .get("ratelimit-policy")
            .expect("RateLimit-Policy");
        assert!(policy.contains("\"basic_per_second\";q=5;w=1"), "{policy}");
        assert!(ok.headers.contains_key("ratelimit"), "{ok:?}");
    }
    let denied = http_get(s.http, "/v1/items", &[("x-api-key", "k-new")]);
    assert_eq!(denied.status, 429, "{denied:?}");
    assert_eq!(
        denied.headers.get("retry-after").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        denied.headers.get("content-type").map(String::as_str),
        Some("application/problem+json")
    );
    assert!(
        denied.headers.contains_key("ratelimit-policy"),
        "{denied:?}"
    );
    // A premium key (tiers.yaml) in the same second: its own limits, 100 a second.
    let premium = http_get(
        s.http,
        "/v1/items",
        &[("authorization", "Bearer key-premium-0001")],
    );
    assert_eq!(premium.status, 200, "{premium:?}");
    // The per-minute limit holds when the per-second one allows: 20 a minute for basic keys
    // (a token bucket: 20, and one more every 3 s since the first request).
    let started = Instant::now();
    let mut passed = 5;
    for _ in 0..4 {
        common::next_second();
        for _ in 0..5 {
            passed += usize::from(http_get(s.http, "/", &[("x-api-key", "k-new")]).status == 200);
        }
    }
    let most = 20 + (started.elapsed().as_secs_f64() / 3.0).ceil() as usize;
    assert!(
        (20..=most).contains(&passed),
        "{passed} passed, at most {most}"
    );
    assert!(passed < 25, "the per-minute limit denied some");
}
