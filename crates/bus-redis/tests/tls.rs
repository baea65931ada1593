//! `rediss://` for real: a private CA and a server certificate made with the `openssl` CLI,
//! a redis-server listening with TLS, an ACL user. Run with `--features tls`.

#![cfg(feature = "tls")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{CommandProcessor, Context, Host, ProcessError};
use bus_redis::{Error, RedisConfig, RedisTransport};
use bus_test_redis::TlsRedis;
use common::{eventually, Running, Work};

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

async fn connect(config: &RedisConfig) -> Result<RedisTransport, Error> {
    tokio::time::timeout(CONNECT_LIMIT, RedisTransport::connect(config))
        .await
        .unwrap_or_else(|_| panic!("connecting over TLS hung for {CONNECT_LIMIT:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_connects_over_tls_with_a_private_ca_and_processes() {
    let redis = TlsRedis::start().unwrap();
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
    let mut admin = redis.server().client();
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
    let redis = TlsRedis::start().unwrap();
    let config = RedisConfig::from_url(&redis.url("s3cret"))
        .unwrap()
        .tls_ca_file(redis.ca_path());
    let transport = connect(&config).await.unwrap();
    let pong: String = fred::prelude::ClientLike::ping(transport.client(), None)
        .await
        .unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_over_tls_is_a_clear_error() {
    let redis = TlsRedis::start().unwrap();
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
    let redis = TlsRedis::start().unwrap();
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
