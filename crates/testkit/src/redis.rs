//! Real Redis for tests: a standalone container and a 3-master Redis Cluster, via testcontainers.
//!
//! The image is `redis:7.0` unless `SLUICE_TEST_REDIS_IMAGE` names another (`name:tag`;
//! `valkey/valkey:9.1` in CI's second run of the Redis suites). The image must have `redis-server`
//! and `redis-cli` (Valkey's official image links them). No image is pulled here: CI builds local
//! stand-ins under the public names first (see `.ci/run` and `scripts/valkey-image.sh`).

use std::time::Duration;

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, ContainerRequest, GenericImage, ImageExt};

pub use crate::ports::free_port;
use crate::ports::{free_block, taken};

/// The Redis image to test against.
pub fn image() -> GenericImage {
    let spec = std::env::var("SLUICE_TEST_REDIS_IMAGE").unwrap_or_else(|_| "redis:7.0".into());
    let (name, tag) = spec.split_once(':').unwrap_or((spec.as_str(), "latest"));
    GenericImage::new(name.to_string(), tag.to_string())
}

/// A standalone Redis on a fixed host port (so it keeps its address across pause and restart).
pub struct Standalone {
    /// The container (pause, stop, start it to inject faults).
    pub container: ContainerAsync<GenericImage>,
    /// The host port (fixed, so it survives a restart).
    pub port: u16,
}

impl Standalone {
    /// Starts a Redis and waits until it accepts connections.
    pub async fn start() -> Self {
        let (container, port) = on_free_port(|port| {
            image()
                .with_exposed_port(6379.tcp())
                .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
                .with_mapped_port(port, 6379.tcp())
        })
        .await;
        Self { container, port }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// A Redis Cluster of 3 masters (and optionally a replica each): one host-network container
/// running the redis-server processes, joined with `redis-cli --cluster create`.
pub struct Cluster {
    /// The container running all the nodes.
    pub container: ContainerAsync<GenericImage>,
    /// The nodes' ports on 127.0.0.1 (masters and replicas, as created).
    pub ports: Vec<u16>,
}

impl Cluster {
    /// Starts 3 masters, creates the cluster and waits for `cluster_state:ok`.
    pub async fn start() -> Self {
        Self::start_with(0).await
    }

    /// Starts 3 masters with `replicas` replicas each (failover tests need 1). A node that does
    /// not answer within 20 s (its port taken by another process since the pick, say) fails the
    /// attempt with its log (a port held by a server that never answers: each ping gives up after
    /// 1 s), and the cluster is started again on another block (three in all).
    pub async fn start_with(replicas: u16) -> Self {
        let mut failures = Vec::new();
        for _ in 0..3 {
            let ports = {
                let count = 3 * (1 + replicas);
                let base = free_block(count);
                (base..base + count).collect::<Vec<u16>>()
            };
            match try_host_network(&cluster_script(&ports, replicas), "sluice-cluster-ready").await
            {
                Ok(container) => return Self { container, ports },
                Err(e) => failures.push(format!("ports {}..: {e}", ports[0])),
            }
        }
        panic!("start Redis Cluster: three attempts failed: {failures:#?}")
    }

    /// The nodes as `redis://127.0.0.1:PORT` URLs.
    pub fn nodes(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }
}

/// Redis Sentinel: a master, one replica and three sentinels (quorum 2, a master down after 1 s),
/// in one host-network container, the master monitored as [`Sentinel::MASTER`].
pub struct Sentinel {
    /// The container running every process.
    pub container: ContainerAsync<GenericImage>,
    /// The two Redis servers' ports: the first master, then its replica.
    pub servers: [u16; 2],
    /// The sentinels' ports.
    pub sentinels: [u16; 3],
}

impl Sentinel {
    /// The name the sentinels monitor the master under.
    pub const MASTER: &'static str = "mymaster";

    /// Starts the servers and the sentinels, and waits until every sentinel knows the replica
    /// and the other two sentinels (so a failover can be agreed).
    pub async fn start() -> Self {
        let base = free_block(5);
        let (m, r) = (base, base + 1);
        let sentinels = [base + 2, base + 3, base + 4];
        let server = |p: u16, more: &str| {
            format!(
                "redis-server --port {p} --bind 127.0.0.1 --protected-mode no --save '' --appendonly no \
                 --daemonize yes --logfile /tmp/redis-{p}.log {more}; "
            )
        };
        let sentinel = |p: u16| {
            format!(
                "printf 'port {p}\nbind 127.0.0.1\nprotected-mode no\ndaemonize yes\nlogfile /tmp/sentinel-{p}.log\n\
                 sentinel monitor {name} 127.0.0.1 {m} 2\nsentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 10000\n' > /tmp/sentinel-{p}.conf; \
                 redis-server /tmp/sentinel-{p}.conf --sentinel; ",
                name = Self::MASTER
            )
        };
        let ready: String = sentinels
            .iter()
            .map(|p| {
                format!(
                    "until redis-cli -p {p} sentinel replicas {name} | grep -q 127.0.0.1 \
                     && [ \"$(redis-cli -p {p} sentinel sentinels {name} | grep -c '^name$')\" = 2 ]; do sleep 0.1; done; ",
                    name = Self::MASTER
                )
            })
            .collect();
        let script = format!(
            "{}{} until redis-cli -p {m} info replication | grep -q connected_slaves:1; do sleep 0.1; done; \
             {}{ready} echo sluice-sentinel-ready; exec sleep infinity",
            server(m, ""),
            server(r, &format!("--replicaof 127.0.0.1 {m}")),
            sentinels.iter().map(|&p| sentinel(p)).collect::<String>(),
        );
        let container = on_host_network(&script, "sluice-sentinel-ready", "Redis Sentinel").await;
        Self {
            container,
            servers: [m, r],
            sentinels,
        }
    }

    /// The sentinels as `redis://127.0.0.1:PORT` URLs.
    pub fn nodes(&self) -> Vec<String> {
        (self.sentinels.iter())
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// The port of the master the sentinels name now.
    pub async fn master_port(&self) -> u16 {
        let out = self
            .cli(&[
                "-p",
                &self.sentinels[0].to_string(),
                "sentinel",
                "get-master-addr-by-name",
                Self::MASTER,
            ])
            .await;
        let port = out.lines().nth(1).unwrap_or_default().trim();
        port.parse()
            .unwrap_or_else(|_| panic!("a master's port: {out:?}"))
    }

    /// Runs `redis-cli ARGS` in the container; its standard output.
    pub async fn cli(&self, args: &[&str]) -> String {
        let mut cmd = vec!["redis-cli"];
        cmd.extend_from_slice(args);
        let mut run = self
            .container
            .exec(testcontainers::core::ExecCommand::new(cmd))
            .await
            .expect("redis-cli");
        String::from_utf8_lossy(&run.stdout_to_vec().await.expect("output")).into_owned()
    }
}

/// The shell script that starts a cluster's nodes on `ports`, waits until each answers (the
/// servers daemonize before they bind, so a fixed sleep raced a loaded machine: CI once saw
/// `--cluster create` refused), joins them and waits for `cluster_state:ok`.
fn cluster_script(ports: &[u16], replicas: u16) -> String {
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
    let answering: String = ports
        .iter()
        .map(|p| {
            format!(
                "n=0; until timeout 1 redis-cli -p {p} ping 2>/dev/null | grep -q PONG; do \
                 n=$((n+1)); [ $n -gt 400 ] && {{ echo node {p} never answered; cat /tmp/redis-{p}.log; exit 1; }}; \
                 sleep 0.05; done; "
            )
        })
        .collect();
    let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    format!(
        "{servers}{answering} \
         redis-cli --cluster create {} --cluster-replicas {replicas} --cluster-yes > /tmp/create.log 2>&1 || {{ cat /tmp/create.log; exit 1; }}; \
         until redis-cli -p {} cluster info | grep -q cluster_state:ok; do sleep 0.1; done; \
         echo sluice-cluster-ready; exec sleep infinity",
        nodes.join(" "),
        ports[0]
    )
}

/// A container of the Redis image on the host's network running `script` (sh), started once it
/// prints `ready`.
async fn on_host_network(script: &str, ready: &str, what: &str) -> ContainerAsync<GenericImage> {
    (try_host_network(script, ready).await).unwrap_or_else(|e| panic!("start {what}: {e}"))
}

/// [`on_host_network`], the failure returned.
async fn try_host_network(
    script: &str,
    ready: &str,
) -> Result<ContainerAsync<GenericImage>, testcontainers::TestcontainersError> {
    image()
        .with_wait_for(WaitFor::message_on_stdout(ready))
        .with_entrypoint("sh")
        .with_cmd(["-c", script])
        .with_network("host")
        .with_startup_timeout(Duration::from_secs(60))
        .start()
        .await
}

/// Starts the container `request(port)` describes, `port` a free host port; if the port was taken
/// between the pick and Docker's bind, on another (three ports in all).
pub async fn on_free_port(
    request: impl Fn(u16) -> ContainerRequest<GenericImage>,
) -> (ContainerAsync<GenericImage>, u16) {
    let mut last = None;
    for _ in 0..3 {
        let port = free_port();
        match request(port).start().await {
            Ok(container) => return (container, port),
            Err(e) if taken(&e) => last = Some(e),
            Err(e) => panic!(
                "start Redis (run ../shared/scripts/local-images.sh redis if the image is missing): {e}"
            ),
        }
    }
    panic!("start Redis: three host ports were taken before Docker bound them: {last:?}")
}
