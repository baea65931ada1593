//! [`RedisCluster`]: a local Redis Cluster of three masters on loopback.

use std::fs::{self, File};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::client::{info_field, Resp, SyncClient};
use crate::error::HarnessError;
use crate::server::RedisServer;

const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
const STATE_OK_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(20);

/// Three `redis-server --cluster-enabled yes` masters on 127.0.0.1, joined by
/// `redis-cli --cluster create`; every node is killed and cleaned up on Drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three nodes, creates the cluster (no replicas) and waits until every
    /// node reports `cluster_state:ok` with `cluster_size:3`.
    pub fn start() -> Result<RedisCluster, HarnessError> {
        let nodes = (0..3)
            .map(|_| RedisServer::builder().cluster_enabled().start())
            .collect::<Result<Vec<_>, _>>()?;
        create(&nodes)?;
        wait_state_ok(&nodes)?;
        Ok(RedisCluster { nodes })
    }

    /// `redis-cluster://127.0.0.1:P1?node=127.0.0.1:P2&node=127.0.0.1:P3`
    pub fn url(&self) -> String {
        let [p1, p2, p3] = self.ports();
        format!("redis-cluster://127.0.0.1:{p1}?node=127.0.0.1:{p2}&node=127.0.0.1:{p3}")
    }

    /// The client ports of the three masters (each also uses port + 10000 for the cluster bus).
    pub fn ports(&self) -> [u16; 3] {
        [
            self.nodes[0].port(),
            self.nodes[1].port(),
            self.nodes[2].port(),
        ]
    }

    /// The three nodes, e.g. for a per-node [`RedisServer::client`].
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The three nodes, e.g. to [`RedisServer::kill`] or restart one (its
    /// `nodes-P.conf` survives in its dir, so it rejoins).
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }
}

fn create(nodes: &[RedisServer]) -> Result<(), HarnessError> {
    // Output goes to a file, not a pipe, so a chatty redis-cli can never block on a full pipe.
    let out_path = nodes[0].dir().join("cluster-create.out");
    let out = File::create(&out_path)
        .and_then(|f| Ok((f.try_clone()?, f)))
        .map_err(|e| HarnessError::io("creating cluster-create.out", e))?;
    let mut cmd = Command::new("redis-cli");
    cmd.args(["--cluster", "create"]);
    cmd.args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
    cmd.args(["--cluster-replicas", "0", "--cluster-yes"]);
    cmd.stdin(Stdio::null()).stdout(out.0).stderr(out.1);
    let mut child = cmd
        .spawn()
        .map_err(|e| HarnessError::spawn("redis-cli", e))?;

    let deadline = Instant::now() + CREATE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() < deadline => sleep(POLL),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!("did not finish within {CREATE_TIMEOUT:?}"));
            }
            Err(e) => break Err(e.to_string()),
        }
    };
    let output = || fs::read_to_string(&out_path).unwrap_or_default();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(HarnessError::Cluster {
            message: format!("`redis-cli --cluster create` failed ({s})"),
            detail: output(),
        }),
        Err(why) => Err(HarnessError::Cluster {
            message: format!("`redis-cli --cluster create`: {why}"),
            detail: output(),
        }),
    }
}

/// Polls `CLUSTER INFO` on every node until all agree the cluster is formed.
fn wait_state_ok(nodes: &[RedisServer]) -> Result<(), HarnessError> {
    let deadline = Instant::now() + STATE_OK_TIMEOUT;
    let mut pending = nodes.iter().map(RedisServer::port).collect::<Vec<_>>();
    while let Some(&port) = pending.first() {
        let last_info = match cluster_info(port) {
            Ok(info) if is_formed(&info) => {
                pending.remove(0);
                continue;
            }
            Ok(info) => format!("CLUSTER INFO on port {port}:\n{info}"),
            Err(e) => format!("CLUSTER INFO on port {port}: {e}"),
        };
        if Instant::now() >= deadline {
            return Err(HarnessError::Cluster {
                message: format!("not cluster_state:ok on every node within {STATE_OK_TIMEOUT:?}"),
                detail: last_info,
            });
        }
        sleep(POLL);
    }
    Ok(())
}

fn is_formed(info: &str) -> bool {
    info_field(info, "cluster_state") == Some("ok")
        && info_field(info, "cluster_size") == Some("3")
        && info_field(info, "cluster_known_nodes") == Some("3")
}

fn cluster_info(port: u16) -> std::io::Result<String> {
    match SyncClient::connect(port)?.cmd(&["CLUSTER", "INFO"])? {
        Resp::Bulk(Some(b)) => Ok(String::from_utf8_lossy(&b).into_owned()),
        other => Err(std::io::Error::other(format!("unexpected reply {other:?}"))),
    }
}
