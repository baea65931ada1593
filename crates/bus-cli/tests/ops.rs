//! The operator's live views against a real Redis: `bus stats --watch` (counts and rates),
//! `bus metrics` and `bus dashboard` served by the binary and read over plain HTTP.

// The management tests' plumbing, shared rather than copied.
#[path = "../../bus-management/tests/common/mod.rs"]
mod common;

use bus_core::transport::ConsumerExt;
use bus_core::transport::{ConsumerOptions, DeadLetterReason};
use bus_core::Transport;
use bus_test_redis::{eventually, TestRedis};
use common::{setup, work, Work};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Every wait here: generous for a loaded 2-core machine, still bounded.
const WAIT: Duration = Duration::from_secs(30);

/// A running `bus`, killed when dropped; its stdout lines arrive on `lines`.
struct Running {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    fn start(redis: &TestRedis, args: &[&str]) -> Running {
        Running::start_with(redis, args, None)
    }

    /// Started with `BUS_DASHBOARD_TOKEN` set to `token`, if given.
    fn start_with(redis: &TestRedis, args: &[&str], token: Option<&str>) -> Running {
        let mut command = Command::new(env!("CARGO_BIN_EXE_bus"));
        command
            .env_remove("REDIS_URL")
            .env_remove("BUS_DASHBOARD_TOKEN");
        if let Some(token) = token {
            command.env("BUS_DASHBOARD_TOKEN", token);
        }
        let mut child = command
            .args(["--url", &redis.url(), "--prefix", redis.namespace()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the bus binary runs");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits until a line printed so far satisfies `pick`; returns what it picked.
    async fn wait_for<T>(&mut self, mut pick: impl FnMut(&[String]) -> Option<T>) -> T {
        let mut found = None;
        let held = eventually(WAIT, || {
            self.seen.extend(self.lines.try_iter());
            found = pick(&self.seen);
            found.is_some()
        })
        .await;
        assert!(held, "not printed; got:\n{}", self.seen.join("\n"));
        found.unwrap()
    }

    /// The address in the first line, `... on http://ADDR/...`.
    async fn address(&mut self) -> String {
        self.wait_for(|lines| {
            let rest = lines.first()?.split("http://").nth(1)?;
            Some(rest.split('/').next()?.to_owned())
        })
        .await
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` over plain HTTP/1.1 (one request, connection closed); status and body.
fn get(addr: &str, path: &str) -> (u16, String) {
    get_with(addr, path, "")
}

/// [`get`] with extra header lines (each ending in CRLF).
fn get_with(addr: &str, path: &str, headers: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    (
        status,
        if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        },
    )
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

/// Acknowledges `n` messages of `work` through the transport's own consumer.
async fn ack(s: &common::Setup, n: usize) {
    let consumer = s
        .transport
        .consumer(&work(), ConsumerOptions::new(Duration::from_secs(60), 5))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let mut done = 0;
    while done < n {
        let deliveries = consumer.take(n - done, &stop).await.unwrap();
        let receipts: Vec<_> = deliveries.into_iter().map(|d| d.receipt).collect();
        consumer.ack(&receipts).await.unwrap();
        done += receipts.len();
    }
    consumer.close().await.unwrap();
}

/// Sum over the samples of `rate` times the time since the sample before: what the rates
/// say happened in all.
fn integral(samples: &[Value], rate: &str) -> f64 {
    samples
        .windows(2)
        .map(|w| {
            let seconds =
                (w[1]["at_ms"].as_u64().unwrap() - w[0]["at_ms"].as_u64().unwrap()) as f64 / 1000.0;
            w[1][rate].as_f64().unwrap_or(0.0) * seconds
        })
        .sum()
}

fn samples(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()[0].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_watch_samples_counts_and_rates() {
    let s = setup().await;
    for n in 1..=6 {
        s.bus.send(&Work { n }).await.unwrap();
    }
    let mut watch = Running::start(
        &s.redis,
        &["--json", "stats", "work", "--watch", "--interval", "200ms"],
    );
    let first = watch
        .wait_for(|lines| lines.first().map(|l| l.to_owned()))
        .await;
    let first: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(first[0]["queue"], "work", "{first}");
    assert_eq!(first[0]["ready"], 6, "{first}");
    assert!(first[0]["processed_per_s"].is_null(), "{first}");

    // Four processed, then two dead-lettered: the rates add up to what happened.
    ack(&s, 4).await;
    let processed = watch
        .wait_for(|lines| {
            let all = samples(lines);
            (all.last()?["ready"] == 2).then(|| integral(&all, "processed_per_s"))
        })
        .await;
    assert!((processed - 4.0).abs() < 0.01, "{processed}");
    s.dead_letter(&work(), 2, DeadLetterReason::Rejected).await;
    let (dead, processed) = watch
        .wait_for(|lines| {
            let all = samples(lines);
            (all.last()?["dead"] == 2).then(|| {
                (
                    integral(&all, "dead_per_s"),
                    integral(&all, "processed_per_s"),
                )
            })
        })
        .await;
    assert!((dead - 2.0).abs() < 0.01, "{dead}");
    assert!((processed - 4.0).abs() < 0.01, "{processed}");

    // Without --json and a terminal: one table per sample, with the rate columns.
    let mut table = Running::start(
        &s.redis,
        &["stats", "--all", "--watch", "--interval", "200ms"],
    );
    let header = table
        .wait_for(|lines| lines.iter().find(|l| l.contains("PROCESSED/S")).cloned())
        .await;
    assert!(header.contains("DEAD/S"), "{header}");
    table
        .wait_for(|lines| lines.iter().find(|l| l.contains("│ work ")).cloned())
        .await;
}

#[test]
fn watching_an_unknown_queue_is_an_error() {
    let redis = TestRedis::start().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .args(["--url", &redis.url(), "--prefix", redis.namespace()])
        .args(["stats", "nope", "--watch"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_serves_the_counts_in_redis() {
    let s = setup().await;
    for n in 1..=5 {
        s.bus.send(&Work { n }).await.unwrap();
    }
    s.dead_letter(&work(), 2, DeadLetterReason::Rejected).await;
    let mut metrics = Running::start(&s.redis, &["metrics", "--listen", "127.0.0.1:0"]);
    let addr = metrics.address().await;
    let (status, body) = get(&addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    let series = "{messaging_system=\"bus\",messaging_destination_name=\"work\"}";
    for (name, value) in [
        ("bus_queue_ready_messages", 3),
        ("bus_queue_dead_letter_messages", 2),
        ("bus_queue_in_flight_messages", 0),
    ] {
        assert!(
            body.lines().any(|l| l == format!("{name}{series} {value}")),
            "{name} {value} missing from\n{body}"
        );
    }
    // Read on each scrape: three more ready show at once.
    for n in 6..=8 {
        s.bus.send(&Work { n }).await.unwrap();
    }
    let (_, body) = get(&addr, "/metrics");
    assert!(
        body.contains(&format!("bus_queue_ready_messages{series} 6")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_serves_the_overview_and_metrics() {
    let s = setup().await;
    for n in 1..=4 {
        s.bus.send(&Work { n }).await.unwrap();
    }
    s.dead_letter(&work(), 1, DeadLetterReason::Rejected).await;
    let mut dashboard = Running::start(&s.redis, &["dashboard", "--listen", "127.0.0.1:0"]);
    let addr = dashboard.address().await;
    let (status, page) = get(&addr, "/");
    assert_eq!(status, 200);
    assert!(page.contains("<html"), "{page}");
    let (status, body) = get(&addr, "/api/overview");
    assert_eq!(status, 200, "{body}");
    let overview: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(overview["prefix"], s.redis.namespace(), "{overview}");
    let queue = &overview["queues"][0];
    assert_eq!(queue["name"], "work", "{overview}");
    assert_eq!(queue["ready"], 3, "{overview}");
    assert_eq!(queue["dead"], 1, "{overview}");
    let (status, metrics) = get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("bus_queue_dead_letter_messages{"),
        "{metrics}"
    );
}

#[test]
fn the_dashboard_refuses_a_public_address_without_a_token() {
    let redis = TestRedis::start().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .env_remove("BUS_DASHBOARD_TOKEN")
        .args(["--url", &redis.url(), "--prefix", redis.namespace()])
        .args(["dashboard", "--listen", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dashboard_token_from_the_environment_is_required() {
    let s = setup().await;
    s.bus.send(&Work { n: 1 }).await.unwrap();
    let mut dashboard = Running::start_with(
        &s.redis,
        &["dashboard", "--listen", "127.0.0.1:0"],
        Some("open-sesame-42"),
    );
    let addr = dashboard.address().await;
    assert_eq!(get(&addr, "/api/overview").0, 401);
    let (status, body) = get_with(
        &addr,
        "/api/overview",
        "Authorization: Bearer open-sesame-42\r\n",
    );
    assert_eq!(status, 200, "{body}");
    let overview: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(overview["queues"][0]["ready"], 1, "{overview}");
    // The token is never printed.
    let printed = dashboard.seen.join("\n");
    assert!(!printed.contains("open-sesame"), "{printed}");
}
