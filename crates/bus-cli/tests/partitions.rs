//! `bus stats` on a partitioned queue, against a real Redis: one row for the queue, its
//! shards' rows under it; in JSON, a `shards` array beside the counts.

use bus_core::transport::{ConsumerOptions, Source};
use bus_core::{Bus, BusConfig, Transport};
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::TestRedis;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

#[derive(Debug, Serialize, Deserialize, bus_core::RedisCommand)]
#[bus(queue = "work")]
struct Work {
    n: u64,
}

fn bus(redis: &TestRedis, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .args(["--url", &redis.url(), "--prefix", redis.namespace()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the bus binary runs");
    assert!(
        out.status.success(),
        "bus {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_show_a_partitioned_queue_with_its_shards() {
    let redis = TestRedis::start().unwrap();
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace())
        .partitions("work", 3);
    let transport = RedisTransport::connect(&config).await.unwrap();
    // A consumer records the partitions; then 7 sends, round robin: 3, 2, 2.
    let consumer = transport
        .consumer(
            &Source::queue("work").unwrap(),
            ConsumerOptions::new(Duration::from_secs(30), 5),
        )
        .await
        .unwrap();
    consumer.close().await.unwrap();
    let bus_handle = Bus::new(transport, BusConfig::default());
    for n in 0..7 {
        bus_handle.send(&Work { n }).await.unwrap();
    }

    let json: Value =
        serde_json::from_slice(&bus(&redis, &["--json", "stats", "work"]).stdout).expect("JSON");
    assert_eq!(json[0]["queue"], "work");
    assert_eq!(json[0]["ready"], 7);
    let shards = json[0]["shards"].as_array().expect("a shards array");
    let per_shard: Vec<(String, u64)> = shards
        .iter()
        .map(|s| {
            (
                s["queue"].as_str().unwrap().to_owned(),
                s["ready"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        per_shard,
        [
            ("work:0".into(), 3),
            ("work:1".into(), 2),
            ("work:2".into(), 2)
        ]
    );

    let table = String::from_utf8(bus(&redis, &["stats", "--all"]).stdout).unwrap();
    let rows: Vec<&str> = table.lines().filter(|line| line.contains("work")).collect();
    assert_eq!(rows.len(), 4, "{table}");
    assert!(
        rows[1].contains("  work:0") && rows[3].contains("  work:2"),
        "{table}"
    );
    // The queue is listed once.
    let queues: Value =
        serde_json::from_slice(&bus(&redis, &["--json", "queues"]).stdout).expect("JSON");
    assert_eq!(queues, serde_json::json!(["work"]));
}
