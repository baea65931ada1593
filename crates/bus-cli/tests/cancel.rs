//! `bus cancel`: a delayed message removed before it becomes ready, by the id `bus
//! scheduled` shows; the same as `Bus::cancel`.

// The management tests' plumbing, shared rather than copied.
#[path = "../../bus-management/tests/common/mod.rs"]
mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use bus_test_redis::TestRedis;
use common::{setup, Work};
use serde_json::Value;

fn bus(redis: &TestRedis, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
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

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_cancel_removes_a_delayed_message_once() {
    let s = setup().await;
    let r = &s.redis;
    let later = Duration::from_secs(600);
    let cancelled = s.bus.send_delayed(&Work { n: 1 }, later).await.unwrap();
    let kept = s.bus.send_delayed(&Work { n: 2 }, later).await.unwrap();

    let scheduled = json(&bus(r, &["scheduled", "work"]));
    let shown: Vec<&str> = scheduled
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["storage_id"].as_str())
        .collect();
    assert!(shown.contains(&cancelled.as_str()), "{scheduled}");

    let out = json(&bus(r, &["cancel", "work", cancelled.as_str()]));
    assert_eq!(out["cancelled"], cancelled.as_str());
    let again = bus(r, &["cancel", "work", cancelled.as_str()]);
    assert!(!again.status.success(), "cancelled twice");
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains(cancelled.as_str()), "{stderr}");
    // The cancel is audited once; the refused second one is not.
    let audit = json(&bus(r, &["audit"]));
    let cancels: Vec<&Value> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "cancel")
        .collect();
    assert_eq!(cancels.len(), 1, "{audit}");
    assert_eq!(cancels[0]["detail"], cancelled.as_str());

    let scheduled = json(&bus(r, &["scheduled", "work"]));
    assert_eq!(scheduled.as_array().unwrap().len(), 1, "{scheduled}");
    assert_eq!(scheduled[0]["message"]["body"]["n"], 2);
    assert_eq!(
        r.counts("work").msgs,
        1,
        "the cancelled envelope is deleted"
    );
    // The library's cancel is the same script.
    assert!(s.bus.cancel::<Work>(&kept).await.unwrap());
    assert_eq!(r.counts("work").delayed, 0);
}
