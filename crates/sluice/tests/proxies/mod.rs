//! `deploy/examples/{nginx,caddy,traefik}` as running stacks: the real proxy with the example's
//! files, unchanged but for their ports (and nginx's log), in front of the example's
//! stand-in API, asking the sluice binary under test (`--check-addr`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_testkit::process::Sluice;

use crate::common::{self, HttpResponse, free_port, http_get};

/// The proxies with an example.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Proxy {
    Nginx,
    Caddy,
    Traefik,
}

impl Proxy {
    /// All of them.
    pub const ALL: [Proxy; 3] = [Proxy::Nginx, Proxy::Caddy, Proxy::Traefik];

    /// The example's directory under `deploy/examples`.
    pub fn dir(self) -> &'static str {
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
    pub fn headers_on_allowed(self) -> bool {
        self != Proxy::Traefik
    }
}

/// A process, stopped when dropped.
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

/// sluice, a proxy and its API, running until dropped.
pub struct Stack {
    pub proxy: Proxy,
    /// The proxy's port.
    pub http: u16,
    pub sluice: Sluice,
    _proxy: Running,
    _api: Option<Running>,
    pub dir: tempfile::TempDir,
}

/// `text` with each of `pairs`' first strings (each must be present) replaced by the second.
pub fn replace_all(text: &str, pairs: &[(&str, String)]) -> String {
    pairs.iter().fold(text.to_string(), |t, (from, to)| {
        assert!(t.contains(from), "the example has no {from:?}");
        t.replace(from, to)
    })
}

/// sluice on `sluice_yaml` (written in `dir`, with the examples' tiers.yaml beside it), its
/// HTTP check on the port returned.
pub fn start_sluice(dir: &Path, sluice_yaml: &str) -> (Sluice, u16) {
    std::fs::write(dir.join("sluice.yaml"), sluice_yaml).expect("write");
    let tiers = common::example("nginx", "tiers.yaml");
    std::fs::write(dir.join("tiers.yaml"), tiers).expect("write");
    let sluice = Sluice::start_path(
        common::bin(),
        &dir.join("sluice.yaml"),
        &["--check-addr", "127.0.0.1:0"],
    );
    let check = sluice.check.expect("the HTTP check's address").port();
    (sluice, check)
}

/// Starts `cmd` with its output in `log`, in `dir`.
fn spawn(mut cmd: Command, dir: &Path, log: &str) -> Running {
    let log = std::fs::File::create(dir.join(log)).expect("log");
    let program = cmd.get_program().to_owned();
    let child = cmd
        .current_dir(dir)
        // Caddy keeps its state under HOME/XDG dirs: the test's own.
        .env("XDG_DATA_HOME", dir)
        .env("XDG_CONFIG_HOME", dir)
        // Not the test's own pipes: a worker holding them would keep the test run open.
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/setup.sh installs nginx-light, caddy and traefik)",
                program.display()
            )
        });
    Running(child)
}

impl Stack {
    /// The example of `proxy`, as shipped.
    pub fn start(proxy: Proxy) -> Stack {
        Stack::start_with(proxy, &common::example(proxy.dir(), "sluice.yaml"))
    }

    /// The example of `proxy` with `sluice_yaml` for its sluice.yaml.
    pub fn start_with(proxy: Proxy, sluice_yaml: &str) -> Stack {
        let dir = tempfile::tempdir().expect("tempdir");
        let example = |name: &str| common::example(proxy.dir(), name);
        let (sluice, check) = start_sluice(dir.path(), sluice_yaml);
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
        let mut api_process = None;
        let mut cmd = Command::new(proxy.binary());
        match proxy {
            Proxy::Nginx => {
                let d = dir.path().display();
                let conf = write(
                    "nginx.conf",
                    &[
                        check_at,
                        http_at,
                        api_at,
                        ("error_log stderr warn;", "error_log error.log warn;".into()),
                    ],
                );
                cmd.args(["-p", &d.to_string(), "-c", &conf, "-e"])
                    .arg(dir.path().join("error.log"));
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
                cmd.args(["run", "--adapter", "caddyfile", "--config", &conf]);
            }
            Proxy::Traefik => {
                let conf = write("traefik.yaml", &[http_at]);
                write("dynamic.yaml", &[check_at, api_at]);
                let script = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../deploy/examples/traefik/api.py");
                let mut python = Command::new("python3");
                python.arg(script).arg(api.to_string());
                api_process = Some(spawn(python, dir.path(), "api.log"));
                let deadline = Instant::now() + Duration::from_secs(10);
                while std::net::TcpStream::connect(("127.0.0.1", api)).is_err() {
                    assert!(
                        Instant::now() < deadline,
                        "api.py did not listen within 10 s"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                cmd.arg(format!("--configFile={conf}"));
            }
        }
        let running = spawn(cmd, dir.path(), "proxy.log");
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
            _api: api_process,
            dir,
        }
    }

    /// `GET path` through the proxy, with `headers`.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
        http_get(self.http, path, headers)
    }

    /// The keys sluice tracks of descriptor `key` ([`tracked`]).
    pub fn tracked(&self, key: &str) -> Vec<String> {
        tracked(&self.sluice, key)
    }
}

/// The keys `sluice` tracks (`sluice quota list`) of descriptor `key`, as `key=value`, sorted.
pub fn tracked(sluice: &Sluice, key: &str) -> Vec<String> {
    let out = Command::new(common::bin())
        .args([
            "quota",
            "list",
            "--addr",
            &format!("http://{}", sluice.grpc),
        ])
        .output()
        .expect("sluice quota list");
    assert!(out.status.success(), "{out:?}");
    let prefix = format!("{key}=");
    let mut found: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with(&prefix))
        .map(str::to_string)
        .collect();
    found.sort();
    found
}
