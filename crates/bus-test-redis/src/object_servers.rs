//! Object storage servers for the attachment tests: [`Azurite`] (Microsoft's Azure Blob
//! emulator, from npm) and [`MotoS3`] (moto's S3 in server mode, from PyPI), each a child
//! process on a free loopback port with a bucket (container) made for the test, killed in
//! `Drop`. scripts/test.sh installs both (pinned) where [`azurite_blob`] and
//! [`moto_server`] look; a missing one is an error naming the install command, never a
//! skipped test.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::error::HarnessError;
use crate::server::free_port;

/// Overrides the `azurite-blob` program.
pub const AZURITE_ENV: &str = "BUS_TEST_AZURITE_BLOB";
/// What scripts/test.sh installs (`npm install --prefix target/object-servers ...`).
pub const AZURITE_PACKAGE: &str = "azurite@3.35.0";
/// Overrides the `moto_server` program.
pub const MOTO_ENV: &str = "BUS_TEST_MOTO_SERVER";
/// What scripts/test.sh installs into its venv `target/bq-venv` (`pip install "..."`).
pub const MOTO_PACKAGE: &str = "moto[server]==5.1.22";

/// Node and Python servers take a second or two to listen; a loaded machine more.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(20);
/// Another process may take a "free" port between the probe and the server's bind.
const PORT_ATTEMPTS: usize = 3;
const OUTPUT_TAIL: usize = 4000;

/// The workspace's `target/`, where scripts/test.sh installs the servers.
fn workspace_target() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target")
}

/// The `azurite-blob` program: `BUS_TEST_AZURITE_BLOB`, else the one scripts/test.sh
/// installs under `target/object-servers`.
pub fn azurite_blob() -> Result<PathBuf, HarnessError> {
    let program = std::env::var(AZURITE_ENV).map_or_else(
        |_| workspace_target().join("object-servers/node_modules/.bin/azurite-blob"),
        PathBuf::from,
    );
    installed(
        program,
        format!(
            "run scripts/test.sh (it runs `npm install --prefix target/object-servers \
             {AZURITE_PACKAGE}`; needs Debian's `nodejs npm`) or set {AZURITE_ENV}"
        ),
    )
}

/// The `moto_server` program: `BUS_TEST_MOTO_SERVER`, else the one scripts/test.sh
/// installs into the venv `target/bq-venv`.
pub fn moto_server() -> Result<PathBuf, HarnessError> {
    let program = std::env::var(MOTO_ENV).map_or_else(
        |_| workspace_target().join("bq-venv/bin/moto_server"),
        PathBuf::from,
    );
    installed(
        program,
        format!(
            "run scripts/test.sh (it runs `target/bq-venv/bin/pip install \"{MOTO_PACKAGE}\"`) \
             or set {MOTO_ENV}"
        ),
    )
}

fn installed(program: PathBuf, install: String) -> Result<PathBuf, HarnessError> {
    if program.exists() {
        Ok(program)
    } else {
        Err(HarnessError::ServerMissing {
            program: program.display().to_string(),
            install,
        })
    }
}

/// A server child process whose output goes to a file in its temp dir.
#[derive(Debug)]
struct ServerProcess {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl ServerProcess {
    /// Starts `program` with the arguments `args(port, dir)` until one port works, and
    /// waits until it accepts connections.
    fn start(
        program: &Path,
        args: impl Fn(u16, &Path) -> Vec<String>,
    ) -> Result<ServerProcess, HarnessError> {
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port().map_err(|e| HarnessError::io("finding a free port", e))?;
            match Self::start_on(program, &args, port) {
                Ok(server) => return Ok(server),
                // Exited early: the port may have been taken; try another.
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| HarnessError::NotReady {
            message: format!("`{}` did not start", program.display()),
            log_tail: String::new(),
        }))
    }

    /// Starts `program` on `port` and waits until it listens there itself.
    fn start_on(
        program: &Path,
        args: &impl Fn(u16, &Path) -> Vec<String>,
        port: u16,
    ) -> Result<ServerProcess, HarnessError> {
        let name = program.display().to_string();
        let dir = TempDir::new().map_err(|e| HarnessError::io("creating a temp dir", e))?;
        let out = std::fs::File::create(dir.path().join("server.out"))
            .map_err(|e| HarnessError::io("creating server.out", e))?;
        let err = out
            .try_clone()
            .map_err(|e| HarnessError::io("cloning server.out", e))?;
        let child = Command::new(program)
            .args(args(port, dir.path()))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| HarnessError::io(format!("spawning `{name}`"), e))?;
        let mut server = ServerProcess { child, port, dir };
        server.wait_ready(&name)?;
        Ok(server)
    }

    fn wait_ready(&mut self, name: &str) -> Result<(), HarnessError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(HarnessError::NotReady {
                    message: format!("`{name}` exited ({status}) before listening on {addr}"),
                    log_tail: self.output(),
                });
            }
            // (Another test's server may hold the port that was free when it was picked:
            // its answer is not ours, and our child then exits on the bind and is retried.)
            if listens(self.child.id(), self.port)
                && TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(HarnessError::NotReady {
                    message: format!("`{name}` did not listen on {addr} within {READY_TIMEOUT:?}"),
                    log_tail: self.output(),
                });
            }
            sleep(POLL);
        }
    }

    /// The end of what the server printed.
    fn output(&self) -> String {
        let all = std::fs::read_to_string(self.dir.path().join("server.out")).unwrap_or_default();
        let start = all.len().saturating_sub(OUTPUT_TAIL);
        all.get(start..).unwrap_or(&all).to_owned()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether process `pid` holds the socket listening on 127.0.0.1:`port`: the listener's
/// inode in `/proc/net/tcp`, found among the process's descriptors.
fn listens(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let local = format!("0100007F:{port:04X}");
    // Fields: slot, local address, remote address, state (0A: listening), ..., inode.
    let sockets: Vec<String> = table
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|fields| fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"0A"))
        .filter_map(|fields| fields.get(9).map(|inode| format!("socket:[{inode}]")))
        .collect();
    let Ok(descriptors) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    !sockets.is_empty()
        && descriptors.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| sockets.iter().any(|s| target.as_os_str() == s.as_str()))
        })
}

/// Runs a Python 3 standard-library script (what makes buckets: no SDK needed).
fn python(script: &str, args: &[&str]) -> Result<(), HarnessError> {
    let interpreter =
        std::env::var(crate::python::SYSTEM_PYTHON_ENV).unwrap_or_else(|_| "python3".into());
    let output = Command::new(&interpreter)
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| HarnessError::io(format!("running `{interpreter}`"), e))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(HarnessError::NotReady {
            message: format!("making a bucket failed ({})", output.status),
            log_tail: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

/// Azurite's Blob service: the well-known development account, one container.
#[derive(Debug)]
pub struct Azurite {
    server: ServerProcess,
}

/// Creates a container with a Shared Key signed request (Azurite checks it).
const CREATE_CONTAINER: &str = r#"
import base64, hashlib, hmac, sys, urllib.request
from email.utils import formatdate
port, account, key, container = sys.argv[1:5]
date, version = formatdate(usegmt=True), "2021-08-06"
resource = f"/{account}/{account}/{container}\nrestype:container"
to_sign = "PUT\n" + "\n" * 11 + f"x-ms-date:{date}\nx-ms-version:{version}\n" + resource
mac = hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()
request = urllib.request.Request(
    f"http://127.0.0.1:{port}/{account}/{container}?restype=container", method="PUT",
    headers={"x-ms-date": date, "x-ms-version": version, "Content-Length": "0",
             "Authorization": f"SharedKey {account}:{base64.b64encode(mac).decode()}"})
urllib.request.urlopen(request, timeout=30).read()
"#;

impl Azurite {
    /// The emulator's well-known account.
    pub const ACCOUNT: &'static str = "devstoreaccount1";
    /// The emulator's well-known (public) account key.
    pub const KEY: &'static str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
    /// The container made at start.
    pub const CONTAINER: &'static str = "attachments";

    /// Starts `azurite-blob` (its data in the temp dir), telemetry off,
    /// and makes [`Azurite::CONTAINER`].
    pub fn start() -> Result<Azurite, HarnessError> {
        let program = azurite_blob()?;
        let server = ServerProcess::start(&program, |port, dir| {
            vec![
                "--blobHost".into(),
                "127.0.0.1".into(),
                "--blobPort".into(),
                port.to_string(),
                "--location".into(),
                dir.join("data").display().to_string(),
                "--silent".into(),
                "--disableTelemetry".into(),
                "--skipApiVersionCheck".into(),
            ]
        })?;
        let port = server.port.to_string();
        python(
            CREATE_CONTAINER,
            &[&port, Self::ACCOUNT, Self::KEY, Self::CONTAINER],
        )?;
        Ok(Azurite { server })
    }

    /// The Blob endpoint, `http://127.0.0.1:PORT/devstoreaccount1` (path style).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{}", self.server.port, Self::ACCOUNT)
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.server.port
    }
}

/// moto's S3 in server mode (no credentials checked), one bucket.
#[derive(Debug)]
pub struct MotoS3 {
    server: ServerProcess,
}

const CREATE_BUCKET: &str = r#"
import sys, urllib.request
port, bucket = sys.argv[1:3]
request = urllib.request.Request(f"http://127.0.0.1:{port}/{bucket}", method="PUT")
urllib.request.urlopen(request, timeout=30).read()
"#;

impl MotoS3 {
    /// The bucket made at start.
    pub const BUCKET: &'static str = "attachments";
    /// The region the bucket is in.
    pub const REGION: &'static str = "us-east-1";

    /// Starts `moto_server` and makes [`MotoS3::BUCKET`].
    pub fn start() -> Result<MotoS3, HarnessError> {
        let program = moto_server()?;
        let server = ServerProcess::start(&program, |port, _| {
            vec![
                "-H".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
            ]
        })?;
        let port = server.port.to_string();
        python(CREATE_BUCKET, &[&port, Self::BUCKET])?;
        Ok(MotoS3 { server })
    }

    /// The S3 endpoint, `http://127.0.0.1:PORT` (path-style requests).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port)
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.server.port
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_lost_its_port_is_not_taken_for_the_one_there() {
        // Another test's server on the port that was free when it was picked.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let http = |port: u16, _: &Path| {
            [
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
            ]
            .map(String::from)
            .to_vec()
        };
        let started = ServerProcess::start_on(Path::new("python3"), &http, port);
        assert!(
            matches!(&started, Err(HarnessError::NotReady { .. })),
            "a server that could not bind {port} was taken as ready: {started:?}"
        );
        drop(taken);
    }

    #[test]
    fn a_listener_belongs_to_its_own_process_only() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(
            listens(std::process::id(), port),
            "our own listener on {port}"
        );
        // Another process (a child that holds no socket) does not own it.
        let mut other = Command::new("sleep").arg("30").spawn().unwrap();
        let others = listens(other.id(), port);
        let _ = other.kill();
        let _ = other.wait();
        assert!(
            !others,
            "the listener on {port} taken for another process's"
        );
        drop(listener);
        assert!(
            !listens(std::process::id(), port),
            "a closed listener on {port}"
        );
    }
}
