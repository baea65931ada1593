//! [`RedisSentinel`]: a master, a replica and three sentinels on loopback, for failover
//! tests.

use std::fs::{self, OpenOptions};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::client::{info_field, SyncClient};
use crate::error::HarnessError;
use crate::proxy::Proxy;
use crate::server::{answers_as, free_port, RedisServer, ServerBuilder};

/// Sentinels that must agree the master is down (of three).
const QUORUM: u32 = 2;
/// How long a master may stay silent before a sentinel takes it for down.
pub const DOWN_AFTER: Duration = Duration::from_secs(1);
/// Also the least time between two failovers of one master (twice this).
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(4);
const READY_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(20);
const PORT_ATTEMPTS: usize = 5;

/// Options for [`RedisSentinel`]; made by [`RedisSentinel::builder`].
#[derive(Debug, Clone, Default)]
pub struct SentinelBuilder {
    replication_proxy: bool,
}

impl SentinelBuilder {
    /// The replica replicates through a [`Proxy`] the test controls, so that a test can
    /// stop replication ([`Proxy::blackhole`]) while both servers stay up.
    pub fn replication_proxy(mut self) -> Self {
        self.replication_proxy = true;
        self
    }

    /// Starts the master, the replica (and waits for its link), then three sentinels
    /// (quorum 2, down-after 1 s), and waits until each knows the replica and the two
    /// other sentinels.
    pub fn start(self) -> Result<RedisSentinel, HarnessError> {
        let master = data_node().start()?;
        let proxy = if self.replication_proxy {
            Some(
                Proxy::start(master.port())
                    .map_err(|e| HarnessError::io("starting the replication proxy", e))?,
            )
        } else {
            None
        };
        let upstream = proxy.as_ref().map_or(master.port(), Proxy::port);
        let replica = data_node()
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(upstream.to_string())
            .start()?;
        wait_until(READY_TIMEOUT, "the replica's link to the master", || {
            let info = SyncClient::connect(replica.port())?.info("replication")?;
            Ok(info_field(&info, "master_link_status") == Some("up"))
        })?;
        // A name of its own: sentinels adopt the master of any sentinel they hear of
        // under the name they monitor, so two sets must never share one.
        let service = format!("bus-{}", ulid::Ulid::new().to_string().to_lowercase());
        let sentinels = (0..3)
            .map(|_| Sentinel::start(&service, master.port()))
            .collect::<Result<Vec<_>, _>>()?;
        for sentinel in &sentinels {
            wait_until(READY_TIMEOUT, "sentinels to find each other", || {
                let master = sentinel.master_fields()?;
                Ok(field(&master, "num-other-sentinels") == Some("2")
                    && field(&master, "num-slaves") == Some("1"))
            })?;
        }
        Ok(RedisSentinel {
            service,
            nodes: vec![master, replica],
            proxy,
            sentinels,
        })
    }
}

/// A data node: either may become the master. A full sync starts at once instead of
/// after Redis's 5 s `repl-diskless-sync-delay`, and an empty replica loads it from the
/// socket, without a temp file on disk.
fn data_node() -> ServerBuilder {
    RedisServer::builder()
        .arg("--repl-diskless-sync-delay")
        .arg("0")
        .arg("--repl-diskless-load")
        .arg("on-empty-db")
}

/// A master and a replica (`redis-server`, no persistence; full syncs start at once)
/// watched by three sentinels
/// (`redis-server <conf> --sentinel`), all on free 127.0.0.1 ports; everything is killed
/// and its temp dir removed on Drop.
///
/// ```no_run
/// let mut ha = bus_test_redis::RedisSentinel::start()?;
/// let url = ha.url(); // redis-sentinel://127.0.0.1:P?sentinelServiceName=bus-<ulid>&node=...
/// let old = ha.master_port()?;
/// ha.node_mut(old).unwrap().kill();
/// let new = ha.wait_for_new_master(old, std::time::Duration::from_secs(20))?;
/// # Ok::<(), bus_test_redis::HarnessError>(())
/// ```
#[derive(Debug)]
pub struct RedisSentinel {
    service: String,
    /// The first master, then its replica.
    nodes: Vec<RedisServer>,
    proxy: Option<Proxy>,
    sentinels: Vec<Sentinel>,
}

impl RedisSentinel {
    /// Starts the defaults: the replica replicates directly.
    pub fn start() -> Result<RedisSentinel, HarnessError> {
        SentinelBuilder::default().start()
    }

    /// Options: `RedisSentinel::builder().replication_proxy().start()`.
    pub fn builder() -> SentinelBuilder {
        SentinelBuilder::default()
    }

    /// `redis-sentinel://127.0.0.1:S1?sentinelServiceName=NAME&node=127.0.0.1:S2&node=127.0.0.1:S3`
    /// (fred's form: the first sentinel is the host, the others are `node`s).
    pub fn url(&self) -> String {
        let ports = self.sentinel_ports();
        let mut url = format!(
            "redis-sentinel://127.0.0.1:{}?sentinelServiceName={}",
            ports[0], self.service
        );
        for port in &ports[1..] {
            url.push_str(&format!("&node=127.0.0.1:{port}"));
        }
        url
    }

    /// The service name the sentinels monitor: `bus-` and a ULID, unique per instance.
    pub fn service_name(&self) -> &str {
        &self.service
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The two data nodes: the first master, then the first replica.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The data node on `port`, e.g. to [`RedisServer::kill`] the master.
    pub fn node_mut(&mut self, port: u16) -> Option<&mut RedisServer> {
        self.nodes.iter_mut().find(|n| n.port() == port)
    }

    /// The proxy the replica replicates through, with
    /// [`SentinelBuilder::replication_proxy`].
    pub fn replication_proxy(&self) -> Option<&Proxy> {
        self.proxy.as_ref()
    }

    /// The master's port as the first sentinel that answers says
    /// (`SENTINEL get-master-addr-by-name`).
    pub fn master_port(&self) -> Result<u16, HarnessError> {
        let mut last = None;
        for sentinel in &self.sentinels {
            match sentinel.master_port() {
                Ok(port) => return Ok(port),
                Err(e) => last = Some(e),
            }
        }
        Err(HarnessError::io(
            "asking the sentinels for the master",
            last.unwrap_or_else(|| std::io::Error::other("no sentinel")),
        ))
    }

    /// Waits until every sentinel names a master other than `old` and that server says
    /// it is a master; its port.
    pub fn wait_for_new_master(&self, old: u16, limit: Duration) -> Result<u16, HarnessError> {
        let mut new = old;
        wait_until(limit, "a sentinel failover", || {
            let ports = self
                .sentinels
                .iter()
                .map(Sentinel::master_port)
                .collect::<std::io::Result<Vec<_>>>()?;
            let agreed = ports.iter().all(|&p| p == ports[0] && p != old);
            if !agreed {
                return Ok(false);
            }
            new = ports[0];
            let info = SyncClient::connect(new)?.info("replication")?;
            Ok(info_field(&info, "role") == Some("master"))
        })?;
        Ok(new)
    }
}

/// One `redis-server --sentinel` child with its config file in a temp dir.
#[derive(Debug)]
struct Sentinel {
    service: String,
    port: u16,
    child: Child,
    _dir: TempDir,
}

impl Sentinel {
    fn start(service: &str, master: u16) -> Result<Sentinel, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("bus-test-sentinel-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temp dir for a sentinel", e))?;
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port().map_err(|e| HarnessError::io("finding a free port", e))?;
            match spawn(dir.path(), port, service, master) {
                Ok(child) => {
                    return Ok(Sentinel {
                        service: service.to_owned(),
                        port,
                        child,
                        _dir: dir,
                    })
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            HarnessError::io("starting a sentinel", std::io::Error::other("no attempt"))
        }))
    }

    /// `SENTINEL MASTER bus` as field → value pairs.
    fn master_fields(&self) -> std::io::Result<Vec<(String, String)>> {
        let reply = SyncClient::connect(self.port)?.cmd(&["SENTINEL", "MASTER", &self.service])?;
        let items = reply.as_array().unwrap_or_default();
        Ok(items
            .chunks(2)
            .filter_map(|pair| match pair {
                [k, v] => Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())),
                _ => None,
            })
            .collect())
    }

    fn master_port(&self) -> std::io::Result<u16> {
        let reply = SyncClient::connect(self.port)?.cmd(&[
            "SENTINEL",
            "GET-MASTER-ADDR-BY-NAME",
            &self.service,
        ])?;
        match reply.as_array() {
            Some([_, port]) => port
                .as_str()
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| std::io::Error::other(format!("a master port {port:?}"))),
            _ => Err(std::io::Error::other(format!("a master address {reply:?}"))),
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(dir: &Path, port: u16, service: &str, master: u16) -> Result<Child, HarnessError> {
    let conf = dir.join("sentinel.conf");
    let text = format!(
        "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n\
         dir {dir}\nlogfile {log}\n\
         sentinel monitor {service} 127.0.0.1 {master} {QUORUM}\n\
         sentinel down-after-milliseconds {service} {down}\n\
         sentinel failover-timeout {service} {failover}\n\
         sentinel parallel-syncs {service} 1\n",
        dir = dir.display(),
        log = dir.join("sentinel.log").display(),
        down = DOWN_AFTER.as_millis(),
        failover = FAILOVER_TIMEOUT.as_millis(),
    );
    // A sentinel rewrites its config file, so it is one of its own.
    fs::write(&conf, text).map_err(|e| HarnessError::io("writing sentinel.conf", e))?;
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("sentinel.out"))
        .map_err(|e| HarnessError::io("creating sentinel.out", e))?;
    let err = out
        .try_clone()
        .map_err(|e| HarnessError::io("cloning sentinel.out", e))?;
    // Debian's `redis-server --sentinel` is a sentinel where `redis-sentinel` is absent.
    let mut child = Command::new("redis-server")
        .arg(&conf)
        .arg("--sentinel")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| HarnessError::spawn("redis-server", e))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(HarnessError::NotReady {
                message: format!("the sentinel on port {port} exited ({status})"),
                log_tail: tail(dir),
            });
        }
        if answers_as(port, child.id()) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(HarnessError::NotReady {
                message: format!("the sentinel on port {port} did not answer PING"),
                log_tail: tail(dir),
            });
        }
        sleep(POLL);
    }
}

fn tail(dir: &Path) -> String {
    ["sentinel.out", "sentinel.log"]
        .iter()
        .map(|name| fs::read_to_string(dir.join(name)).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Polls `check` until it answers true; an error of `check` counts as "not yet".
fn wait_until(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> std::io::Result<bool>,
) -> Result<(), HarnessError> {
    let deadline = Instant::now() + limit;
    let mut last = String::new();
    loop {
        match check() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last = e.to_string(),
        }
        if Instant::now() >= deadline {
            return Err(HarnessError::NotReady {
                message: format!("waited {limit:?} for {what}"),
                log_tail: last,
            });
        }
        sleep(POLL);
    }
}
