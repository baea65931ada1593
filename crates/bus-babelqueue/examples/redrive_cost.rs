//! What management costs (docs/babelqueue.md, "Management").
//!
//! `cargo run --release -p bus-babelqueue --example redrive_cost`
//!
//! Starts a private redis-server on a free loopback port; times a dry run and a redrive of
//! a DLQ of 20,000 records, with and without 2,000 poison records in front (each move's
//! `LREM` walks past the records that stay), and `Admin::queues` over 100 queues among
//! 100,000 other keys.

use std::time::Instant;

use bus_babelqueue::{Admin, DeadLetterBlock, Envelope, Layout, Reason, RedriveOptions};
use bus_redis::RedisConfig;
use bus_test_redis::RedisServer;
use serde_json::value::RawValue;

const RECORDS: usize = 20_000;

fn fill(server: &RedisServer, key: &str, poison: usize) -> Result<(), Box<dyn std::error::Error>> {
    let mut c = server.client();
    let data = RawValue::from_string(r#"{"order_id":1042,"note":"a typical small body"}"#.into())?;
    for i in 0..poison {
        c.cmd(&["RPUSH", key, &format!("poison {i}")])?;
    }
    for _ in 0..RECORDS {
        let env = Envelope::new("urn:babel:orders:created", &data, "orders")?;
        let block = DeadLetterBlock::new(Reason::Failed, "orders", 3, Some("boom".into()), None);
        c.cmd(&[
            b"RPUSH".as_slice(),
            key.as_bytes(),
            &env.dead_lettered(&block),
        ])?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = RedisServer::start()?;
    let config = RedisConfig::from_url(&server.url())?;
    let admin = Admin::new(config.connect_client().await?);
    let layout = Layout::Legacy;
    println!("| poison in front | dry run ms | redrive ms | records/s |");
    println!("|---:|---:|---:|---:|");
    for poison in [0, 2_000] {
        server.client().cmd(&["FLUSHALL"])?;
        fill(&server, "orders.dlq", poison)?;
        let start = Instant::now();
        let plan = admin
            .redrive(&layout, "orders", &RedriveOptions::new().dry_run(true))
            .await?;
        let dry = start.elapsed();
        let start = Instant::now();
        let report = admin
            .redrive(&layout, "orders", &RedriveOptions::new())
            .await?;
        let real = start.elapsed();
        assert_eq!((plan.redriven, report.redriven), (RECORDS, RECORDS));
        println!(
            "| {poison} | {:.0} | {:.0} | {:.0} |",
            dry.as_secs_f64() * 1e3,
            real.as_secs_f64() * 1e3,
            RECORDS as f64 / real.as_secs_f64()
        );
    }
    server.client().cmd(&["FLUSHALL"])?;
    let mut c = server.client();
    for i in 0..100_000 {
        c.cmd(&["SET", &format!("other:{i}"), "x"])?;
    }
    for i in 0..100 {
        c.cmd(&["RPUSH", &format!("q{i}.dlq"), "x"])?;
    }
    let start = Instant::now();
    let found = admin.queues().await?;
    println!(
        "queues(): {} found among 100,100 keys in {:.0} ms",
        found.len(),
        start.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}
