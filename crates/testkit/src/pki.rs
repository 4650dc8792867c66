//! A throwaway PKI for TLS tests: a CA, a server certificate for `localhost` and a client
//! certificate, as PEM strings and as files.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

/// PEM material and a directory holding `ca.pem`, `server.pem`/`.key`, `client.pem`/`.key`.
pub struct Pki {
    /// The CA certificate.
    pub ca_pem: String,
    /// The server certificate (SAN `localhost`).
    pub server_pem: String,
    /// The server's private key.
    pub server_key: String,
    dir: tempfile::TempDir,
}

impl Pki {
    /// Generates everything and writes the files.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca =
            CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("ca");
        let issue = |san: &str| {
            let key = KeyPair::generate().expect("key");
            let cert = CertificateParams::new(vec![san.to_string()])
                .expect("params")
                .signed_by(&key, &ca)
                .expect("sign");
            (cert.pem(), key.serialize_pem())
        };
        let (server_pem, server_key) = issue("localhost");
        let (client_pem, client_key) = issue("sluice-cli");
        let ca_pem = ca.pem();
        for (name, pem) in [
            ("ca.pem", &ca_pem),
            ("server.pem", &server_pem),
            ("server.key", &server_key),
            ("client.pem", &client_pem),
            ("client.key", &client_key),
        ] {
            std::fs::write(dir.path().join(name), pem).expect("write");
        }
        Self {
            ca_pem,
            server_pem,
            server_key,
            dir,
        }
    }

    /// The path of one of the files.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}
