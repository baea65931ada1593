//! The `bus` binary against a real Redis: JSON output, the purge confirmation, errors.

// The management tests' plumbing, shared rather than copied.
#[path = "../../bus-management/tests/common/mod.rs"]
mod common;

use bus_core::transport::DeadLetterReason;
use bus_test_redis::{eventually, TestRedis};
use common::{setup, work, Work};
use serde_json::Value;
use std::process::{Command, Output, Stdio};

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
            "cannot connect to Redis at redis://127.0.0.1:1: the connection was refused",
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
        // A sentence, not the client's Debug output.
        for debug in ["Os {", "kind:", "code:", "IO Error"] {
            assert!(!err.contains(debug), "{url}: {err}");
        }
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

/// Dead letters with long errors and a long body, for the table's width.
async fn long_dead_letters(s: &common::Setup) -> (Vec<String>, String) {
    let long_body = format!(r#"{{"n":1,"text":"{}"}}"#, "b".repeat(300));
    for _ in 0..2 {
        bus_json(&s.redis, &["send", "work", "--body", &long_body]);
    }
    let ids = s.dead_letter(&work(), 2, DeadLetterReason::Rejected).await;
    let long_error = format!("the handler failed: {}", "e".repeat(300));
    let errors = serde_json::json!([
        {"message": "first failure", "at_ms": 1_712_345_678_901u64},
        {"message": long_error, "at_ms": 1_712_345_679_901u64},
    ])
    .to_string();
    s.redis
        .client()
        .cmd(&["HSET", &s.keys(&work()).errors, &ids[0], &errors])
        .unwrap();
    (ids, long_error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_table_fits_100_columns_unless_wide() {
    let s = setup().await;
    let (ids, long_error) = long_dead_letters(&s).await;
    let out = bus(&s.redis, &["dead", "work"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8(out.stdout).unwrap();
    let widest = table.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(widest <= 100, "{widest} columns:\n{table}");
    for id in &ids {
        assert!(table.contains(id.as_str()), "{id} missing:\n{table}");
    }
    assert!(table.contains("(+1") && table.contains("--wide"), "{table}");
    assert!(!table.contains(&long_error), "{table}");

    let out = bus(&s.redis, &["dead", "work", "--wide"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let wide = String::from_utf8(out.stdout).unwrap();
    let message_id = s.management.dead_letters(&work(), 1).await.unwrap()[0]
        .message
        .as_ref()
        .unwrap()
        .id
        .clone();
    for expected in [
        long_error.as_str(),
        "first failure",
        &message_id,
        &"b".repeat(300),
    ] {
        assert!(
            wide.contains(expected),
            "{expected:.40} missing from --wide"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_say_which_age_and_show_expired_locks() {
    let s = setup().await;
    s.bus.send(&Work { n: 1 }).await.unwrap();
    let keys = s.keys(&work());
    let long_ago = (bus_core::transport::now_ms() - 3_600_000).to_string();
    s.redis
        .client()
        .cmd(&["ZADD", &keys.inflight, &long_ago, "~9"])
        .unwrap();
    let stats = bus_json(&s.redis, &["stats", "work"]);
    assert_eq!(
        (
            stats[0]["in_flight"].as_u64(),
            stats[0]["expired_locks"].as_u64()
        ),
        (Some(1), Some(1))
    );
    let out = bus(&s.redis, &["stats", "work"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("LOCK EXPIRED")
            && table.contains("NEXT SENT")
            && table.contains("first sent"),
        "{table}"
    );
    assert!(!table.contains("OLDEST READY"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sagas_show_and_list_through_the_tool() {
    let s = setup().await;
    let r = &s.redis;
    let store =
        bus_redis_saga::RedisSagaStore::new(s.transport.client().clone()).prefix(r.namespace());
    let stamp = bus_core::SagaStore::create(
        &store,
        "order",
        "7",
        r#"{"step":2}"#.into(),
        std::time::Duration::from_secs(600),
    )
    .await
    .unwrap();
    r.client()
        .cmd(&["SET", &store.key("order", "old"), "x"])
        .unwrap();
    let ns = r.namespace();
    let shown = bus_json(r, &["sagas", "--saga-prefix", ns, "show", "order", "7"]);
    assert_eq!(shown["data"], r#"{"step":2}"#);
    assert_eq!(shown["stamp"], stamp.as_str());
    assert!(shown["ttl_ms"].as_u64().is_some_and(|t| t > 500_000));
    let out = bus(r, &["sagas", "--saga-prefix", ns, "show", "order", "7"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("stamp") && table.contains(stamp.as_str()),
        "{table}"
    );
    let out = bus(r, &["sagas", "--saga-prefix", ns, "show", "order", "8"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no saga 8"), "{}", stderr(&out));
    // The plain string key is not listed (and `sagas delete` would refuse it).
    let listed = bus_json(r, &["sagas", "--saga-prefix", ns, "list"]);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["7"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_refusals_name_the_right_options() {
    let s = setup().await;
    // With REDIS_URL set, a usage error does not show --url as required.
    let out = Command::new(env!("CARGO_BIN_EXE_bus"))
        .env("REDIS_URL", s.redis.url())
        .args(["requeue", "work"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("Usage: bus requeue") && !err.contains("--url"),
        "{err}"
    );
    // REDIS_URL is still where the tool connects.
    s.bus.send(&Work { n: 1 }).await.unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bus"))
        .env("REDIS_URL", s.redis.url())
        .args(["--prefix", s.redis.namespace(), "--json", "queues"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("work"));

    // Unsubscribing a subscription that holds messages names --force.
    let mail = bus_core::transport::Source::subscription("paid", "mail").unwrap();
    s.redis
        .client()
        .cmd(&[
            "SADD",
            &bus_redis::keys::subscriptions(s.redis.namespace(), "paid"),
            "mail",
        ])
        .unwrap();
    s.bus.publish(&common::Paid { n: 1 }).await.unwrap();
    assert_eq!(s.management.stats(&mail).await.unwrap().ready, 1);
    let out = bus(&s.redis, &["unsubscribe", "paid", "mail"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("--force") && err.contains("1 ready"), "{err}");
    assert!(!err.contains("force the removal"), "{err}");
    assert!(bus(&s.redis, &["unsubscribe", "paid", "mail", "--force"])
        .status
        .success());
}

/// `bus dead QUEUE | head`: every command ends quietly (exit 0, nothing on stderr) when
/// whoever reads its output closes it early. A real pipe, closed after a few bytes while
/// the command still has far more than a pipe buffer to write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_every_command_quietly() {
    use std::io::Read;

    let s = setup().await;
    const LETTERS: u64 = 1000;
    for n in 0..LETTERS {
        s.bus.send(&Work { n }).await.unwrap();
    }
    s.dead_letter(&work(), LETTERS as usize, DeadLetterReason::Rejected)
        .await;
    let count = LETTERS.to_string();
    for args in [
        vec!["dead", "work", "-n", &count],
        vec!["dead", "work", "-n", &count, "--wide"],
        vec!["--json", "dead", "work", "-n", &count],
        vec!["stats", "--all", "--watch", "--json", "--interval", "100ms"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bus"))
            .env_remove("REDIS_URL")
            .args(["--url", &s.redis.url(), "--prefix", s.redis.namespace()])
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the bus binary runs");
        let mut stdout = child.stdout.take().expect("piped stdout");
        let mut first = [0u8; 64];
        if let Err(e) = stdout.read_exact(&mut first) {
            let out = child.wait_with_output().expect("the bus binary ends");
            panic!("bus {args:?} printed too little ({e}): {}", stderr(&out));
        }
        drop(stdout);
        let mut status = None;
        let ended = eventually(std::time::Duration::from_secs(20), || {
            status = child.try_wait().expect("the bus binary's status");
            status.is_some()
        })
        .await;
        if !ended {
            child.kill().expect("kill");
        }
        let status =
            status.unwrap_or_else(|| panic!("bus {args:?} kept running after its stdout closed"));
        let mut err = String::new();
        child
            .stderr
            .take()
            .expect("piped stderr")
            .read_to_string(&mut err)
            .expect("stderr");
        assert!(
            status.success() && err.is_empty(),
            "bus {args:?} did not end quietly: {status}\n{err}"
        );
    }
}

/// `bus peek` names a message's attachment (the header bus-attachments writes) with its
/// type and size, `bus dead` its size, `bus dead --wide` all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peek_and_dead_show_a_message_s_attachment() {
    let s = setup().await;
    let r = &s.redis;
    let header = r#"bus-attachment={"id":"01J","scope":"work","name":"scan.pdf","content_type":"application/pdf","length":6291456}"#;
    let sent = bus(
        r,
        &["send", "work", "--body", r#"{"n":1}"#, "--header", header],
    );
    assert!(sent.status.success(), "{}", stderr(&sent));
    s.bus.send(&Work { n: 2 }).await.unwrap();
    let peek = String::from_utf8_lossy(&bus(r, &["peek", "work"]).stdout).into_owned();
    assert!(peek.contains("ATTACHMENT"), "{peek}");
    assert!(
        peek.contains("scan.pdf (application/pdf, 6.0 MiB)"),
        "{peek}"
    );

    // Dead-lettered, the size shows in the narrow table and everything in the wide one.
    s.dead_letter(&work(), 2, DeadLetterReason::Rejected).await;
    let dead = String::from_utf8_lossy(&bus(r, &["dead", "work"]).stdout).into_owned();
    assert!(
        dead.contains("ATTACHED") && dead.contains("6.0 MiB"),
        "{dead}"
    );
    let wide = String::from_utf8_lossy(&bus(r, &["dead", "work", "--wide"]).stdout).into_owned();
    assert!(
        wide.contains("scan.pdf (application/pdf, 6.0 MiB)"),
        "{wide}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_breaker_clears_a_tripped_fleet_breaker() {
    let s = setup().await;
    s.bus.send(&Work { n: 1 }).await.unwrap();
    let flow = s.keys(&work()).flow;
    // Tripped for ten minutes, with a probe's slot held, as breaker_trip.lua and a
    // probing reserve leave it.
    let mut client = s.redis.client();
    let until = (bus_core::transport::now_ms() + 600_000).to_string();
    client
        .cmd(&[
            "HSET",
            &flow,
            "breaker_until",
            &until,
            "breaker_probe",
            &until,
        ])
        .unwrap();
    let out = bus(&s.redis, &["stats", "work"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("breaker open until"), "{table}");

    assert_eq!(
        bus_json(&s.redis, &["close-breaker", "work"]),
        serde_json::json!({ "queue": "work", "breaker": "closed" })
    );
    assert_eq!(client.cmd(&["EXISTS", &flow]).unwrap().as_int(), Some(0));
    let out = bus(&s.redis, &["stats", "work"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(!table.contains("breaker open"), "{table}");
    let out = bus(&s.redis, &["close-breaker", "work"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "closed the circuit breaker of work"
    );

    let out = bus(&s.redis, &["close-breaker", "nosuch"]);
    assert!(
        !out.status.success(),
        "closed the breaker of a queue that does not exist"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_keep_the_state_in_redis_and_show_it_in_stats() {
    let s = setup().await;
    s.bus.send(&Work { n: 1 }).await.unwrap();
    let flow = s.keys(&work()).flow;
    assert_eq!(
        bus_json(&s.redis, &["pause", "work"]),
        serde_json::json!({ "queue": "work", "paused": true })
    );
    let mut client = s.redis.client();
    assert_eq!(
        client.cmd(&["HGET", &flow, "paused"]).unwrap().as_str(),
        Some("1")
    );
    assert_eq!(bus_json(&s.redis, &["stats", "work"])[0]["paused"], true);
    let out = bus(&s.redis, &["stats", "work"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("PAUSED") && table.contains("paused"),
        "{table}"
    );
    // Sends still enqueue.
    s.bus.send(&Work { n: 2 }).await.unwrap();
    assert_eq!(bus_json(&s.redis, &["stats", "work"])[0]["ready"], 2);

    let out = bus(&s.redis, &["resume", "work"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "resumed work");
    assert_eq!(bus_json(&s.redis, &["stats", "work"])[0]["paused"], false);
    assert_eq!(client.cmd(&["EXISTS", &flow]).unwrap().as_int(), Some(0));

    let out = bus(&s.redis, &["pause", "nosuch"]);
    assert!(!out.status.success(), "paused a queue that does not exist");
}
