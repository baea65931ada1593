//! The `bus` tool over `rediss://` for real: a private CA and a server certificate made
//! with the `openssl` CLI, a redis-server listening with TLS, an ACL user. The `tls`
//! feature is on by default, so an installed `bus` speaks TLS.

#![cfg(feature = "tls")]

use std::process::{Command, Output, Stdio};

use bus_test_redis::{TlsRedis, TLS_PASSWORD};

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
    let redis = TlsRedis::start().unwrap();
    let (url, ca) = (
        redis.url(TLS_PASSWORD),
        redis.ca_path().display().to_string(),
    );
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
    let mut admin = redis.server().client();
    assert!(admin.cmd(&["AUTH", "app", "s3cret"]).unwrap().is_ok());
    let len = admin.cmd(&["LLEN", "bus:{orders}:ready"]).unwrap();
    assert_eq!(len.as_int(), Some(1));
}

#[test]
fn tls_failures_are_clear_and_keep_the_password() {
    let redis = TlsRedis::start().unwrap();
    let url = redis.url(TLS_PASSWORD);
    // Without the private CA, the system roots do not trust the server.
    let out = bus(&["--url", &url, "queues"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("certificate is not trusted") && err.contains("--tls-ca FILE"),
        "{err}"
    );
    assert!(
        err.contains(&format!("127.0.0.1:{}", redis.tls_port())),
        "{err}"
    );
    // Plain redis:// to the TLS port: the address and a sentence with the likely cause.
    let plain = format!("redis://127.0.0.1:{}", redis.tls_port());
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
    let out = bus(&[
        "--url",
        &wrong,
        "--tls-ca",
        &redis.ca_path().display().to_string(),
        "queues",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("credentials") && !err.contains("wrong@"),
        "{err}"
    );
}
