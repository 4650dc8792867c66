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
