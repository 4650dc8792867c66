//! TLS and mutual TLS on the gRPC port, with certificates made in the test (rcgen).

mod common;

use std::path::{Path, PathBuf};

use std::process::Command;

use sluice_testkit::pki::Pki;

fn config(pki: &Pki, mutual: bool) -> String {
    let ca = if mutual {
        format!("\n  client_ca_file: {}", pki.path("ca.pem").display())
    } else {
        String::new()
    };
    format!(
        "domains:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit: {{unit: second, requests_per_unit: 100}}\ntls:\n  cert_file: {}\n  key_file: {}{ca}\n",
        pki.path("server.pem").display(),
        pki.path("server.key").display()
    )
}

fn check(port: u16, extra: &[&Path], flags: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(common::bin());
    cmd.args([
        "check",
        "--domain",
        "d",
        "-d",
        "k=v",
        "--addr",
        &format!("https://localhost:{port}"),
    ]);
    for (flag, path) in flags.iter().zip(extra) {
        cmd.arg(flag).arg(path);
    }
    let out = cmd.output().expect("run");
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn tls_serves_clients_that_trust_the_ca() {
    let pki = Pki::new();
    let s = common::start(&config(&pki, false));
    let port = s.grpc.port();
    let (code, out) = check(port, &[&pki.path("ca.pem")], &["--ca-file"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("OK"), "{out}");
    let (code, out) = check(port, &[], &[]);
    assert_eq!(
        code,
        Some(1),
        "a client without the CA must not connect: {out}"
    );
    let plain = Command::new(common::bin())
        .args([
            "check",
            "--domain",
            "d",
            "-d",
            "k=v",
            "--addr",
            &format!("http://127.0.0.1:{port}"),
        ])
        .output()
        .expect("run");
    assert_eq!(plain.status.code(), Some(1), "plaintext is refused");
}

#[test]
fn mutual_tls_requires_a_client_certificate() {
    let pki = Pki::new();
    let s = common::start(&config(&pki, true));
    let port = s.grpc.port();
    let (code, out) = check(port, &[&pki.path("ca.pem")], &["--ca-file"]);
    assert_eq!(code, Some(1), "no client certificate: {out}");
    let files = [
        pki.path("ca.pem"),
        pki.path("client.pem"),
        pki.path("client.key"),
    ];
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let (code, out) = check(port, &refs, &["--ca-file", "--cert-file", "--key-file"]);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn missing_or_bad_tls_files_are_config_errors() {
    let pki = Pki::new();
    std::fs::write(pki.path("server.key"), "not a key").expect("write");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sluice.yaml");
    std::fs::write(&path, config(&pki, false)).expect("write");
    let out = Command::new(common::bin())
        .args(["config", "check"])
        .arg(&path)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(64));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tls.key_file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A client that completes the TLS handshake and then sends nothing (no HTTP/2 preface) is
/// closed after the preface deadline (5 s), as a silent plaintext connection is: it cannot hold
/// a connection's place for good.
#[tokio::test]
async fn a_tls_client_silent_after_its_handshake_is_closed() {
    use std::sync::Arc;
    use tokio::io::AsyncReadExt;
    use tokio_rustls::rustls::{self, pki_types::CertificateDer, pki_types::pem::PemObject};
    let pki = Pki::new();
    let s = common::start(&config(&pki, false));
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).expect("CA"))
        .expect("add CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(s.grpc)
        .await
        .expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(name, tcp)
        .await
        .expect("the handshake completes");
    let started = std::time::Instant::now();
    // The server's own HTTP/2 settings come first; then, at the deadline, the end.
    let closed = async {
        let mut buf = [0u8; 256];
        while let Ok(n) = tls.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(15), closed)
        .await
        .expect("closed within 15 s");
    let waited = started.elapsed();
    assert!(
        (std::time::Duration::from_secs(4)..std::time::Duration::from_secs(8)).contains(&waited),
        "closed after {waited:?}"
    );
}

/// Certificates rotate under a running sidecar (cert-manager renewing them, a Secret rotated
/// under a mounted volume): the server certificate and the client CA both change to another CA's,
/// and new connections use them within the reload interval, with no restart. Files that do not
/// load (a key of another certificate) leave the certificates in force.
#[test]
fn rotated_certificates_are_used_without_a_restart() {
    let (old, new) = (Pki::new(), Pki::new());
    let live = tempfile::tempdir().expect("tempdir");
    // Written as kubelet swaps a Secret's files: each replaced whole, by a rename.
    let install = |from: &Pki, files: &[(&str, &str)]| {
        for (name, to) in files {
            let staged = live.path().join(format!(".{to}.new"));
            std::fs::copy(from.path(name), &staged).expect("copy");
            std::fs::rename(&staged, live.path().join(to)).expect("rename");
        }
    };
    let all = [
        ("server.pem", "server.pem"),
        ("server.key", "server.key"),
        ("ca.pem", "ca.pem"),
    ];
    install(&old, &all);
    let yaml = format!(
        "domains:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit: {{unit: second, requests_per_unit: 100}}\ntls:\n  cert_file: {}\n  key_file: {}\n  client_ca_file: {}\n",
        live.path().join("server.pem").display(),
        live.path().join("server.key").display(),
        live.path().join("ca.pem").display(),
    );
    let s = common::start(&yaml);
    let port = s.grpc.port();
    let logged = |what: &str| s.stderr.try_iter().any(|line| line.contains(what));
    let as_client_of = |pki: &Pki| {
        let files = [
            pki.path("ca.pem"),
            pki.path("client.pem"),
            pki.path("client.key"),
        ];
        let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        check(port, &refs, &["--ca-file", "--cert-file", "--key-file"])
    };
    assert_eq!(as_client_of(&old).0, Some(0), "{}", as_client_of(&old).1);
    assert_eq!(
        as_client_of(&new).0,
        Some(1),
        "the new CA is not trusted yet"
    );

    // A key that does not match the certificate: refused, the old pair stays in force.
    install(&new, &[("server.key", "server.key")]);
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    assert_eq!(as_client_of(&old).0, Some(0), "{}", as_client_of(&old).1);
    assert!(
        logged("do not load; the ones in force stay"),
        "the refusal is logged"
    );

    install(&new, &all);
    let started = std::time::Instant::now();
    while as_client_of(&new).0 != Some(0) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the rotated certificates are not in force: {}",
            as_client_of(&new).1
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The old CA's clients are refused now, and the old server certificate is gone.
    assert_eq!(as_client_of(&old).0, Some(1), "{}", as_client_of(&old).1);
}
