//! [`PostgresServer`]: a private PostgreSQL cluster (`initdb` into a temp dir, then
//! `postgres`) on a free 127.0.0.1 port, for the outbox and inbox tests.
//!
//! PostgreSQL refuses to run as root, so as root the cluster belongs to Debian's
//! `postgres` user (else `nobody`) and both programs run under it; as anyone else they
//! run as that user. Authentication is `trust` and the server listens on loopback only,
//! with no Unix socket (its default directory may not exist or be writable). `fsync` is
//! off: a killed server keeps every commit (the WAL is written, only not flushed), and
//! only a machine crash could lose one, which no test does.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::error::HarnessError;
use crate::server::free_port;

/// How long a start (crash recovery included) may take before the harness gives up.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(10);
const PORT_ATTEMPTS: usize = 5;
const LOG_TAIL_LINES: usize = 30;
/// The environment variable naming the directory of `initdb` and `postgres`, when they
/// are not in Debian's place (`/usr/lib/postgresql/<version>/bin`) nor on `PATH`.
pub const PG_BIN_ENV: &str = "BUS_TEST_PG_BIN";

/// A `postgres` child process on a free 127.0.0.1 port with its own cluster in a temp
/// dir; killed and removed on Drop. The superuser is `postgres`, with no password.
///
/// ```no_run
/// let pg = bus_test_redis::PostgresServer::start()?;
/// let url = pg.create_database()?; // postgres://postgres@127.0.0.1:PORT/test_...
/// # Ok::<(), bus_test_redis::HarnessError>(())
/// ```
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    bin: PathBuf,
    /// Who runs the server: `Some((uid, gid))` when the harness runs as root.
    owner: Option<(u32, u32)>,
    /// `None` after [`PostgresServer::kill`] or a failed restart.
    child: Option<Child>,
    dir: TempDir,
}

impl PostgresServer {
    /// Makes a cluster with `initdb` and starts it; waits until it accepts connections.
    pub fn start() -> Result<PostgresServer, HarnessError> {
        let bin = bin_dir()?;
        let owner = server_owner()?;
        let dir = tempfile::Builder::new()
            .prefix("bus-test-postgres-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temp dir for postgres", e))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| HarnessError::io("handing the temp dir to the postgres user", e))?;
        }
        init_cluster(&bin, owner, dir.path())?;
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            let port =
                free_port().map_err(|e| HarnessError::io("finding a free port on 127.0.0.1", e))?;
            match spawn_ready(&bin, owner, dir.path(), port) {
                Ok(child) => {
                    return Ok(PostgresServer {
                        port,
                        bin,
                        owner,
                        child: Some(child),
                        dir,
                    })
                }
                Err(Start::PortTaken(e)) => last_err = Some(e),
                Err(Start::Fatal(e)) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| not_ready("no port tried".into(), String::new())))
    }

    /// The TCP port on 127.0.0.1; it stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `name`: `postgres://postgres@127.0.0.1:PORT/NAME`.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// The process id of the running postmaster, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Creates a fresh, empty database and returns its URL: one per test, so tests
    /// sharing a server never see each other's tables.
    pub fn create_database(&self) -> Result<String, HarnessError> {
        let name = format!("test_{}", ulid::Ulid::new().to_string().to_lowercase());
        self.psql("postgres", &format!("CREATE DATABASE {name}"))?;
        Ok(self.url(&name))
    }

    /// Runs one SQL command with `psql` in database `database` and returns its output
    /// (unaligned, tuples only): for assertions and set-up outside the code under test.
    pub fn psql(&self, database: &str, sql: &str) -> Result<String, HarnessError> {
        let program = self.bin.join("psql");
        let psql = if program.exists() {
            program
        } else {
            PathBuf::from("psql")
        };
        let output = Command::new(&psql)
            .args(["-h", "127.0.0.1", "-U", "postgres", "-X", "-A", "-t"])
            .args(["-v", "ON_ERROR_STOP=1", "-p"])
            .arg(self.port.to_string())
            .args(["-d", database, "-c", sql])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| HarnessError::spawn(&psql.to_string_lossy(), e))?;
        if !output.status.success() {
            return Err(not_ready(
                format!("psql failed ({}) running {sql:?}", output.status),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            ));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Stops the server the way an operator does (a fast shutdown: sessions are ended,
    /// their transactions rolled back), then starts it again on the same port and
    /// cluster and waits until it accepts connections. Also works after
    /// [`PostgresServer::kill`].
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.stop_with("-INT");
        self.start_again()
    }

    /// SIGKILLs the postmaster, for crash tests: its sessions end when they notice, and
    /// the next start runs crash recovery. [`PostgresServer::restart`] works after it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the stopped or killed server again (crash recovery included), retrying
    /// while the killed server's sessions still hold its shared memory.
    fn start_again(&mut self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match spawn_ready(&self.bin, self.owner, self.dir.path(), self.port) {
                Ok(child) => {
                    self.child = Some(child);
                    return Ok(());
                }
                Err(Start::PortTaken(e) | Start::Fatal(e)) if Instant::now() >= deadline => {
                    return Err(e)
                }
                Err(_) => sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Sends `signal` to the postmaster (`-INT`: fast shutdown, `-QUIT`: immediate) and
    /// waits for it to exit; SIGKILL if it takes too long.
    fn stop_with(&mut self, signal: &str) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
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

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // Immediate shutdown: the postmaster ends its sessions before the dir goes.
        self.stop_with("-QUIT");
    }
}

enum Start {
    /// postgres could not bind its port: worth retrying on another one.
    PortTaken(HarnessError),
    Fatal(HarnessError),
}

fn not_ready(message: String, log_tail: String) -> HarnessError {
    HarnessError::PostgresNotReady { message, log_tail }
}

/// Where `initdb` and `postgres` are: [`PG_BIN_ENV`], else the newest of Debian's
/// `/usr/lib/postgresql/<version>/bin`, else the directory of `initdb` on `PATH`.
fn bin_dir() -> Result<PathBuf, HarnessError> {
    if let Some(dir) = std::env::var_os(PG_BIN_ENV) {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .find(|dir| dir.join("initdb").exists() && dir.join("postgres").exists())
        .ok_or_else(|| HarnessError::ServerMissing {
            program: "initdb".into(),
            install: format!(
                "install Debian's package with `apt-get install -y postgresql`, \
                 or name the directory of initdb and postgres in {PG_BIN_ENV}"
            ),
        })
}

/// `Some((uid, gid))` of the user to run PostgreSQL as when this process is root
/// (`postgres`, else `nobody`), `None` otherwise.
fn server_owner() -> Result<Option<(u32, u32)>, HarnessError> {
    let me = fs::metadata("/proc/self")
        .map_err(|e| HarnessError::io("reading who runs the tests (/proc/self)", e))?;
    if me.uid() != 0 {
        return Ok(None);
    }
    let passwd = fs::read_to_string("/etc/passwd")
        .map_err(|e| HarnessError::io("reading /etc/passwd", e))?;
    let user = |name: &str| {
        passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() > 3 && fields[0] == name)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
    };
    user("postgres")
        .or_else(|| user("nobody"))
        .map(Some)
        .ok_or_else(|| {
            HarnessError::io(
                "running PostgreSQL as root is refused, and neither a `postgres` nor a `nobody` user exists",
                io::Error::from(io::ErrorKind::NotFound),
            )
        })
}

fn command(bin: &Path, program: &str, owner: Option<(u32, u32)>) -> Command {
    let mut command = Command::new(bin.join(program));
    if let Some((uid, gid)) = owner {
        command.uid(uid).gid(gid);
    }
    // Server messages in English, whatever the machine's locale.
    command.env("LC_MESSAGES", "C").env_remove("PGDATA");
    command
}

/// `initdb` into `<dir>/data`: trust authentication, superuser `postgres`, no fsync.
fn init_cluster(bin: &Path, owner: Option<(u32, u32)>, dir: &Path) -> Result<(), HarnessError> {
    let program = bin.join("initdb");
    let output = command(bin, "initdb", owner)
        .arg("-D")
        .arg(dir.join("data"))
        .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"])
        .args(["--no-sync", "--no-instructions"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| HarnessError::spawn(&program.to_string_lossy(), e))?;
    if !output.status.success() {
        return Err(not_ready(
            format!("initdb failed ({})", output.status),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        ));
    }
    Ok(())
}

/// Starts `postgres` on `port` and waits until its postmaster.pid says `ready` and the
/// port accepts a connection.
fn spawn_ready(
    bin: &Path,
    owner: Option<(u32, u32)>,
    dir: &Path,
    port: u16,
) -> Result<Child, Start> {
    let fatal = |context: &str, e| Start::Fatal(HarnessError::io(context, e));
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("postgres.log"))
        .map_err(|e| fatal("creating postgres.log", e))?;
    let err = log
        .try_clone()
        .map_err(|e| fatal("cloning postgres.log", e))?;
    let data = dir.join("data");
    let mut child = command(bin, "postgres", owner)
        .arg("-D")
        .arg(&data)
        .args(["-p", &port.to_string()])
        .args(["-c", "listen_addresses=127.0.0.1"])
        .args(["-c", "unix_socket_directories="])
        .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
        .args(["-c", "max_connections=200"])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|e| Start::Fatal(HarnessError::spawn("postgres", e)))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let tail = log_tail(dir);
                let e = not_ready(
                    format!(
                        "postgres exited ({status}) before accepting connections on port {port}"
                    ),
                    tail.clone(),
                );
                return Err(if tail.contains("could not bind") {
                    Start::PortTaken(e)
                } else {
                    Start::Fatal(e)
                });
            }
            Ok(None) => {}
            Err(e) => return Err(fatal("waiting for postgres", e)),
        }
        if ready(&data, child.id()) && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Start::Fatal(not_ready(
                format!(
                    "postgres did not accept connections on port {port} within {READY_TIMEOUT:?}"
                ),
                log_tail(dir),
            )));
        }
        sleep(POLL);
    }
}

/// Whether the postmaster `pid` says in its lock file that it accepts connections (the
/// file's first line is its pid, its eighth its status).
fn ready(data: &Path, pid: u32) -> bool {
    let Ok(text) = fs::read_to_string(data.join("postmaster.pid")) else {
        return false;
    };
    let lines: Vec<&str> = text.lines().collect();
    lines.first().map(|l| l.trim()) == Some(pid.to_string().as_str())
        && lines.get(7).is_some_and(|status| status.trim() == "ready")
}

fn log_tail(dir: &Path) -> String {
    let text = fs::read_to_string(dir.join("postgres.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_serves_a_fresh_database_and_survives_restarts_and_kills() {
        let mut pg = PostgresServer::start().unwrap();
        let url = pg.create_database().unwrap();
        let name = url.rsplit('/').next().unwrap().to_owned();
        pg.psql(&name, "CREATE TABLE t (n int); INSERT INTO t VALUES (7)")
            .unwrap();
        pg.restart().unwrap();
        assert_eq!(pg.psql(&name, "SELECT n FROM t").unwrap(), "7");
        pg.kill();
        assert!(pg.psql(&name, "SELECT 1").is_err());
        pg.restart().unwrap();
        assert_eq!(pg.psql(&name, "SELECT n FROM t").unwrap(), "7");
        let other = pg.create_database().unwrap();
        assert_ne!(other, url);
        let dir = pg.dir.path().to_owned();
        drop(pg);
        assert!(!dir.exists());
    }
}
