//! `bus hosts`, run as the binary: a host running in this process (its
//! heartbeat with default settings) and one that stopped reporting, shown LOST.

#[path = "../../bus-management/tests/common/mod.rs"]
mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::heartbeat::HostInfo;
use bus_core::{CommandProcessor, Context, Host, ProcessError, Transport};
use bus_test_redis::bus::Running;
use bus_test_redis::eventually_async as eventually;
use common::{setup, Work};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

fn bus(url: &str, prefix: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .args(["--url", url, "--prefix", prefix])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the bus binary runs")
}

struct Acks;

#[async_trait]
impl CommandProcessor<Work> for Acks {
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_hosts_lists_a_running_host_and_a_lost_one() {
    let s = setup().await;
    let (url, prefix) = (s.redis.url(), s.redis.namespace().to_owned());
    let out = bus(&url, &prefix, &["hosts"]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no host has reported"),
        "{out:?}"
    );

    let running = Running::start(
        Host::builder()
            .transport(s.transport.clone())
            .command::<Work, _>(Acks)
            .build()
            .unwrap(),
    );
    // A host that reported once with a 100 ms interval, then went silent.
    let silent: HostInfo = serde_json::from_value(json!({
        "id": "gone:7:1", "hostname": "gone", "pid": 7, "version": "0.0.9",
        "queues": ["work"], "concurrency": 2, "in_flight": 0,
        "started_at_ms": 1, "interval_ms": 100,
    }))
    .unwrap();
    let reporter = s.transport.extras().host_reporter.unwrap();
    reporter.report(&silent).await.unwrap();

    let pid = std::process::id();
    let listed = eventually(WAIT, || async {
        let out = bus(&url, &prefix, &["--json", "hosts"]);
        let hosts: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let states: Vec<(u64, bool)> = hosts
            .iter()
            .map(|h| (h["pid"].as_u64().unwrap_or(0), h["lost"] == true))
            .collect();
        states == [(u64::from(pid), false), (7, true)]
    })
    .await;
    let out = bus(&url, &prefix, &["hosts"]);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(listed, "{table}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |needle: &str| {
        table
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle} in\n{table}"))
            .to_owned()
    };
    let mine = line(&format!(" {pid} "));
    assert!(mine.contains("running") && mine.contains("work"), "{table}");
    let lost = line("gone");
    assert!(lost.contains("LOST") && lost.contains("0.0.9"), "{table}");
    running.stop().await;
}

/// `bus schedules`: a host's recurring schedule, listed with its cron,
/// zone, queue, policy, last tick and next run once it has ticked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_schedules_lists_a_running_schedule_with_its_last_tick_and_next_run() {
    let s = setup().await;
    let (url, prefix) = (s.redis.url(), s.redis.namespace().to_owned());
    let out = bus(&url, &prefix, &["schedules"]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no schedule is recorded"),
        "{out:?}"
    );
    let running = Running::start(
        Host::builder()
            .transport(s.transport.clone())
            .command::<Work, _>(Acks)
            .schedule(
                bus_core::Recurring::new("* * * * * *", || Work { n: 0 })
                    .name("every-second")
                    .time_zone("Europe/Oslo"),
            )
            .build()
            .unwrap(),
    );
    let mut listed = Value::Null;
    let ticked = eventually(WAIT, || {
        let out = bus(&url, &prefix, &["--json", "schedules"]);
        listed = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let ticked = listed[0]["last_tick_ms"].as_u64().is_some();
        async move { ticked }
    })
    .await;
    assert!(ticked, "{listed}");
    let one = &listed[0];
    assert_eq!(
        (
            &one["name"],
            &one["cron"],
            &one["zone"],
            &one["queue"],
            &one["missed"]
        ),
        (
            &json!("every-second"),
            &json!("* * * * * *"),
            &json!("Europe/Oslo"),
            &json!("work"),
            &json!("skip")
        ),
        "{listed}"
    );
    let (last, next) = (
        one["last_tick_ms"].as_u64().unwrap(),
        one["next_run_ms"].as_u64().unwrap(),
    );
    assert!(
        last % 1000 == 0 && next % 1000 == 0 && next > last,
        "{listed}"
    );
    let out = bus(&url, &prefix, &["schedules"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table
        .lines()
        .find(|l| l.contains("every-second"))
        .unwrap_or_else(|| panic!("no schedule in\n{table}"));
    assert!(
        line.contains("Europe/Oslo") && line.contains("work") && line.contains("skip"),
        "{table}"
    );
    running.stop().await;
}
