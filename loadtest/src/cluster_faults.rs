//! Faults on a Redis Cluster under load, made with Redis's own commands: a master failing over to
//! its replica, and the hot key's slot migrating to another master (MOVED/ASK while it moves).

use anyhow::{Context, bail};
use redis::aio::MultiplexedConnection;

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct Node {
    id: String,
    port: u16,
    master: bool,
    /// Slot ranges served (masters).
    slots: Vec<(u16, u16)>,
}

async fn connect(port: u16) -> anyhow::Result<MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    Ok(client.get_multiplexed_async_connection().await?)
}

/// The cluster's nodes, as the first reachable of `ports` sees them.
async fn nodes(ports: &[u16]) -> anyhow::Result<Vec<Node>> {
    for &port in ports {
        let Ok(mut c) = connect(port).await else {
            continue;
        };
        let Ok(text) = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async::<String>(&mut c)
            .await
        else {
            continue;
        };
        return Ok(text
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                let port = f.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                let flags = f.get(2)?;
                if flags.contains("fail") {
                    return None;
                }
                let slots = f
                    .iter()
                    .skip(8)
                    .filter_map(|s| {
                        let (a, b) = s.split_once('-').unwrap_or((s, s));
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .collect();
                Some(Node {
                    id: f[0].to_string(),
                    port,
                    master: flags.contains("master"),
                    slots,
                })
            })
            .collect());
    }
    bail!("no cluster node answers")
}

/// The harness's one bucket key and its slot.
async fn hot_slot(ports: &[u16]) -> anyhow::Result<(String, u16)> {
    for node in nodes(ports).await?.iter().filter(|n| n.master) {
        let mut c = connect(node.port).await?;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("sluice:{*}:*")
            .query_async(&mut c)
            .await?;
        if let Some(key) = keys.into_iter().next() {
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&key)
                .query_async(&mut c)
                .await?;
            return Ok((key, slot));
        }
    }
    bail!("the hot key's bucket is not in the cluster yet")
}

fn owner(nodes: &[Node], slot: u16) -> anyhow::Result<&Node> {
    nodes
        .iter()
        .find(|n| n.master && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
        .context("no master serves the hot slot")
}

/// Kills the master that serves the hot key (`SHUTDOWN NOSAVE`): its replica takes over after
/// the cluster's node timeout. Returns the port of the node that died.
pub async fn fail_master(ports: &[u16]) -> anyhow::Result<u16> {
    let (_, slot) = hot_slot(ports).await?;
    let nodes = nodes(ports).await?;
    let master = owner(&nodes, slot)?;
    let mut c = connect(master.port).await?;
    // The connection closes under the command: an error here is the expected outcome.
    let _ = redis::cmd("SHUTDOWN")
        .arg("NOSAVE")
        .query_async::<()>(&mut c)
        .await;
    Ok(master.port)
}

/// Moves the hot key's slot to another master, the way `redis-cli --cluster reshard` does
/// (IMPORTING/MIGRATING, MIGRATE of its keys, then SETSLOT NODE everywhere), while traffic flows.
pub async fn move_hot_slot(ports: &[u16]) -> anyhow::Result<()> {
    let (_, slot) = hot_slot(ports).await?;
    let nodes = nodes(ports).await?;
    let from = owner(&nodes, slot)?.clone();
    let to = nodes
        .iter()
        .find(|n| n.master && n.id != from.id)
        .context("no other master")?
        .clone();
    let (mut src, mut dst) = (connect(from.port).await?, connect(to.port).await?);
    let setslot = |state: &str, id: &str| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
        cmd
    };
    setslot("IMPORTING", &from.id)
        .query_async::<()>(&mut dst)
        .await?;
    setslot("MIGRATING", &to.id)
        .query_async::<()>(&mut src)
        .await?;
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query_async(&mut src)
            .await?;
        if keys.is_empty() {
            break;
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(to.port)
            .arg("")
            .arg(0)
            .arg(5_000)
            .arg("KEYS")
            .arg(&keys);
        migrate.query_async::<()>(&mut src).await?;
    }
    for node in nodes.iter().filter(|n| n.master) {
        let mut c = connect(node.port).await?;
        setslot("NODE", &to.id).query_async::<()>(&mut c).await?;
    }
    Ok(())
}
