//! `rediss://`: a Redis that only speaks TLS, with certificates made in the test (rcgen).

mod common;

use std::time::{Duration, Instant};

use sluice_core::Unit;
use sluice_core::bucket::Rate;
use sluice_engine::GlobalStore;
use sluice_redis::{RedisMetrics, RedisStore};
use sluice_testkit::pki::Pki;
use testcontainers::ImageExt;
use testcontainers::core::{IntoContainerPort, WaitFor};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_over_rediss_with_a_private_ca() {
    let pki = Pki::new();

    let (_redis, port) = sluice_testkit::redis::on_free_port(|port| {
        common::image()
            .with_exposed_port(6379.tcp())
            .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
            .with_mapped_port(port, 6379.tcp())
            .with_copy_to("/tls/server.pem", pki.server_pem.clone().into_bytes())
            .with_copy_to("/tls/server.key", pki.server_key.clone().into_bytes())
            .with_copy_to("/tls/ca.pem", pki.ca_pem.clone().into_bytes())
            .with_cmd([
                "redis-server",
                "--port",
                "0",
                "--tls-port",
                "6379",
                "--tls-cert-file",
                "/tls/server.pem",
                "--tls-key-file",
                "/tls/server.key",
                "--tls-ca-cert-file",
                "/tls/ca.pem",
                "--tls-auth-clients",
                "no",
            ])
    })
    .await;

    let url = format!("rediss://localhost:{port}");
    let mut settings = common::standalone_settings(&url);
    settings.tls_ca_pem = Some(pki.ca_pem.clone().into_bytes());
    let store = RedisStore::start(settings, RedisMetrics::unregistered()).expect("store");
    let rate = Rate::per_unit(10, Unit::Second);
    let grant = store
        .lease("sluice:{tls}:k=v", rate, 4)
        .await
        .expect("lease over TLS");
    assert_eq!(grant.granted, 4);

    // Without the private CA, the server's certificate is not trusted: no lease, and the store
    // degrades (rules fall back) instead of talking to an unverified server.
    let untrusted = RedisStore::start(
        common::standalone_settings(&url),
        RedisMetrics::unregistered(),
    )
    .expect("store");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !untrusted.degraded() {
        assert!(
            untrusted.lease("sluice:{tls}:k=v", rate, 1).await.is_err(),
            "an unverified server was used"
        );
        assert!(Instant::now() < deadline, "breaker did not open");
    }
}
