//! The `bus` tool and the dashboard make their changes through one action layer: each
//! change, from either, is one audit entry naming who made it and through what; a change
//! refused by the queue's kind is refused by both in the same words and writes nothing.
//! The binary runs as a process; the dashboard is served in this test, over the same
//! Redis.

#[path = "../../bus-management/tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bus_babelqueue::Layout;
use bus_core::transport::DeadLetterReason;
use bus_dashboard::{Dashboard, DashboardOptions};
use bus_management::{Fleet, Management};
use bus_test_redis::TestRedis;
use common::{setup, work, Setup, Work};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Every wait on the dashboard: generous for a loaded machine, still bounded.
const WAIT: Duration = Duration::from_secs(30);

fn bus(redis: &TestRedis, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .env("USER", "carol")
        .args([
            "--url",
            &redis.url(),
            "--prefix",
            redis.namespace(),
            "--json",
        ])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the bus binary runs")
}

fn ok(redis: &TestRedis, args: &[&str]) -> Value {
    let out = bus(redis, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bus {args:?}: {stderr}");
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Runs a command that must fail (exit 1); its stderr.
fn refused(redis: &TestRedis, args: &[&str]) -> String {
    let out = bus(redis, args);
    assert_eq!(out.status.code(), Some(1), "bus {args:?} did not fail");
    assert!(out.stdout.is_empty(), "bus {args:?} printed an outcome");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The dashboard of the test's bus queues and its BabelQueue queues (legacy layout), its
/// operator `dora`, on a free loopback port; it stops with the test.
async fn dashboard(s: &Setup) -> SocketAddr {
    let babel = bus_babelqueue::Admin::new(s.transport.client().clone()).layout(Layout::Legacy);
    let fleet = Fleet::new(Management::from_transport(s.transport.clone())).with(Arc::new(babel));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let dashboard = Dashboard::for_fleet(fleet, DashboardOptions::default().operator("dora"));
    tokio::spawn(async move { dashboard.serve(listener).await });
    addr
}

/// One HTTP/1.1 request to the dashboard; the status and the body as JSON (or text).
async fn http(addr: SocketAddr, method: &str, path: &str, csrf: &str, body: &str) -> (u16, Value) {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nX-CSRF-Token: {csrf}\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        String::from_utf8_lossy(&raw).into_owned()
    };
    let raw = tokio::time::timeout(WAIT, exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no answer in {WAIT:?}"));
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {raw:?}"));
    let body = serde_json::from_str(body).unwrap_or_else(|_| Value::from(body));
    (status, body)
}

/// The CSRF token the dashboard's page carries, which every `POST` needs.
async fn csrf(addr: SocketAddr) -> String {
    let (status, page) = http(addr, "GET", "/", "", "").await;
    assert_eq!(status, 200);
    let page = page.as_str().expect("the page").to_owned();
    let marker = r#"name="csrf-token" content=""#;
    let start = page.find(marker).expect("a CSRF token") + marker.len();
    page[start..start + 64].to_owned()
}

/// The audit log, oldest first: who, through what, what, on what, how many, detail.
fn audit_log(redis: &TestRedis) -> Vec<[String; 6]> {
    let log = ok(redis, &["audit", "-n", "100"]);
    let mut rows: Vec<[String; 6]> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let text = |field: &str| match &e[field] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            ["who", "via", "action", "target", "count", "detail"].map(text)
        })
        .collect();
    rows.reverse();
    rows
}

fn entry(
    who: &str,
    via: &str,
    action: &str,
    target: &str,
    count: u64,
    detail: &str,
) -> [String; 6] {
    [who, via, action, target, &count.to_string(), detail].map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_change_from_bus_or_the_dashboard_is_audited_once() {
    let s = setup().await;
    let r = &s.redis;
    for n in 0..3 {
        s.bus.send(&Work { n }).await.unwrap();
    }
    let dead = s.dead_letter(&work(), 3, DeadLetterReason::Rejected).await;
    let delayed = s
        .bus
        .send_delayed(&Work { n: 9 }, Duration::from_secs(600))
        .await
        .unwrap()
        .to_string();
    let addr = dashboard(&s).await;
    let token = csrf(addr).await;
    let post = |path: &'static str, body: Value| {
        let token = token.clone();
        async move { http(addr, "POST", path, &token, &body.to_string()).await }
    };

    ok(r, &["pause", "work"]);
    let (status, resumed) = post("/api/queue/resume", json!({ "name": "work" })).await;
    assert_eq!(
        (status, &resumed["paused"]),
        (200, &json!(false)),
        "{resumed}"
    );
    ok(r, &["requeue", "work", "--id", &dead[0]]);
    let (status, moved) = post(
        "/api/dead-letters/requeue",
        json!({ "name": "work", "ids": [dead[1]], "to": "staging" }),
    )
    .await;
    assert_eq!(
        (status, &moved["target"]),
        (200, &json!("staging")),
        "{moved}"
    );
    let (status, deleted) = post(
        "/api/dead-letters/delete",
        json!({ "name": "work", "ids": [dead[2]] }),
    )
    .await;
    assert_eq!(
        (status, &deleted["deleted"]),
        (200, &json!([dead[2]])),
        "{deleted}"
    );
    ok(r, &["cancel", "work", &delayed]);
    // Misses, from both: nothing was there to change, so nothing is recorded.
    let (status, again) = post(
        "/api/scheduled/cancel",
        json!({ "name": "work", "id": delayed }),
    )
    .await;
    assert_eq!(
        (status, &again["cancelled"]),
        (200, &json!(false)),
        "{again}"
    );
    let (status, gone) = post(
        "/api/dead-letters/delete",
        json!({ "name": "work", "ids": [dead[2]] }),
    )
    .await;
    assert_eq!(
        (status, &gone["not_found"]),
        (200, &json!([dead[2]])),
        "{gone}"
    );
    assert!(refused(r, &["delete-dead", "work", &dead[2]]).contains("is not a dead letter"));

    let (bus, web) = ("bus", "dashboard from 127.0.0.1");
    assert_eq!(
        audit_log(r),
        [
            entry("carol", bus, "pause", "work", 1, ""),
            entry("dora", web, "resume", "work", 1, ""),
            entry("carol", bus, "requeue", "work", 1, "to work"),
            entry("dora", web, "move", "work", 1, "to staging"),
            entry(
                "dora",
                web,
                "delete",
                "work",
                1,
                &format!("dead letters {}", dead[2])
            ),
            entry("carol", bus, "cancel", "work", 1, &delayed),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_the_kind_cannot_make_is_refused_alike_by_both_and_writes_nothing() {
    let s = setup().await;
    let r = &s.redis;
    let orders = format!("{}-orders", r.namespace());
    let envelope = format!(
        r#"{{"job":"urn:babel:orders:created","trace_id":"t-1","data":{{"order":1}},"meta":{{"id":"m-1","queue":"{orders}","lang":"python","schema_version":1,"created_at":1}},"attempts":0}}"#
    );
    r.client().cmd(&["RPUSH", &orders, &envelope]).unwrap();
    s.bus.send(&Work { n: 1 }).await.unwrap();
    let addr = dashboard(&s).await;
    let token = csrf(addr).await;
    let address = format!("babel:{orders}");
    let keys_before = r.keys();
    let mut client = r.client();
    let dump = |client: &mut bus_test_redis::SyncClient, keys: &[String]| -> Vec<Vec<u8>> {
        keys.iter()
            .map(|k| {
                let value = client.cmd(&["DUMP", k]).unwrap();
                value.as_bytes().map(<[u8]>::to_vec).unwrap_or_default()
            })
            .collect()
    };
    let before = dump(&mut client, &keys_before);

    for (args, path, body, says) in [
        (
            vec!["pause", address.as_str()],
            "/api/queue/pause",
            json!({ "name": address }),
            "babel queues cannot be paused".to_owned(),
        ),
        (
            vec!["close-breaker", address.as_str()],
            "/api/queue/close-breaker",
            json!({ "name": address }),
            "babel queues cannot have a circuit breaker closed".to_owned(),
        ),
        (
            vec!["cancel", address.as_str(), "m-1"],
            "/api/scheduled/cancel",
            json!({ "name": address, "id": "m-1" }),
            format!("`cancel` works on the bus's own queues; {address} is a babel queue"),
        ),
    ] {
        let stderr = refused(r, &args);
        assert!(stderr.contains(&says), "bus {args:?}: {stderr}");
        let (status, answer) = http(addr, "POST", path, &token, &body.to_string()).await;
        assert_eq!(status, 400, "{path}: {answer}");
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(error.contains(&says), "{path}: {answer}");
    }

    assert_eq!(
        r.keys(),
        keys_before,
        "a refused change added or removed a key"
    );
    assert_eq!(
        dump(&mut client, &keys_before),
        before,
        "a refused change wrote"
    );
    assert!(audit_log(r).is_empty());
}
