//! Envoy Gateway's rendered rate-limit Deployment with only its image changed (issue 43's "done
//! when"): `deploy/examples/migrating/envoy-gateway-ratelimit.yaml`'s container (command,
//! environment, ports, probes) runs sluice, and envoyproxy/ratelimit beside it, against a
//! management server with mutual TLS (go-control-plane, as Envoy Gateway's) and one Redis. Only
//! what a test on one machine must change is changed: the management server's, Redis's and the
//! certificates' places, and ports two processes can share a host with. sluice serves at once
//! (`FORCE_START_WITHOUT_INITIAL_CONFIG`), its probes answer, it enforces what is pushed, follows
//! an update within a second, and answers every call as the reference does.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_proto::envoy::ratelimit::rate_limit_response::Code;
use sluice_proto::envoy::ratelimit::rate_limit_service_client::RateLimitServiceClient;
use sluice_testkit::pki::Pki;
use sluice_testkit::redis::Standalone;
use sluice_testkit::xds::XdsServer;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

/// The node id the Deployment gives sluice; the reference beside it is another node.
const NODE: &str = "envoy-ratelimit";
const REFERENCE_NODE: &str = "reference";

/// The Deployment's container, as YAML read into JSON.
fn container() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/examples/migrating/envoy-gateway-ratelimit.yaml"
    );
    let text = std::fs::read_to_string(path).expect("the Deployment");
    let deployment: serde_json::Value = serde_saphyr::from_str(&text).expect("YAML");
    deployment["spec"]["template"]["spec"]["containers"][0].clone()
}

/// The container's environment with the places a test on one machine must change: the
/// management server, Redis and the certificate files.
fn environment(
    container: &serde_json::Value,
    xds: &XdsServer,
    redis: &Standalone,
    pki: &Pki,
) -> Vec<(String, String)> {
    let place = |value: &str| -> String {
        match value {
            "envoy-gateway:18001" => format!("localhost:{}", xds.grpc.port()),
            "redis.redis.svc:6379" => format!("127.0.0.1:{}", redis.port),
            "/certs/tls.crt" => pki.path("server.pem").display().to_string(),
            "/certs/tls.key" => pki.path("server.key").display().to_string(),
            "/certs/ca.crt" => pki.path("ca.pem").display().to_string(),
            other => other.to_string(),
        }
    };
    container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|v| {
            let name = v["name"].as_str().expect("name").to_string();
            let value = place(v["value"].as_str().expect("value"));
            (name, value)
        })
        .collect()
}

/// A gRPC client verifying the server as Envoy Gateway's proxies do (TLS, the CA, `localhost`).
async fn client(port: u16, pki: &Pki) -> RateLimitServiceClient<Channel> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(pki.ca_pem.clone()))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://127.0.0.1:{port}"))
        .expect("address")
        .tls_config(tls)
        .expect("TLS")
        .connect()
        .await
        .expect("connect");
    RateLimitServiceClient::new(channel)
}

/// Waits until `node` ACKed `version`; returns how long that took.
fn until_acked(server: &XdsServer, node: &str, version: &str) -> Duration {
    let start = Instant::now();
    while server.status(node).acked != version {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{node}: version {version} not ACKed in 10 s: {:?}",
            server.status(node)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateways_rendered_deployment_runs_sluice_as_it_runs_the_reference() {
    let container = container();
    // What Envoy Gateway runs and probes: /bin/ratelimit, gRPC on 8081, /healthcheck on 8080.
    assert_eq!(container["command"], serde_json::json!(["/bin/ratelimit"]));
    assert_eq!(container["ports"][0]["containerPort"], 8081);
    for probe in ["readinessProbe", "startupProbe"] {
        let get = &container[probe]["httpGet"];
        assert_eq!(
            (get["path"].as_str(), get["port"].as_u64()),
            (Some("/healthcheck"), Some(8080))
        );
    }

    let (redis, pki) = (Standalone::start().await, Pki::new());
    let xds = XdsServer::start_tls(&pki);
    let env = environment(&container, &xds, &redis, &pki);
    let (grpc, http) = (common::free_port(), common::free_port());
    let (ref_grpc, ref_http) = (common::free_port(), common::free_port());
    let bin = tempfile::tempdir().expect("tempdir");
    let mut sluice = common::Running(
        common::ratelimit(bin.path(), &[])
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(common::serving_on(grpc, http))
            .spawn()
            .expect("spawn sluice"),
    );
    let _reference = common::Running(
        Command::new(common::pushed::reference_binary())
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(common::serving_on(ref_grpc, ref_http))
            .env("CONFIG_GRPC_XDS_NODE_ID", REFERENCE_NODE)
            .env("DEBUG_HOST", "127.0.0.1")
            .env("DEBUG_PORT", common::free_port().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn envoyproxy/ratelimit"),
    );
    // Forced start: serving before any limits arrive, and ready by the Deployment's probes.
    common::until_serving(&mut sluice.0);
    // The reference serves gRPC and HTTP from two goroutines: either may listen first.
    common::pushed::until_listening(ref_grpc);
    common::pushed::until_listening(ref_http);
    for port in [http, ref_http] {
        let probe = common::http_get(port, "/healthcheck", &[]);
        assert_eq!(
            (probe.status, probe.body.as_str()),
            (200, "OK"),
            "port {port}"
        );
    }

    for node in [NODE, REFERENCE_NODE] {
        xds.set(node, "1", &common::pushed::limits(3, 2, false));
    }
    until_acked(&xds, NODE, "1");
    until_acked(&xds, REFERENCE_NODE, "1");
    let (mut ours, mut theirs) = (client(grpc, &pki).await, client(ref_grpc, &pki).await);
    let alice: &[(&str, &str)] = &[("user", "alice")];
    let search: &[(&str, &str)] = &[("route", "search"), ("user", "bob")];
    // Both halves, the update between them included, in one minute (see there).
    let minute = common::pushed::clear_of_a_minute_edge(Duration::from_secs(20));
    let codes = common::pushed::alike(
        &mut ours,
        &mut theirs,
        &[alice, alice, alice, alice, search, search, search],
    )
    .await;
    use Code::{Ok, OverLimit};
    assert_eq!(codes, [Ok, Ok, Ok, OverLimit, Ok, Ok, OverLimit]);

    // An update, followed within a second (about 20 ms here; the bound leaves a loaded CI room).
    for node in [NODE, REFERENCE_NODE] {
        xds.set(node, "2", &common::pushed::limits(3, 2, true));
    }
    let took = until_acked(&xds, NODE, "2");
    assert!(
        took < Duration::from_secs(3),
        "version 2 applied {took:?} after it was set"
    );
    until_acked(&xds, REFERENCE_NODE, "2");
    let tenant: &[(&str, &str)] = &[("tenant", "t1")];
    assert_eq!(
        common::pushed::minute_now(),
        minute,
        "the update took the calls into the next minute"
    );
    let codes = common::pushed::alike(&mut ours, &mut theirs, &[tenant, tenant, alice]).await;
    assert_eq!(codes, [Ok, OverLimit, OverLimit]);
}
