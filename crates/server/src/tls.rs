//! The gRPC port's TLS: built from the `tls:` files, and built again when they change, so a
//! certificate renewed in place (cert-manager, a Kubernetes Secret rotated under a mounted
//! volume, Envoy Gateway's certgen) needs no restart, as envoyproxy/ratelimit reloads its own.
//!
//! Each handshake takes the configuration in force when it starts; connections already open
//! keep the one they were made with. The files are read again every `every` (the config's reload
//! interval), off the async workers. A change that does not load (a key that does not match its
//! certificate, a file half written) is logged once, and the certificates in force stay until
//! the files load again.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use sluice_core::config::fs::read_regular_file;
use sluice_core::config::reader::MAX_FILE_BYTES;
use sluice_core::config::secrets::{TlsFiles, TlsMaterial, looks_like_pem};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsError(String);

/// The gRPC port's TLS as it is now.
pub struct ServerTls {
    current: ArcSwap<ServerConfig>,
    /// What `current` was built from.
    material: Mutex<TlsMaterial>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

impl ServerTls {
    /// TLS from `material`, as loaded with the config.
    pub fn new(material: &TlsMaterial) -> Result<Arc<Self>, TlsError> {
        Ok(Arc::new(Self {
            current: ArcSwap::new(tls_config(material)?),
            material: Mutex::new(material.clone()),
        }))
    }

    /// The configuration for the next handshake.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    /// Reads the files again every `every` until `stop` is cancelled, and puts what they hold
    /// in force whenever it changed and loads.
    pub async fn watch(self: Arc<Self>, every: Duration, stop: CancellationToken) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut last_error: Option<String> = None;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let files = self.lock().files.clone();
            let Ok(read) = tokio::task::spawn_blocking(move || read_material(&files)).await else {
                continue;
            };
            match read.and_then(|material| self.put_in_force(material)) {
                Ok(false) => {}
                Ok(true) => {
                    tracing::info!(
                        "gRPC TLS: the certificate files changed; new handshakes use them"
                    );
                    last_error = None;
                }
                // The same failure is said once, not every `every`.
                Err(e) if last_error.as_deref() == Some(e.as_str()) => {}
                Err(e) => {
                    tracing::error!(error = %e, "gRPC TLS: the changed certificate files do not load; the ones in force stay");
                    last_error = Some(e);
                }
            }
        }
    }

    /// Builds and puts `material` in force if it differs from what is; whether it did.
    fn put_in_force(&self, material: TlsMaterial) -> Result<bool, String> {
        if *self.lock() == material {
            return Ok(false);
        }
        let config = tls_config(&material).map_err(|e| e.to_string())?;
        self.current.store(config);
        *self.lock() = material;
        Ok(true)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TlsMaterial> {
        self.material
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The `tls:` files as they are now (each a regular file of PEM, as at load).
fn read_material(files: &TlsFiles) -> Result<TlsMaterial, String> {
    let read = |path: &Path| {
        let bytes = read_regular_file(path, MAX_FILE_BYTES)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if looks_like_pem(&bytes) {
            Ok(bytes)
        } else {
            Err(format!("{}: not a PEM file", path.display()))
        }
    };
    Ok(TlsMaterial {
        cert_pem: read(&files.cert)?,
        key_pem: read(&files.key)?,
        client_ca_pem: files.client_ca.as_deref().map(read).transpose()?,
        files: files.clone(),
    })
}

/// The server side of TLS for `material`: its certificate chain and key, requiring client
/// certificates signed by its client CA if it has one (mutual TLS), offering HTTP/2 by ALPN.
pub fn tls_config(material: &TlsMaterial) -> Result<Arc<ServerConfig>, TlsError> {
    use tokio_rustls::rustls::{RootCertStore, server::WebPkiClientVerifier};
    let bad = |what: &str, e: &dyn std::fmt::Display| TlsError(format!("{what}: {e}"));
    let certs = CertificateDer::pem_slice_iter(&material.cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("certificate", &e))?;
    let key =
        PrivateKeyDer::from_pem_slice(&material.key_pem).map_err(|e| bad("private key", &e))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("protocol versions", &e))?;
    let builder = match &material.client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca) {
                roots
                    .add(cert.map_err(|e| bad("client CA", &e))?)
                    .map_err(|e| bad("client CA", &e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| bad("client CA", &e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| bad("certificate and key", &e))?;
    config.alpn_protocols.push(b"h2".to_vec());
    Ok(Arc::new(config))
}
