//! The `bus` tool over `rediss://` for real: a private CA and a server certificate made
//! with the `openssl` CLI, a redis-server listening with TLS, an ACL user. The `tls`
//! feature is on by default, so an installed `bus` speaks TLS.

#![cfg(feature = "tls")]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use bus_test_redis::RedisServer;
use tempfile::TempDir;

/// Runs `openssl` in `dir`; panics with its output if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("the TLS tests need the openssl CLI: {e}"));
    assert!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ca.crt`, and `server.crt`/`server.key` signed by it for IP 127.0.0.1 (P-256, a day).
fn certificates() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca = [
        &["req", "-x509", "-days", "1", "-subj", "/CN=bus CLI test CA"][..],
        &key,
        &["-keyout", "ca.key", "-out", "ca.crt"],
        &["-addext", "basicConstraints=critical,CA:TRUE"],
        &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
    ];
    openssl(d, &ca.concat());
    let csr = [
        &["req", "-subj", "/CN=127.0.0.1"][..],
        &key,
        &["-keyout", "server.key", "-out", "server.csr"],
    ];
    openssl(d, &csr.concat());
    std::fs::write(
        d.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
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
    );
    dir
}

/// A redis-server with a TLS port beside its plain one (the harness probes readiness and
/// the test sets up the ACL user on the plain port); only the user `app` can log in.
struct TlsRedis {
    server: RedisServer,
    tls_port: u16,
    certs: TempDir,
}

impl TlsRedis {
    fn start() -> TlsRedis {
        let certs = certificates();
        let file = |name: &str| certs.path().join(name).display().to_string();
        let mut last = None;
        // The TLS port is chosen here, so losing a race for it is retried here.
        for _ in 0..5 {
            let tls_port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .unwrap()
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
                    let mut admin = server.client();
                    for command in [
                        &[
                            "ACL", "SETUSER", "app", "on", ">s3cret", "~*", "&*", "+@all",
                        ][..],
                        &["ACL", "SETUSER", "default", "off"],
                    ] {
                        assert!(admin.cmd(command).unwrap().is_ok(), "{command:?}");
                    }
                    return TlsRedis {
                        server,
                        tls_port,
                        certs,
                    };
                }
                Err(e) => last = Some(e),
            }
        }
        panic!("redis-server with TLS did not start: {}", last.unwrap());
    }

    fn url(&self) -> String {
        format!("rediss://app:s3cret@127.0.0.1:{}/0", self.tls_port)
    }

    fn ca(&self) -> String {
        self.certs.path().join("ca.crt").display().to_string()
    }
}

fn bus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the bus binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_tool_speaks_tls_with_a_private_ca() {
    let redis = TlsRedis::start();
    let (url, ca) = (redis.url(), redis.ca());
    let out = bus(&[
        "--url",
        &url,
        "--tls-ca",
        &ca,
        "--json",
        "send",
        "orders",
        "--body",
        r#"{"n":1}"#,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = bus(&["--url", &url, "--tls-ca", &ca, "--json", "stats", "orders"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats[0]["ready"], 1, "{stats}");
    let out = bus(&["--url", &url, "--tls-ca", &ca, "queues"]);
    assert!(
        text(&out.stdout).contains("orders"),
        "{}",
        text(&out.stdout)
    );

    // The message went over TLS: the TLS port speaks nothing else. Read it back on the
    // plain port as the ACL user.
    let mut admin = redis.server.client();
    assert!(admin.cmd(&["AUTH", "app", "s3cret"]).unwrap().is_ok());
    let len = admin.cmd(&["LLEN", "bus:{orders}:ready"]).unwrap();
    assert_eq!(len.as_int(), Some(1));
}

#[test]
fn tls_failures_are_clear_and_keep_the_password() {
    let redis = TlsRedis::start();
    let url = redis.url();
    // Without the private CA, the system roots do not trust the server.
    let out = bus(&["--url", &url, "queues"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("certificate is not trusted") && err.contains("--tls-ca FILE"),
        "{err}"
    );
    assert!(
        err.contains(&format!("127.0.0.1:{}", redis.tls_port)),
        "{err}"
    );
    // Plain redis:// to the TLS port: the address and a sentence with the likely cause.
    let plain = format!("redis://127.0.0.1:{}", redis.tls_port);
    let out = bus(&["--url", &plain, "queues"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot connect to Redis at {plain}: "))
            && err.contains("use rediss://"),
        "{err}"
    );
    assert!(!err.contains("Os {") && !err.contains("kind:"), "{err}");
    assert!(
        !err.contains("s3cret") && !err.contains("panicked"),
        "{err}"
    );
    // A CA file that is not there.
    let out = bus(&["--url", &url, "--tls-ca", "/nonexistent/ca.crt", "queues"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("/nonexistent/ca.crt"), "{err}");
    // A wrong password over TLS.
    let wrong = url.replace("s3cret", "wrong");
    let out = bus(&["--url", &wrong, "--tls-ca", &redis.ca(), "queues"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("credentials") && !err.contains("wrong@"),
        "{err}"
    );
}
