//! `bus doctor` (Redis's configuration checked, exit 1 on a critical finding) and
//! `bus audit` (every change `bus` makes, with who, what and how many), run as the binary
//! against real Redis servers.

#[path = "../../bus-management/tests/common/mod.rs"]
mod common;

use std::process::{Command, Output, Stdio};

use bus_core::transport::DeadLetterReason;
use bus_redis::keys;
use bus_test_redis::RedisServer;
use common::{setup, work, Work};
use serde_json::Value;

fn bus(url: &str, prefix: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .env("USER", "carol")
        .args(["--url", url, "--prefix", prefix])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the bus binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn doctor_fails_on_an_evicting_redis_and_says_what_to_change() {
    let server = RedisServer::builder()
        .arg("--maxmemory-policy")
        .arg("volatile-lru")
        .arg("--maxmemory")
        .arg("200mb")
        .start()
        .unwrap();
    let out = bus(&server.url(), "app", &["doctor"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("volatile-lru"), "{stdout}");
    assert!(stdout.contains("maxmemory-policy noeviction"), "{stdout}");
    assert!(
        text(&out.stderr).contains("critical"),
        "{}",
        text(&out.stderr)
    );

    let out = bus(&server.url(), "app", &["--json", "doctor"]);
    let health: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(health["checks"][0]["name"], "eviction");
    assert_eq!(health["checks"][0]["severity"], "critical");
    // Read only: no protocol version recorded, no key written.
    assert!(server
        .client()
        .get(&keys::protocol("app"))
        .unwrap()
        .is_none());
}

#[test]
fn doctor_passes_a_well_configured_redis_and_reports_a_protocol_mismatch() {
    let server = RedisServer::builder()
        .appendonly(true)
        .arg("--maxmemory-policy")
        .arg("noeviction")
        .start()
        .unwrap();
    let out = bus(&server.url(), "app", &["doctor"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("no problem found"), "{stdout}");

    // Where every other command refuses to run, doctor reports it.
    let newer = (bus_redis::PROTOCOL + 1).to_string();
    server.client().set(&keys::protocol("app"), &newer).unwrap();
    let out = bus(&server.url(), "app", &["--json", "doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let health: Value = serde_json::from_slice(&out.stdout).unwrap();
    let protocol = health["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "protocol")
        .unwrap();
    assert_eq!(protocol["severity"], "critical", "{protocol}");
    assert!(
        protocol["advice"].as_str().unwrap().contains("upgrade"),
        "{protocol}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_made_with_bus_is_in_the_audit_log() {
    let s = setup().await;
    let (url, prefix) = (s.redis.url(), s.redis.namespace().to_owned());
    for n in 0..4 {
        s.bus.send(&Work { n }).await.unwrap();
    }
    let ids = s.dead_letter(&work(), 4, DeadLetterReason::Rejected).await;
    let run = |args: &[&str]| {
        let out = bus(&url, &prefix, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        out
    };
    run(&["requeue", "work", "--id", &ids[0]]);
    run(&["requeue", "work", "--id", &ids[1], "--to", "staging"]);
    run(&["delete-dead", "work", &ids[2]]);
    run(&["purge", "work", "--yes"]);
    run(&["pause", "work"]);
    run(&["resume", "work"]);
    // A refused change (not a dead letter) records nothing.
    assert!(!bus(&url, &prefix, &["delete-dead", "work", "nope"])
        .status
        .success());

    let out = run(&["--json", "audit"]);
    let entries: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let seen: Vec<(String, String, String, u64)> = entries
        .iter()
        .map(|e| {
            assert_eq!(
                (&e["who"], &e["via"]),
                (&Value::from("carol"), &Value::from("bus"))
            );
            assert!(e["at_ms"].as_u64().unwrap() > 0);
            (
                e["action"].as_str().unwrap().to_owned(),
                e["target"].as_str().unwrap().to_owned(),
                e["detail"].as_str().unwrap().to_owned(),
                e["count"].as_u64().unwrap(),
            )
        })
        .collect();
    let s3 = |a: &str, t: &str, d: &str, n: u64| (a.to_owned(), t.to_owned(), d.to_owned(), n);
    assert_eq!(
        seen,
        [
            s3("resume", "work", "", 1),
            s3("pause", "work", "", 1),
            s3("purge", "work", "1 ready, 0 delayed", 1),
            s3("delete", "work", &format!("dead letters {}", ids[2]), 1),
            s3("move", "work", "to staging", 1),
            s3("requeue", "work", "to work", 1),
        ]
    );
    let table = text(&run(&["audit", "-n", "2"]).stdout);
    assert!(
        table.contains("resume") && table.contains("pause") && table.contains("carol"),
        "{table}"
    );
    assert!(!table.contains("purge"), "-n 2 shows two: {table}");
}

/// `bus search`: lists and counts the matches; with --requeue it refuses to act without
/// a terminal or --yes (nothing changed), acts with --yes, and the whole is one audit
/// entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_search_finds_then_requeues_the_matches_and_audits_it() {
    let s = setup().await;
    let (url, prefix) = (s.redis.url(), s.redis.namespace().to_owned());
    for n in 0..3 {
        s.bus.send(&Work { n }).await.unwrap();
    }
    s.dead_letter(&work(), 3, DeadLetterReason::Rejected).await;
    for n in 10..20 {
        s.bus.send(&Work { n }).await.unwrap();
    }
    let keys = s.keys(&work());

    let out = bus(
        &url,
        &prefix,
        &["--json", "search", "work", "--error", "FAILURE"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let found: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(found["matched"], 3, "{found}");
    assert!(found["found"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["place"] == "dead"));
    let out = bus(&url, &prefix, &["search", "work", "--body", "\"n\":15"]);
    assert!(
        text(&out.stdout).contains("1 match(es) in work"),
        "{}",
        text(&out.stdout)
    );
    // No criterion: refused.
    assert!(!bus(&url, &prefix, &["search", "work"]).status.success());

    // No terminal to confirm on: refused, nothing changed.
    let out = bus(
        &url,
        &prefix,
        &["search", "work", "--error", "failure", "--requeue"],
    );
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--yes"), "{}", text(&out.stderr));
    assert_eq!(s.len("LLEN", &keys.dead), 3);

    let out = bus(
        &url,
        &prefix,
        &["search", "work", "--error", "failure", "--requeue", "--yes"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("requeue: 3 of 3"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(s.len("LLEN", &keys.dead), 0);
    assert_eq!(s.len("LLEN", &keys.ready), 13);

    let out = bus(&url, &prefix, &["--json", "audit"]);
    let entries: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        (
            &entries[0]["action"],
            &entries[0]["target"],
            &entries[0]["count"]
        ),
        (
            &Value::from("requeue"),
            &Value::from("work"),
            &Value::from(3)
        )
    );
    assert_eq!(entries[0]["detail"], "search matches (error \"failure\")");
}
