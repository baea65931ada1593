//! The `bus` binary against a real Redis: JSON output, the purge confirmation, errors.

mod common;

use std::process::{Command, Output, Stdio};

use bus_core::DeadLetterReason;
use bus_test_redis::TestRedis;
use common::{setup, work, Work};
use serde_json::Value;

/// Runs `bus --url <url> --prefix <namespace> args...` with stdin closed.
fn bus(redis: &TestRedis, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .args(["--url", &redis.url(), "--prefix", redis.namespace()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the bus binary runs")
}

/// Runs a command that must succeed and print JSON; returns the JSON.
fn bus_json(redis: &TestRedis, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = bus(redis, &all);
    assert!(
        out.status.success(),
        "bus {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bus {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_parses_and_counts_right() {
    let s = setup().await;
    let r = &s.redis;
    for n in 1..=3 {
        let body = format!(r#"{{"n":{n}}}"#);
        let sent = bus_json(r, &["send", "work", "--body", &body, "--header", "k=v"]);
        assert!(sent["id"].as_str().is_some_and(|id| !id.is_empty()));
    }
    // Two of them become dead letters through the transport's consumer.
    let dead = s.dead_letter(&work(), 2, DeadLetterReason::Rejected).await;
    s.bus
        .send_delayed(&Work { n: 4 }, std::time::Duration::from_secs(600))
        .await
        .unwrap();
    s.redis
        .client()
        .cmd(&[
            "SADD",
            &bus_redis::keys::queue_registry(r.namespace()),
            "work",
        ])
        .unwrap();

    assert_eq!(bus_json(r, &["queues"]), serde_json::json!(["work"]));
    let stats = bus_json(r, &["stats", "work"]);
    assert_eq!(stats[0]["ready"], 1);
    assert_eq!(stats[0]["dead"], 2);
    assert_eq!(stats[0]["delayed"], 1);
    assert_eq!(stats[0]["in_flight"], 0);
    let all = bus_json(r, &["stats", "--all"]);
    assert_eq!(all.as_array().unwrap().len(), 1);
    assert_eq!(all[0]["ready"], 1);
    assert_eq!(all[0]["oldest_sent_at_ms"], stats[0]["oldest_sent_at_ms"]);

    let peeked = bus_json(r, &["peek", "work", "-n", "5"]);
    assert_eq!(peeked.as_array().unwrap().len(), 1);
    assert_eq!(peeked[0]["message"]["body"]["n"], 3);
    assert_eq!(peeked[0]["message"]["headers"]["k"], "v");

    let letters = bus_json(r, &["dead", "work"]);
    assert_eq!(letters.as_array().unwrap().len(), 2);
    assert_eq!(letters[0]["storage_id"], dead[0].as_str());
    assert_eq!(letters[0]["reason"], "rejected");
    assert_eq!(letters[0]["errors"][0]["message"], "failure of 1");
    assert_eq!(
        bus_json(r, &["dead", "work", "-n", "1"])
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let scheduled = bus_json(r, &["scheduled", "work"]);
    assert_eq!(scheduled[0]["message"]["body"]["n"], 4);

    let requeued = bus_json(r, &["requeue", "work", "--id", &dead[1]]);
    assert_eq!(requeued["requeued"], serde_json::json!([dead[1]]));
    // An id that is not a dead letter: reported, and a failure exit.
    let out = bus(r, &["requeue", "work", "--id", "~999"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("~999"), "{}", stderr(&out));

    let out = bus(r, &["delete-dead", "work", &dead[0]]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!bus(r, &["delete-dead", "work", &dead[0]]).status.success());

    let purged = bus_json(r, &["purge", "work", "--yes"]);
    assert_eq!(
        (purged["ready"].as_u64(), purged["delayed"].as_u64()),
        (Some(2), Some(1))
    );
    let stats = bus_json(r, &["stats", "work"]);
    assert_eq!(
        (stats[0]["ready"].as_u64(), stats[0]["dead"].as_u64()),
        (Some(0), Some(0))
    );

    // Tables are the default.
    let out = bus(r, &["stats", "work"]);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("IN FLIGHT") && table.contains("work"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_without_yes_and_with_closed_stdin_refuses_and_deletes_nothing() {
    let s = setup().await;
    s.bus
        .send_batch(&[Work { n: 1 }, Work { n: 2 }])
        .await
        .unwrap();
    let out = bus(&s.redis, &["purge", "work"]);
    assert!(!out.status.success());
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert_eq!(s.management.stats(&work()).await.unwrap().ready, 2);
}

#[test]
fn a_bad_url_or_an_unreachable_server_is_a_clear_error() {
    for (url, expected) in [
        ("http://127.0.0.1:6379", "invalid Redis URL"),
        (
            "redis://127.0.0.1:1",
            "cannot connect to Redis at redis://127.0.0.1:1",
        ),
        (
            "redis://user:hunter2@127.0.0.1:1",
            "redis://user:***@127.0.0.1:1",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_bus"))
            .args(["--url", url, "queues"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{url}: {err}");
        assert!(err.starts_with("bus: error: "), "{url}: {err}");
        assert!(err.contains(expected), "{url}: {err}");
        assert!(
            !err.contains("hunter2") && !err.contains("panicked"),
            "{url}: {err}"
        );
    }
    // A usage error is clap's exit code 2.
    let out = Command::new(env!("CARGO_BIN_EXE_bus"))
        .args(["requeue", "work"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_without_consumer_is_listed_and_typos_are_errors() {
    let s = setup().await;
    let r = &s.redis;
    s.bus.send(&Work { n: 1 }).await.unwrap();
    assert_eq!(bus_json(r, &["queues"]), serde_json::json!(["work"]));
    let all = bus_json(r, &["stats", "--all"]);
    assert_eq!(all[0]["queue"], "work");
    assert_eq!(all[0]["ready"], 1);

    for args in [
        &["stats", "wrok"][..],
        &["peek", "wrok"],
        &["dead", "wrok"],
        &["purge", "wrok", "--yes"],
        &["requeue", "wrok", "--all"],
    ] {
        let out = bus(r, args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("no queue or subscription wrok")
                && err.contains(r.namespace())
                && err.contains("work"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }

    // A wrong prefix: the error and the empty listings say where the keys are.
    let wrong = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_bus"))
            .env_remove("REDIS_URL")
            .args(["--url", &r.url(), "--prefix", "wrong"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = wrong(&["stats", "work"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("prefix wrong") && err.contains(r.namespace()),
        "{err}"
    );
    for args in [&["queues"][..], &["stats", "--all"]] {
        let out = wrong(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("under prefix wrong") && text.contains(r.namespace()),
            "{args:?}: {text}"
        );
    }
    // Sending creates a queue: no error for a new name.
    let sent = bus_json(r, &["send", "fresh", "--body", "{}"]);
    assert!(sent["id"].is_string());
    assert_eq!(
        bus_json(r, &["queues"]),
        serde_json::json!(["fresh", "work"])
    );
}
