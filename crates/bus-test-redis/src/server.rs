//! [`RedisServer`]: one `redis-server` child process on a free loopback port.

use std::fs::{self, OpenOptions};
use std::io;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::client::{info_field, Resp, SyncClient};
use crate::error::HarnessError;

const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(5);
/// Short, so a probe that reached some other (silent) listener does not stall the poll loop.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Another process may take a "free" port between our probe and redis' bind.
const PORT_ATTEMPTS: usize = 5;
const LOG_TAIL_LINES: usize = 30;

/// Options for [`RedisServer`]; made by [`RedisServer::builder`].
#[derive(Debug, Clone)]
pub struct ServerBuilder {
    binary: String,
    appendonly: bool,
    args: Vec<String>,
    ready_timeout: Duration,
    cluster: bool,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder {
            binary: "redis-server".to_owned(),
            appendonly: false,
            args: Vec::new(),
            ready_timeout: DEFAULT_READY_TIMEOUT,
            cluster: false,
        }
    }
}

impl ServerBuilder {
    /// The program to run (default `redis-server`, looked up on PATH).
    pub fn binary(mut self, program: impl Into<String>) -> Self {
        self.binary = program.into();
        self
    }

    /// `--appendonly yes|no` (default no). With yes, data survives [`RedisServer::restart`].
    pub fn appendonly(mut self, on: bool) -> Self {
        self.appendonly = on;
        self
    }

    /// One extra command-line argument, passed after the defaults so it can override them:
    /// `.arg("--maxmemory-policy").arg("noeviction")`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// How long to wait for PING to answer after a start or restart (default 10 s).
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Cluster mode: ports are picked so that the bus port (P+10000) is free too.
    pub(crate) fn cluster_enabled(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// Starts the server on a free port and waits until it answers PING.
    pub fn start(self) -> Result<RedisServer, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("bus-test-redis-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temp dir for redis-server", e))?;
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = if self.cluster {
                pick_cluster_port()
            } else {
                free_port()
            }
            .map_err(|e| HarnessError::io("finding a free port on 127.0.0.1", e))?;
            match spawn_ready(&self, dir.path(), port) {
                Ok(child) => {
                    return Ok(RedisServer {
                        config: self,
                        port,
                        child: Some(child),
                        dir,
                    })
                }
                Err(Start::PortTaken(e)) => last_err = Some(e),
                Err(Start::Fatal(e)) => return Err(e),
            }
        }
        Err(last_err.expect("PORT_ATTEMPTS > 0"))
    }
}

/// A `redis-server` child process on a free 127.0.0.1 port, with its own temp dir;
/// killed and cleaned up on Drop.
#[derive(Debug)]
pub struct RedisServer {
    config: ServerBuilder,
    port: u16,
    /// `None` after [`RedisServer::kill`] or a failed restart.
    child: Option<Child>,
    dir: TempDir,
}

impl RedisServer {
    /// Starts a server with the defaults (`--appendonly no --save ""`).
    pub fn start() -> Result<RedisServer, HarnessError> {
        Self::builder().start()
    }

    /// Options: `RedisServer::builder().appendonly(true).start()`.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// The TCP port on 127.0.0.1; it stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's data dir (holds `redis.log` and, with AOF, `appendonlydir/`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id of the running child, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops gracefully (SHUTDOWN, which flushes the AOF; SIGKILL if that fails or
    /// takes over 10 s), then starts again on the same port and data dir and waits
    /// until ready. Also works after [`RedisServer::kill`].
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.stop_gracefully();
        match spawn_ready(&self.config, self.dir.path(), self.port) {
            Ok(child) => {
                self.child = Some(child);
                Ok(())
            }
            Err(Start::PortTaken(e) | Start::Fatal(e)) => Err(e),
        }
    }

    /// SIGKILL, for crash tests (the AOF may lose its last second); [`RedisServer::restart`] works after it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A new blocking connection for assertions and cleanup.
    ///
    /// # Panics
    /// If the server does not accept the connection (use [`SyncClient::connect`] to handle that).
    pub fn client(&self) -> SyncClient {
        SyncClient::connect(self.port)
            .unwrap_or_else(|e| panic!("connecting to redis-server on port {}: {e}", self.port))
    }

    fn stop_gracefully(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // The reply to a successful SHUTDOWN is a closed connection, so the result is ignored.
        if let Ok(mut client) = SyncClient::connect(self.port) {
            let _ = client.cmd(&["SHUTDOWN"]);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) => sleep(POLL),
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

enum Start {
    /// redis-server could not bind its port: worth retrying on another one.
    PortTaken(HarnessError),
    Fatal(HarnessError),
}

/// Spawns redis-server on `port` and waits until it answers PING as itself.
fn spawn_ready(config: &ServerBuilder, dir: &Path, port: u16) -> Result<Child, Start> {
    let fatal = |context: &str, e| Start::Fatal(HarnessError::io(context, e));
    // Startup errors (e.g. a bad argument) go to stderr before the log file is opened.
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("redis.out"))
        .map_err(|e| fatal("creating redis.out", e))?;
    let err = out.try_clone().map_err(|e| fatal("cloning redis.out", e))?;
    let mut cmd = Command::new(&config.binary);
    cmd.arg("--port").arg(port.to_string());
    cmd.args(["--bind", "127.0.0.1", "--dir"]).arg(dir);
    cmd.args(["--save", "", "--appendonly"]);
    cmd.arg(if config.appendonly { "yes" } else { "no" });
    cmd.args(["--daemonize", "no", "--protected-mode", "no", "--logfile"]);
    cmd.arg(dir.join("redis.log"));
    if config.cluster {
        cmd.args(["--cluster-enabled", "yes", "--cluster-config-file"]);
        cmd.arg(dir.join(format!("nodes-{port}.conf")));
    }
    cmd.args(&config.args);
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let mut child = cmd
        .spawn()
        .map_err(|e| Start::Fatal(HarnessError::spawn(&config.binary, e)))?;

    let deadline = Instant::now() + config.ready_timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let log_tail = log_tail(dir);
                let e = HarnessError::NotReady {
                    message: format!(
                        "`{}` exited ({status}) before answering PING on port {port}",
                        config.binary
                    ),
                    log_tail: log_tail.clone(),
                };
                return Err(if log_tail.contains("Address already in use") {
                    Start::PortTaken(e)
                } else {
                    Start::Fatal(e)
                });
            }
            Ok(None) => {}
            Err(e) => return Err(fatal("waiting for redis-server", e)),
        }
        if answers_as(port, child.id()) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Start::Fatal(HarnessError::NotReady {
                message: format!(
                    "redis-server did not answer PING on port {port} within {:?}",
                    config.ready_timeout
                ),
                log_tail: log_tail(dir),
            }));
        }
        sleep(POLL);
    }
}

/// True when PING answers PONG (not `-LOADING`) and the server (or sentinel) is our
/// child, not another process that won a race for the port.
pub(crate) fn answers_as(port: u16, pid: u32) -> bool {
    let Ok(mut client) = SyncClient::connect(port) else {
        return false;
    };
    if client.set_timeout(PROBE_TIMEOUT).is_err() {
        return false;
    }
    if !matches!(client.cmd(&["PING"]), Ok(Resp::Simple(s)) if s == "PONG") {
        return false;
    }
    client
        .info("server")
        .is_ok_and(|info| info_field(&info, "process_id").and_then(|p| p.parse().ok()) == Some(pid))
}

/// The last lines of redis.out (stdout/stderr) and redis.log, for error messages.
fn log_tail(dir: &Path) -> String {
    let mut tail = String::new();
    for name in ["redis.out", "redis.log"] {
        let text = fs::read_to_string(dir.join(name)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.len().saturating_sub(LOG_TAIL_LINES);
        tail.push_str(&format!("[{name}]\n"));
        for line in &lines[start..] {
            tail.push_str(line);
            tail.push('\n');
        }
    }
    tail
}

/// A port the kernel just handed out on 127.0.0.1 (released again before redis binds it).
pub(crate) fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A port P with P and P+10000 (the cluster bus) both free and below 65535.
/// Ephemeral ports (32768-60999) are too high for P+10000, so P is drawn at random
/// from 20000..45000 and checked by binding both.
fn pick_cluster_port() -> io::Result<u16> {
    use std::hash::BuildHasher;
    for _ in 0..200 {
        let r = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
        let port = 20_000 + (r % 25_000) as u16;
        let bound = TcpListener::bind(("127.0.0.1", port))
            .and_then(|a| TcpListener::bind(("127.0.0.1", port + 10_000)).map(|b| (a, b)));
        if bound.is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "no port P with P and P+10000 free on 127.0.0.1",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_is_not_installed_with_a_clear_message() {
        let err = RedisServer::builder()
            .binary("definitely-not-redis-server")
            .start()
            .unwrap_err();
        assert!(
            matches!(&err, HarnessError::NotInstalled { program } if program == "definitely-not-redis-server"),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.starts_with("redis-server is not installed: "), "{msg}");
        assert!(msg.contains("apt-get install -y redis-server"), "{msg}");
        assert!(msg.contains("BUS_TEST_REDIS_URL"), "{msg}");
        assert!(msg.contains("definitely-not-redis-server"), "{msg}");
    }

    #[test]
    fn a_taken_port_is_reported_as_retryable() {
        // A silent listener holds the port: redis must fail to bind, and the probe
        // must not mistake the listener for redis nor hang on it.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        match spawn_ready(&ServerBuilder::default(), dir.path(), port) {
            Err(Start::PortTaken(e)) => assert!(e.to_string().contains("in use"), "{e}"),
            Err(Start::Fatal(e)) => panic!("expected PortTaken, got {e}"),
            Ok(_) => panic!("redis cannot have bound a taken port"),
        }
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_bad_argument_fails_fast_with_the_log_tail() {
        let err = RedisServer::builder()
            .arg("--no-such-option")
            .arg("1")
            .start()
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, HarnessError::NotReady { .. }), "{msg}");
        assert!(msg.contains("no-such-option"), "{msg}");
    }

    #[test]
    fn cluster_ports_leave_room_for_the_bus_port() {
        for _ in 0..20 {
            let p = pick_cluster_port().unwrap();
            assert!((20_000..45_000).contains(&p) && p + 10_000 < 65_535);
        }
    }
}
