//! docs/operations.md, "What `--json` prints", lists the fields of every command's JSON.
//! This runs each command as the binary against a real Redis holding one of everything,
//! and compares the fields it printed with the table, both ways: a field the table lacks,
//! or one it lists that no output has (unless listed as sometimes there), fails, and so
//! does a command of `bus --help` that the table does not name.

#[path = "../../bus-management/tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use bus_conformance::workflows::{self as scenarios, Done, Durable, Item, Log};
use bus_core::heartbeat::HostInfo;
use bus_core::transport::{ConsumerOptions, DeadLetterReason, Source};
use bus_core::{CommandProcessor, Context, Host, ProcessError, SagaStore, Transport};
use bus_test_redis::bus::Running;
use bus_test_redis::eventually_async as eventually;
use bus_workflows::{BatchState, RedisWorkflowStore, Workflows};
use common::{setup, work, Work};
use serde_json::{json, Value};

const DOC: &str = include_str!("../../../docs/operations.md");
const WAIT: Duration = Duration::from_secs(30);

/// One row of the table: the fields every output has (in at least one element), and
/// those only some outputs have.
#[derive(Debug, Default)]
struct Row {
    fields: BTreeSet<String>,
    sometimes: BTreeSet<String>,
    /// "as `stats`" and the like: no fields of its own.
    alias: bool,
}

fn ticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The table, by command (its first cell without backticks).
fn documented() -> BTreeMap<String, Row> {
    let section = DOC
        .split("### What `--json` prints")
        .nth(1)
        .expect("the section")
        .split("\n### ")
        .next()
        .expect("its text");
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        // No cell of this table holds a `|`.
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        assert_eq!(cells.len(), 4, "a row of four cells: {line}");
        // `pause`, `resume`: a row for each; `search` with `--delete` …: one row.
        let first = cells[0].replace('`', "");
        let keys: Vec<String> = if first.contains(" with ") {
            vec![first]
        } else {
            first.split(", ").map(str::to_owned).collect()
        };
        for key in keys {
            let row = Row {
                fields: ticked(cells[2]).into_iter().collect(),
                sometimes: ticked(cells[3]).into_iter().collect(),
                alias: cells[1].starts_with("as "),
            };
            assert!(rows.insert(key.clone(), row).is_none(), "{key} twice");
        }
    }
    rows
}

/// The field paths of `value` (the elements' when it is an array): `a`, `a.b`, `a[].b`.
/// It descends into a member only where the documented paths do, so maps (`headers`,
/// `body`) stay one field.
fn paths(value: &Value, known: &BTreeSet<String>) -> BTreeSet<String> {
    fn walk(value: &Value, prefix: &str, known: &BTreeSet<String>, out: &mut BTreeSet<String>) {
        match value {
            Value::Array(items) => {
                let inner = if prefix.is_empty() {
                    String::new()
                } else {
                    format!("{prefix}[]")
                };
                for item in items {
                    walk(item, &inner, known, out);
                }
            }
            Value::Object(members) => {
                for (name, member) in members {
                    let path = if prefix.is_empty() {
                        name.clone()
                    } else {
                        format!("{prefix}.{name}")
                    };
                    let deeper = known.iter().any(|k| {
                        k.starts_with(&format!("{path}.")) || k.starts_with(&format!("{path}[]."))
                    });
                    if deeper {
                        walk(member, &path, known, out);
                    } else {
                        out.insert(path);
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(value, "", known, &mut out);
    out
}

/// `bus --url … --prefix … --json args…`.
fn bus(url: &str, prefix: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .args(["--url", url, "--prefix", prefix, "--json"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the bus binary runs")
}

fn json_of(url: &str, prefix: &str, args: &[&str]) -> Value {
    let out = bus(url, prefix, args);
    assert!(
        out.status.success(),
        "bus {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bus {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The first line `bus … stats --watch` prints.
fn first_watch_line(url: &str, prefix: &str) -> Value {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .args(["--url", url, "--prefix", prefix, "--json"])
        .args(["stats", "--all", "--watch", "--interval", "100ms"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the bus binary runs");
    let mut line = String::new();
    let read = BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
    child.kill().expect("kill");
    child.wait().expect("wait");
    read.expect("a line");
    serde_json::from_str(&line).expect("a line of JSON")
}

/// The subcommands `bus [path] --help` lists (`help` aside).
fn subcommands(path: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_bus"))
        .args(path)
        .arg("--help")
        .output()
        .expect("the bus binary runs");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    help.split("Commands:")
        .nth(1)
        .expect("a command list")
        .split("\n\n")
        .next()
        .expect("its lines")
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(|name| {
            let mut full = path.join(" ");
            if !full.is_empty() {
                full.push(' ');
            }
            full + name
        })
        .collect()
}

struct Acks;

#[async_trait]
impl CommandProcessor<Work> for Acks {
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_commands_json_has_the_documented_fields() {
    let rows = documented();
    // Every command is in the table.
    let mut commands = subcommands(&[]);
    commands.extend(subcommands(&["babel"]));
    commands.extend(subcommands(&["sagas"]));
    for command in &commands {
        assert!(
            rows.keys()
                .any(|key| key == command || key.starts_with(&format!("{command} "))),
            "docs/operations.md does not say what `bus --json {command}` prints"
        );
    }

    // One of everything.
    let s = setup().await;
    let (url, prefix) = (s.redis.url(), s.redis.namespace().to_owned());
    let mut printed: BTreeMap<&str, Value> = BTreeMap::new();
    for n in 1..=3 {
        let body = format!(r#"{{"n":{n}}}"#);
        let sent = json_of(
            &url,
            &prefix,
            &["send", "work", "--body", &body, "--header", "k=v"],
        );
        printed.insert("send", sent);
    }
    let dead = s.dead_letter(&work(), 2, DeadLetterReason::Rejected).await;
    s.bus
        .send_delayed(&Work { n: 4 }, Duration::from_secs(600))
        .await
        .unwrap();
    let options = ConsumerOptions::new(Duration::from_secs(60), 5);
    let subscription = Source::subscription("paid", "billing").unwrap();
    let consumer = s
        .transport
        .consumer(&subscription, options.clone())
        .await
        .unwrap();
    consumer.close().await.unwrap();
    let consumer = s.transport.consumer(&work(), options).await.unwrap();
    consumer
        .extras()
        .fleet_breaker
        .expect("a fleet breaker")
        .trip(Duration::from_secs(600))
        .await
        .unwrap();
    consumer.close().await.unwrap();
    let store = bus_redis_saga::RedisSagaStore::for_transport(&s.transport);
    store
        .create("order", "o-1", "{}".into(), Duration::from_secs(600))
        .await
        .unwrap();
    let host: HostInfo = serde_json::from_value(json!({
        "id": "h:7:1", "hostname": "h", "pid": 7, "version": "0.0.9", "queues": ["work"],
        "concurrency": 2, "in_flight": 0, "started_at_ms": 1, "interval_ms": 100,
        "breakers": {"work": "open"},
    }))
    .unwrap();
    s.transport
        .extras()
        .host_reporter
        .unwrap()
        .report(&host)
        .await
        .unwrap();
    // A schedule, once a host has ticked it.
    let running = Running::start(
        Host::builder()
            .transport(s.transport.clone())
            .command::<Work, _>(Acks)
            .schedule(bus_core::Recurring::new("* * * * * *", || Work { n: 0 }).name("tick"))
            .build()
            .unwrap(),
    );
    let mut schedules = Value::Null;
    let ticked = eventually(WAIT, || {
        schedules = json_of(&url, &prefix, &["schedules"]);
        let ticked = schedules[0]["last_tick_ms"].is_u64();
        async move { ticked }
    })
    .await;
    running.stop().await;
    assert!(ticked, "no schedule ticked: {schedules}");
    printed.insert("schedules", schedules);
    // A BabelQueue queue of this test: an envelope and a poison element in flight, one
    // dead letter.
    let babel = format!("{prefix}.orders");
    let envelope = |id: &str, attempts: u32| {
        format!(
            r#"{{"job":"urn:babel:orders:created","trace_id":"t-{id}","data":{{"order":1}},"meta":{{"id":"{id}","queue":"{babel}","lang":"python","schema_version":1,"created_at":1}},"attempts":{attempts}}}"#
        )
    };
    let mut client = s.redis.client();
    let in_flight = format!("{babel}:processing");
    client
        .cmd(&["RPUSH", &in_flight, &envelope("m-1", 0)])
        .unwrap();
    client.cmd(&["RPUSH", &in_flight, "not json"]).unwrap();
    let letter = envelope("m-2", 3).replacen(
        r#""attempts":3}"#,
        &format!(
            r#""attempts":3,"dead_letter":{{"reason":"failed","error":"declined","exception":"RuntimeError","failed_at":1,"original_queue":"{babel}","attempts":3,"lang":"python"}}}}"#
        ),
        1,
    );
    client
        .cmd(&["RPUSH", &format!("{babel}.dlq"), &letter])
        .unwrap();

    // A batch done with a dead member and a callback, and a run parked on a signal.
    let workflows = Workflows::new(RedisWorkflowStore::for_transport(&s.transport));
    let batch = workflows
        .batch(&s.bus)
        .on_complete(&Done {
            what: "done".into(),
        })
        .unwrap()
        .open()
        .await
        .unwrap();
    let items = [(0, true), (1, false)].map(|(n, die)| Item {
        n,
        die,
        fail: false,
    });
    batch.send_all(&items).await.unwrap();
    batch.close().await.unwrap();
    let host = scenarios::start(
        std::sync::Arc::new(s.transport.clone()),
        &workflows,
        &Log::default(),
    )
    .await;
    s.bus
        .send(&Durable {
            name: "w".into(),
            ms: 600_000,
            signal: Some("paid".into()),
        })
        .await
        .unwrap();
    let mut batches = Value::Null;
    let settled = eventually(WAIT, || {
        batches = json_of(&url, &prefix, &["batches"]);
        let parked = batches["parked"][0]["token"].is_string();
        let workflows = workflows.clone();
        let id = batch.id().clone();
        async move {
            let status = workflows.status(&id).await.unwrap().expect("the batch");
            parked && status.state == BatchState::Done
        }
    })
    .await;
    host.shutdown().await.unwrap();
    assert!(
        settled,
        "the batch never finished or no run parked: {batches}"
    );
    printed.insert("batches", json_of(&url, &prefix, &["batches"]));
    printed.insert(
        "batch",
        json_of(&url, &prefix, &["batch", batch.id().as_str()]),
    );

    // What only reads, then what changes.
    let delayed = json_of(&url, &prefix, &["scheduled", "work"]);
    let delayed_id = delayed[0]["storage_id"].as_str().expect("an id").to_owned();
    printed.insert("scheduled", delayed);
    printed.insert("stats --watch", first_watch_line(&url, &prefix));
    for (key, args) in [
        ("queues", vec!["queues"]),
        ("topics", vec!["topics"]),
        ("stats", vec!["stats", "work"]),
        ("peek", vec!["peek", "work"]),
        ("dead", vec!["dead", "work"]),
        ("search", vec!["search", "work", "--type", "work"]),
        ("sagas list", vec!["sagas", "list"]),
        ("sagas show", vec!["sagas", "show", "order", "o-1"]),
        ("hosts", vec!["hosts"]),
        ("doctor", vec!["doctor"]),
        ("babel queues", vec!["babel", "queues"]),
        (
            "babel peek with --area in-flight or --area delayed",
            vec!["babel", "peek", &babel, "--area", "in-flight"],
        ),
        (
            "babel redrive",
            vec!["babel", "redrive", &babel, "--dry-run"],
        ),
        ("pause", vec!["pause", "work"]),
        ("resume", vec!["resume", "work"]),
        ("close-breaker", vec!["close-breaker", "work"]),
        ("cancel", vec!["cancel", "work", &delayed_id]),
        ("requeue", vec!["requeue", "work", "--id", &dead[1]]),
        ("delete-dead", vec!["delete-dead", "work", &dead[0]]),
        (
            "search with --requeue, --delete or --move-to",
            vec!["search", "work", "--body", "\"n\":2", "--delete", "--yes"],
        ),
        ("purge", vec!["purge", "work", "--yes"]),
        (
            "unsubscribe",
            vec!["unsubscribe", "paid", "billing", "--force"],
        ),
        ("sagas delete", vec!["sagas", "delete", "order", "o-1"]),
        ("audit", vec!["audit"]),
    ] {
        printed.insert(key, json_of(&url, &prefix, &args));
    }

    let mut wrong = Vec::new();
    for (key, row) in &rows {
        if row.alias || (row.fields.is_empty() && row.sometimes.is_empty()) {
            continue;
        }
        let Some(value) = printed.get(key.as_str()) else {
            wrong.push(format!("{key}: the test prints nothing for this row"));
            continue;
        };
        let known: BTreeSet<String> = row.fields.union(&row.sometimes).cloned().collect();
        let seen = paths(value, &known);
        let unknown: Vec<&String> = seen.difference(&known).collect();
        let missing: Vec<&String> = row.fields.difference(&seen).collect();
        if !unknown.is_empty() || !missing.is_empty() {
            wrong.push(format!(
                "{key}: printed but not documented {unknown:?}; documented but not printed {missing:?}"
            ));
        }
    }
    for key in printed.keys() {
        if !rows.contains_key(*key) {
            wrong.push(format!("{key}: no row in the table"));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/operations.md, \"What `--json` prints\":\n{}",
        wrong.join("\n")
    );
}
