//! The `bus` tool checks the script protocol Redis records for its prefix
//! (docs/wire-format.md, "Versioning"), as hosts and producers do.

use std::process::{Command, Output, Stdio};

use bus_redis::keys;
use bus_test_redis::TestRedis;

fn bus(redis: &TestRedis, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .args(["--url", &redis.url(), "--prefix", redis.namespace()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the bus binary runs")
}

#[test]
fn the_bus_tool_refuses_a_redis_of_another_protocol_and_records_its_own() {
    let redis = TestRedis::start().unwrap();
    let key = keys::protocol(redis.namespace());
    let mut client = redis.client();

    let out = bus(&redis, &["queues"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let speaks = bus_redis::PROTOCOL.to_string();
    let newer = (bus_redis::PROTOCOL + 1).to_string();
    assert_eq!(
        client.get(&key).unwrap().as_deref(),
        Some(speaks.as_bytes())
    );

    client.set(&key, &newer).unwrap();
    let before = redis.keys();
    let out = bus(&redis, &["stats", "--all"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "ran against protocol {newer}: {stderr}"
    );
    assert!(
        stderr.contains(&format!("Redis records bus protocol {newer} under {key}"))
            && stderr.contains(&format!("this build speaks protocol {speaks}"))
            && stderr.contains("docs/operations.md \"Upgrades\"")
            && !stderr.contains("cannot connect"),
        "{stderr}"
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line, no backtrace: {stderr}"
    );
    assert_eq!(redis.keys(), before, "the refused tool wrote");
}
