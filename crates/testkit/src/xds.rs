//! An xDS management server for the tests: `xds-server/` (go-control-plane, the library Envoy
//! Gateway's own server is built on), built into `.tools/bin/sluice-xds-test-server` by
//! `scripts/setup.sh`. A test sets the `RateLimitConfig` resources a node gets and reads what the
//! node ACKed and NACKed.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::process::{http_get, http_send};

/// A running management server; killed when dropped.
pub struct XdsServer {
    /// Its ADS address (`CONFIG_GRPC_XDS_SERVER_URL`).
    pub grpc: SocketAddr,
    /// Its control port.
    http: u16,
    child: Child,
}

/// What a node said about the resources it was sent (`GET /status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// The last version it ACKed.
    pub acked: String,
    /// The last version it NACKed…
    pub nacked: String,
    /// …and why.
    pub error: String,
}

impl XdsServer {
    /// Starts the server in plaintext.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts it with mutual TLS: `pki`'s server certificate (`localhost`), requiring client
    /// certificates signed by its CA.
    pub fn start_tls(pki: &crate::pki::Pki) -> Self {
        let path = |name: &str| pki.path(name).display().to_string();
        Self::start_with(&[
            "-cert",
            &path("server.pem"),
            "-key",
            &path("server.key"),
            "-ca",
            &path("ca.pem"),
        ])
    }

    /// Starts it with extra flags (`-cert`, `-key`, `-ca` for TLS).
    #[allow(clippy::zombie_processes)] // a panic here fails the test; the process dies with it
    pub fn start_with(flags: &[&str]) -> Self {
        let mut child = Command::new(binary())
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sluice-xds-test-server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("its ready line");
        let field = |name: &str| -> String {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
                .to_string()
        };
        let http: SocketAddr = field("http=").parse().expect("http address");
        Self {
            grpc: field("grpc=").parse().expect("grpc address"),
            http: http.port(),
            child,
        }
    }

    /// Gives `node` the resources `configs` (a JSON array of `RateLimitConfig` in protojson) as
    /// version `version`; the server pushes them to the node's open streams.
    pub fn set(&self, node: &str, version: &str, configs: &str) {
        let answer = http_send(
            self.http,
            "PUT",
            &format!("/snapshot?node={node}&version={version}"),
            &[],
            configs,
        );
        assert_eq!(answer.status, 204, "set the snapshot: {}", answer.body);
    }

    /// What `node` ACKed and NACKed last.
    pub fn status(&self, node: &str) -> NodeStatus {
        let answer = http_get(self.http, &format!("/status?node={node}"), &[]);
        let v: serde_json::Value = serde_json::from_str(&answer.body).expect("status JSON");
        let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        NodeStatus {
            acked: text("acked"),
            nacked: text("nacked"),
            error: text("error"),
        }
    }
}

impl Drop for XdsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server's binary (`SLUICE_XDS_TEST_SERVER` overrides where it is).
fn binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("SLUICE_XDS_TEST_SERVER") {
        return bin.into();
    }
    let local =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/bin/sluice-xds-test-server");
    assert!(
        local.exists(),
        "no {}: run scripts/setup.sh (it builds crates/testkit/xds-server)",
        local.display()
    );
    local
}
