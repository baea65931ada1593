//! `bus batches` and `bus batch ID`, run as the binary: a batch before
//! and after its members ran, its dead member and callbacks, and a run parked on a signal.

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bus_conformance::workflows::{self, Done, Durable, Item, Log};
use bus_redis::RedisTransport;
use bus_test_redis::{eventually_async, TestRedis};
use bus_workflows::{BatchState, RedisWorkflowStore, Workflows};
use serde_json::Value;

fn bus(url: &str, prefix: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .args(["--url", url, "--prefix", prefix])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the bus binary runs")
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_str(&stdout(out)).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_batches_shows_progress_dead_members_callbacks_and_parked_runs() {
    let redis = TestRedis::start().unwrap();
    let (url, prefix) = (redis.url(), redis.namespace().to_owned());
    let transport = RedisTransport::connect(&bus_test_redis::bus::config(&redis))
        .await
        .unwrap();
    let workflows = Workflows::new(RedisWorkflowStore::for_transport(&transport));
    assert!(stdout(&bus(&url, &prefix, &["batches"])).contains("no open batches"));

    let client = bus_core::Bus::new(transport.clone(), bus_core::BusConfig::default());
    let batch = workflows
        .batch(&client)
        .on_success(&Done { what: "ok".into() })
        .unwrap()
        .on_complete(&Done {
            what: "done".into(),
        })
        .unwrap()
        .open()
        .await
        .unwrap();
    let items: Vec<Item> = (0..3)
        .map(|n| Item {
            n,
            die: n == 1,
            fail: false,
        })
        .collect();
    batch.send_all(&items).await.unwrap();
    batch.close().await.unwrap();
    let id = batch.id().to_string();
    let listed = json(&bus(&url, &prefix, &["--json", "batches"]));
    assert_eq!(listed["open"][0]["id"], id.as_str());
    assert_eq!(listed["open"][0]["total"], 3);
    let table = stdout(&bus(&url, &prefix, &["batches"]));
    assert!(
        table.contains(&id) && table.contains("success:-"),
        "{table}"
    );

    let log = Log::default();
    let host = workflows::start(Arc::new(transport.clone()), &workflows, &log).await;
    let finished = || async {
        let status = workflows.status(batch.id()).await.unwrap().unwrap();
        status.state == BatchState::Done
    };
    assert!(eventually_async(Duration::from_secs(20), finished).await);
    let shown = json(&bus(&url, &prefix, &["--json", "batch", &id]));
    assert_eq!(
        (shown["succeeded"].as_u64(), shown["dead"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(shown["dead_members"][0]["reason"], "rejected");
    assert_eq!(shown["outcome"], "complete");
    let table = stdout(&bus(&url, &prefix, &["batch", &id]));
    assert!(
        table.contains("complete") && table.contains("sent"),
        "{table}"
    );
    assert!(table.contains("never (outcome complete)"), "{table}");
    assert!(table.contains("item 1 rejected"), "{table}");

    client
        .send(&Durable {
            name: "w".into(),
            ms: 60_000,
            signal: Some("sig-paid".into()),
        })
        .await
        .unwrap();
    let parked = || async {
        let listed = json(&bus(&url, &prefix, &["--json", "batches"]));
        listed["parked"][0]["kind"]["wait"]["signal"] == "sig-paid"
    };
    assert!(eventually_async(Duration::from_secs(20), parked).await);
    let table = stdout(&bus(&url, &prefix, &["batches"]));
    assert!(
        table.contains("signal sig-paid") && table.contains("wf-durable"),
        "{table}"
    );

    let missing = bus(&url, &prefix, &["batch", "nope"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no batch nope"));
    host.shutdown().await.unwrap();
}
