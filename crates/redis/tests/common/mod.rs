//! Real Redis for tests: a standalone container and a 3-master Redis Cluster, via testcontainers.
//!
//! The image is `redis:7.0` unless `SLUICE_TEST_REDIS_IMAGE` names another (`name:tag`). No image
//! is pulled here: CI builds a local stand-in under the public name first (see `.ci/run`).
#![allow(dead_code)]

pub mod engine;

use std::net::TcpListener;
use std::time::Duration;

use sluice_core::config::{HumanDuration, RedisSettings};
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

/// The Redis image to test against.
pub fn image() -> GenericImage {
    let spec = std::env::var("SLUICE_TEST_REDIS_IMAGE").unwrap_or_else(|_| "redis:7.0".into());
    let (name, tag) = spec.split_once(':').unwrap_or((spec.as_str(), "latest"));
    GenericImage::new(name.to_string(), tag.to_string())
}

/// A standalone Redis on a fixed host port (so it keeps its address across pause and restart).
pub struct Standalone {
    pub container: ContainerAsync<GenericImage>,
    pub port: u16,
}

impl Standalone {
    pub async fn start() -> Self {
        let port = free_port();
        let container = image()
            .with_exposed_port(6379.tcp())
            .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
            .with_mapped_port(port, 6379.tcp())
            .start()
            .await
            .expect(
                "start Redis (run ../shared/scripts/local-images.sh redis if the image is missing)",
            );
        Self { container, port }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// A Redis Cluster of 3 masters: one host-network container running three redis-server processes,
/// joined with `redis-cli --cluster create`.
pub struct Cluster {
    pub container: ContainerAsync<GenericImage>,
    pub ports: [u16; 3],
}

impl Cluster {
    pub async fn start() -> Self {
        let base = free_cluster_base();
        let ports = [base, base + 1, base + 2];
        let servers: String = ports
            .iter()
            .map(|p| {
                format!(
                    "redis-server --port {p} --cluster-enabled yes --cluster-config-file /tmp/nodes-{p}.conf \
                     --cluster-node-timeout 2000 --bind 127.0.0.1 --protected-mode no --save '' --appendonly no \
                     --daemonize yes --logfile /tmp/redis-{p}.log; "
                )
            })
            .collect();
        let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let script = format!(
            "{servers} sleep 0.5; \
             redis-cli --cluster create {} --cluster-replicas 0 --cluster-yes > /tmp/create.log 2>&1 || {{ cat /tmp/create.log; exit 1; }}; \
             until redis-cli -p {} cluster info | grep -q cluster_state:ok; do sleep 0.1; done; \
             echo sluice-cluster-ready; exec sleep infinity",
            nodes.join(" "),
            ports[0]
        );
        let container = image()
            .with_wait_for(WaitFor::message_on_stdout("sluice-cluster-ready"))
            .with_entrypoint("sh")
            .with_cmd(["-c", script.as_str()])
            .with_network("host")
            .with_startup_timeout(Duration::from_secs(60))
            .start()
            .await
            .expect("start Redis Cluster");
        Self { container, ports }
    }

    pub fn nodes(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }
}

/// Settings for `url` with test-friendly timings.
pub fn standalone_settings(url: &str) -> RedisSettings {
    RedisSettings {
        url: Some(url.to_string()),
        cluster_nodes: Vec::new(),
        password_env: None,
        timeout: HumanDuration(Duration::from_millis(50)),
        connect_timeout: HumanDuration(Duration::from_millis(500)),
        breaker_failures: 3,
        probe_interval: HumanDuration(Duration::from_millis(100)),
        heartbeat_interval: HumanDuration(Duration::from_millis(200)),
    }
}

/// Settings for a cluster.
pub fn cluster_settings(nodes: Vec<String>) -> RedisSettings {
    RedisSettings {
        url: None,
        cluster_nodes: nodes,
        ..standalone_settings("redis://unused")
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A base port P with P..P+2 and their cluster bus ports P+10000.. all free.
fn free_cluster_base() -> u16 {
    let seed = std::process::id() as u16;
    for i in 0..500u16 {
        let base = 20_000 + (seed.wrapping_mul(7).wrapping_add(i * 37)) % 15_000;
        let all_free = (0..3).all(|k| {
            TcpListener::bind(("127.0.0.1", base + k)).is_ok()
                && TcpListener::bind(("127.0.0.1", base + k + 10_000)).is_ok()
        });
        if all_free {
            return base;
        }
    }
    panic!("no free port range for a Redis Cluster")
}
