//! Toxiproxy (Shopify's TCP fault proxy) between sluice and Redis: latency, resets and stalls on a
//! real connection, driven over its HTTP API. The kernel here has no netem qdisc, so this is how
//! network faults are made. Install: `go install github.com/Shopify/toxiproxy/v2/cmd/server@latest`
//! (the binary is named `server`); `SLUICE_TOXIPROXY` names another path.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::{free_port, http_send};

/// A running toxiproxy server on loopback; killed when dropped.
pub struct Toxiproxy {
    /// Its HTTP API port (on 127.0.0.1).
    pub api: u16,
    child: Child,
}

/// Where the toxiproxy server binary is.
pub fn binary() -> PathBuf {
    std::env::var_os("SLUICE_TOXIPROXY").map_or_else(
        || {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join("go/bin/server")
        },
        PathBuf::from,
    )
}

impl Toxiproxy {
    /// Starts the server on 127.0.0.1 and waits for its API.
    pub fn start() -> Self {
        let api = free_port();
        let child = Command::new(binary())
            .args(["-host", "127.0.0.1", "-port", &api.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "start toxiproxy (go install github.com/Shopify/toxiproxy/v2/cmd/server@latest)",
            );
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", api)).is_err() {
            assert!(
                Instant::now() < deadline,
                "toxiproxy did not listen in 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { api, child }
    }

    /// A proxy `name` listening on 127.0.0.1:`listen` in front of 127.0.0.1:`upstream`.
    pub fn proxy(&self, name: &str, listen: u16, upstream: u16) {
        let body = format!(
            r#"{{"name":"{name}","listen":"127.0.0.1:{listen}","upstream":"127.0.0.1:{upstream}","enabled":true}}"#
        );
        let r = http_send(self.api, "POST", "/proxies", &[], &body);
        assert!(r.status == 201, "create proxy: {} {}", r.status, r.body);
    }

    /// Adds toxic `toxic` (`latency`, `reset_peer`, `timeout`, …) with `attributes` (JSON) on
    /// both directions of proxy `name`.
    pub fn add(&self, name: &str, toxic: &str, attributes: &str) {
        for stream in ["downstream", "upstream"] {
            let body = format!(
                r#"{{"name":"{toxic}_{stream}","type":"{toxic}","stream":"{stream}","toxicity":1.0,"attributes":{attributes}}}"#
            );
            let r = http_send(
                self.api,
                "POST",
                &format!("/proxies/{name}/toxics"),
                &[],
                &body,
            );
            assert!(r.status == 200, "add toxic: {} {}", r.status, r.body);
        }
    }

    /// Removes toxic `toxic` from proxy `name` (both directions).
    pub fn remove(&self, name: &str, toxic: &str) {
        for stream in ["downstream", "upstream"] {
            let path = format!("/proxies/{name}/toxics/{toxic}_{stream}");
            let r = http_send(self.api, "DELETE", &path, &[], "");
            assert!(r.status == 204, "remove toxic: {} {}", r.status, r.body);
        }
    }
}

impl Drop for Toxiproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
