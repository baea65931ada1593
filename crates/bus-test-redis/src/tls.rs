//! A redis-server that speaks TLS with a private CA, and an ACL user: what `rediss://`
//! tests need, made for real with the `openssl` CLI.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use crate::{HarnessError, RedisServer};

/// The only account that can log in to a [`TlsRedis`].
pub const TLS_USER: &str = "app";
/// Its password.
pub const TLS_PASSWORD: &str = "s3cret";

/// A redis-server with a TLS port beside its plain one. The plain port stays on loopback
/// for the harness's readiness probe and for [`TlsRedis::server`]'s admin client; the
/// default user is off, so only [`TLS_USER`] with [`TLS_PASSWORD`] can log in.
#[derive(Debug)]
pub struct TlsRedis {
    server: RedisServer,
    tls_port: u16,
    certs: TempDir,
}

impl TlsRedis {
    /// Makes a CA and a server certificate for IP 127.0.0.1 (P-256, valid a day), then
    /// starts the server. Needs the `openssl` CLI.
    pub fn start() -> Result<TlsRedis, HarnessError> {
        let certs = certificates()?;
        let file = |name: &str| certs.path().join(name).display().to_string();
        let mut last = None;
        // The TLS port is chosen here, so losing a race for it is retried here.
        for _ in 0..5 {
            let tls_port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| HarnessError::io("finding a free port", e))?
                .port();
            let started = RedisServer::builder()
                .arg("--tls-port")
                .arg(tls_port.to_string())
                .arg("--tls-cert-file")
                .arg(file("server.crt"))
                .arg("--tls-key-file")
                .arg(file("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(file("ca.crt"))
                .arg("--tls-auth-clients")
                .arg("no")
                .start();
            match started {
                Ok(server) => {
                    let user = format!(">{TLS_PASSWORD}");
                    let mut admin = server.client();
                    for command in [
                        &["ACL", "SETUSER", TLS_USER, "on", &user, "~*", "&*", "+@all"][..],
                        &["ACL", "SETUSER", "default", "off"],
                    ] {
                        let reply = admin
                            .cmd(command)
                            .map_err(|e| HarnessError::io("setting up the ACL user", e))?;
                        if !reply.is_ok() {
                            return Err(HarnessError::NotReady {
                                message: format!("{command:?} was refused: {reply:?}"),
                                log_tail: String::new(),
                            });
                        }
                    }
                    return Ok(TlsRedis {
                        server,
                        tls_port,
                        certs,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("five attempts were made"))
    }

    /// `rediss://app:<password>@127.0.0.1:<tls port>/0`.
    pub fn url(&self, password: &str) -> String {
        format!(
            "rediss://{TLS_USER}:{password}@127.0.0.1:{}/0",
            self.tls_port
        )
    }

    /// The TLS port.
    pub fn tls_port(&self) -> u16 {
        self.tls_port
    }

    /// The CA certificate's file (PEM).
    pub fn ca_path(&self) -> PathBuf {
        self.certs.path().join("ca.crt")
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.ca_path()).expect("the CA file was written at start")
    }

    /// The server, for its plain-port admin client (the default user is off there too:
    /// the admin client was opened before).
    pub fn server(&self) -> &RedisServer {
        &self.server
    }
}

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) -> Result<(), HarnessError> {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| HarnessError::io("running openssl (apt-get install -y openssl)", e))?;
    if output.status.success() {
        return Ok(());
    }
    Err(HarnessError::io(
        format!("openssl {}", args.join(" ")),
        std::io::Error::other(String::from_utf8_lossy(&output.stderr).into_owned()),
    ))
}

/// `ca.crt`, and `server.crt`/`server.key` signed by it for IP 127.0.0.1.
fn certificates() -> Result<TempDir, HarnessError> {
    let dir = tempfile::tempdir().map_err(|e| HarnessError::io("creating a temp dir", e))?;
    let d = dir.path();
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca = [
        &["req", "-x509", "-days", "1", "-subj", "/CN=bus test CA"][..],
        &key,
        &["-keyout", "ca.key", "-out", "ca.crt"],
        &["-addext", "basicConstraints=critical,CA:TRUE"],
        &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
    ];
    openssl(d, &ca.concat())?;
    let csr = [
        &["req", "-subj", "/CN=127.0.0.1"][..],
        &key,
        &["-keyout", "server.key", "-out", "server.csr"],
    ];
    openssl(d, &csr.concat())?;
    std::fs::write(
        d.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
    )
    .map_err(|e| HarnessError::io("writing server.ext", e))?;
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-days",
            "1",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-extfile",
            "server.ext",
        ],
    )?;
    Ok(dir)
}
