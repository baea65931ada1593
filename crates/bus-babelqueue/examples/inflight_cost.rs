//! What one reserve + ack costs with many messages in flight, per layout (docs/babelqueue.md).
//!
//! `cargo run --release -p bus-babelqueue --example inflight_cost`
//!
//! Starts a private redis-server on a free loopback port, holds N messages reserved,
//! then runs reserve(1) + ack cycles. The legacy layout acks with `LREM :processing`,
//! which scans the list: its cost grows with N. Laravel's `ZREM :reserved` does not.
//! Reports the Redis time per cycle (from `INFO commandstats`) and the wall time.

use std::time::Instant;

use bus_babelqueue::{BabelQueue, Envelope, Headers, Options};
use bus_redis::RedisConfig;
use bus_test_redis::{RedisServer, SyncClient};
use serde_json::value::RawValue;

const CYCLES: usize = 2000;

fn redis_usec(client: &mut SyncClient) -> f64 {
    let stats = client.info("commandstats").expect("INFO commandstats");
    // Only the commands the client sends (inner script commands are counted too, so
    // they are left out to avoid counting twice).
    ["evalsha", "zrem"]
        .iter()
        .filter_map(|cmd| {
            let line = stats
                .lines()
                .find(|l| l.starts_with(&format!("cmdstat_{cmd}:")))?;
            let usec = line.split(',').find_map(|f| f.strip_prefix("usec="))?;
            usec.parse::<f64>().ok()
        })
        .sum()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = RedisServer::start()?;
    let mut admin = server.client();
    let config = RedisConfig::from_url(&server.url())?;
    let data = RawValue::from_string(
        r#"{"order_id":1042,"note":"about a hundred bytes of JSON"}"#.into(),
    )?;
    println!("| layout | in flight | Redis µs per reserve+ack | wall µs per reserve+ack |");
    println!("|---|---:|---:|---:|");
    for (name, options) in [
        ("legacy", Options::legacy()),
        ("laravel", Options::laravel()),
    ] {
        for held in [10usize, 100, 1000, 5000] {
            admin.cmd(&["FLUSHALL"])?;
            let bq = BabelQueue::connect(&config, options.clone()).await?;
            let total = held + CYCLES;
            for chunk in (0..total).collect::<Vec<_>>().chunks(1000) {
                let items = chunk
                    .iter()
                    .map(|_| {
                        Envelope::new("urn:babel:orders:created", &data, "orders")
                            .map(|e| (e.encode(), Headers::new()))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                bq.publish_encoded("orders", items).await?;
            }
            let consumer = bq.consumer("orders").await?;
            let mut kept = Vec::new();
            while kept.len() < held {
                kept.extend(consumer.reserve((held - kept.len()).min(100)).await?);
            }
            admin.cmd(&["CONFIG", "RESETSTAT"])?;
            let started = Instant::now();
            for _ in 0..CYCLES {
                let reserved = consumer.reserve(1).await?;
                let handles: Vec<_> = reserved.iter().map(|r| r.handle().clone()).collect();
                consumer.ack(&handles).await?;
            }
            let wall = started.elapsed();
            let usec = redis_usec(&mut admin);
            println!(
                "| {name} | {held} | {:.1} | {:.1} |",
                usec / CYCLES as f64,
                wall.as_secs_f64() * 1e6 / CYCLES as f64
            );
            drop(kept);
            consumer.close().await?;
        }
    }
    Ok(())
}
