//! `rediss://` for real: a private CA and a server certificate made with the `openssl` CLI,
//! a redis-server listening with TLS, an ACL user. Run with `--features tls`.

#![cfg(feature = "tls")]

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{CommandProcessor, Context, Host, ProcessError};
use bus_redis::{Error, RedisConfig, RedisTransport};
use bus_test_redis::RedisServer;
use common::{eventually, Running, Work};
use tempfile::TempDir;

/// How long a connect may take before the test calls it a hang.
const CONNECT_LIMIT: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Seen(Mutex<Vec<u64>>);

#[async_trait]
impl CommandProcessor<Work> for Arc<Seen> {
    async fn process(&self, work: Work, _: &Context) -> Result<(), ProcessError> {
        self.0.lock().unwrap().push(work.n);
        Ok(())
    }
}

/// Runs `openssl` with `args` in `dir`, panicking with its output if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("the TLS tests need the openssl CLI (apt-get install -y openssl): {e}")
        });
    assert!(
        output.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA (`ca.crt`) and a server certificate signed by it (`server.crt`, `server.key`,
/// SAN IP:127.0.0.1), both P-256 and valid for a day.
fn certificates() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        d,
        &[
            &["req", "-x509", "-days", "1", "-subj", "/CN=bus test CA"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.crt"],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ]
        .concat(),
    );
    openssl(
        d,
        &[
            &["req", "-subj", "/CN=127.0.0.1"][..],
            &ec,
            &["-keyout", "server.key", "-out", "server.csr"],
        ]
        .concat(),
    );
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

/// A redis-server with TLS on its own port (the plain port stays open on loopback for
/// the harness's readiness probe and for setting up ACL users), whose only usable
/// account is the ACL user `app` with password `s3cret`.
struct TlsServer {
    server: RedisServer,
    tls_port: u16,
    certs: TempDir,
}

impl TlsServer {
    fn start() -> TlsServer {
        let certs = certificates();
        let file = |name: &str| certs.path().join(name).display().to_string();
        let mut last_err = None;
        // The TLS port is picked here, so a race for it is retried here.
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
                        let reply = admin.cmd(command).unwrap();
                        assert!(reply.is_ok(), "{command:?}: {reply:?}");
                    }
                    return TlsServer {
                        server,
                        tls_port,
                        certs,
                    };
                }
                Err(e) => last_err = Some(e),
            }
        }
        panic!("redis-server with TLS did not start: {}", last_err.unwrap());
    }

    fn url(&self, password: &str) -> String {
        format!("rediss://app:{password}@127.0.0.1:{}/0", self.tls_port)
    }

    fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.certs.path().join("ca.crt")).unwrap()
    }
}

async fn connect(config: &RedisConfig) -> Result<RedisTransport, Error> {
    tokio::time::timeout(CONNECT_LIMIT, RedisTransport::connect(config))
        .await
        .unwrap_or_else(|_| panic!("connecting over TLS hung for {CONNECT_LIMIT:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_connects_over_tls_with_a_private_ca_and_processes() {
    let redis = TlsServer::start();
    let config = RedisConfig::from_url(&redis.url("s3cret"))
        .unwrap()
        .tls_ca_pem(redis.ca_pem());
    let debug = format!("{config:?}");
    assert!(!debug.contains("s3cret"), "{debug}");
    assert!(debug.contains("private CA"), "{debug}");
    let seen = Arc::new(Seen::default());
    let host = Host::builder()
        .transport(connect(&config).await.unwrap())
        .command::<Work, _>(Arc::clone(&seen))
        .build()
        .unwrap();
    let running = Running::start(host);
    running.bus.send(&Work { n: 7 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            *seen.0.lock().unwrap() == [7]
        })
        .await
    );
    running.stop().await;
    // The TLS port speaks only TLS, so the keys got there over TLS.
    let mut admin = redis.server.client();
    admin.cmd(&["AUTH", "app", "s3cret"]).unwrap();
    let registry = admin
        .cmd(&[
            "SMEMBERS",
            &bus_redis::keys::queue_registry(bus_redis::keys::DEFAULT_PREFIX),
        ])
        .unwrap();
    assert_eq!(registry.as_array().unwrap().len(), 1, "{registry:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ca_can_come_from_a_file() {
    let redis = TlsServer::start();
    let config = RedisConfig::from_url(&redis.url("s3cret"))
        .unwrap()
        .tls_ca_file(redis.certs.path().join("ca.crt"));
    let transport = connect(&config).await.unwrap();
    let pong: String = fred::prelude::ClientLike::ping(transport.client(), None)
        .await
        .unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_over_tls_is_a_clear_error() {
    let redis = TlsServer::start();
    let config = RedisConfig::from_url(&redis.url("wrong"))
        .unwrap()
        .tls_ca_pem(redis.ca_pem());
    let err = connect(&config).await.unwrap_err();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("credentials"), "{text}");
    assert!(
        !text.contains("wrong"),
        "the password leaked into the error: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_ca_the_certificate_is_not_trusted() {
    let redis = TlsServer::start();
    // The system roots do not know the private CA.
    let config = RedisConfig::from_url(&redis.url("s3cret")).unwrap();
    assert!(format!("{config:?}").contains("system roots"), "{config:?}");
    let err = connect(&config).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    assert!(text.contains("certificate is not trusted"), "{text}");
    assert!(text.contains("UnknownIssuer"), "{text}");
    assert!(text.contains("tls_ca_pem"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

#[tokio::test]
async fn a_bad_ca_is_a_config_error() {
    let config = |ca: &[u8]| {
        RedisConfig::from_url("rediss://127.0.0.1:1")
            .unwrap()
            .tls_ca_pem(ca)
    };
    let cases: [(&str, RedisConfig, &str); 5] = [
        (
            "no PEM at all",
            config(b"not a certificate"),
            "no `BEGIN CERTIFICATE`",
        ),
        (
            "broken base64",
            config(b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"),
            "not valid PEM",
        ),
        (
            "not a certificate inside",
            config(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
            "not a usable certificate",
        ),
        (
            "a missing file",
            RedisConfig::from_url("rediss://127.0.0.1:1")
                .unwrap()
                .tls_ca_file("/nonexistent/ca.crt"),
            "cannot read the TLS CA file /nonexistent/ca.crt",
        ),
        (
            "a CA without TLS",
            RedisConfig::from_url("redis://127.0.0.1:1")
                .unwrap()
                .tls_ca_pem(b"irrelevant".to_vec()),
            "use rediss://",
        ),
    ];
    for (case, config, expected) in cases {
        let err = connect(&config).await.unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{case}: {err:?}");
        assert!(err.to_string().contains(expected), "{case}: {err}");
    }
}
