//! The Rust adapter's throughput on each layout beside the Python SDK worker's, on the
//! same queue of the same Redis, in the same run (docs/babelqueue.md).
//!
//! `cargo run --release -p bus-babelqueue --example throughput`
//!
//! Needs the venv of the tests (`target/bq-venv`, made by scripts/test.sh) or `BQ_PYTHON`.
//! Each side drains N messages that the Python SDK published; a no-op handler, the Rust
//! side through the `bus_core::Consumer` trait (receive 100, ack the batch).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use bus_babelqueue::{BabelTransport, Options};
use bus_core::{ConsumerOptions, Source, Transport};
use bus_redis::RedisConfig;
use bus_test_redis::RedisServer;
use tokio_util::sync::CancellationToken;

const N: usize = 20_000;

fn python() -> PathBuf {
    std::env::var("BQ_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bq-venv/bin/python")
        })
}

fn bq_py(args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/bq.py");
    let out = Command::new(python()).arg(script).args(args).output()?;
    if !out.status.success() {
        return Err(format!("bq.py {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = RedisServer::start()?;
    let url = server.url();
    let count = N.to_string();
    println!("| layout | Rust adapter msg/s | Python SDK worker msg/s | ratio |");
    println!("|---|---:|---:|---:|");
    for (layout, options) in [
        ("legacy", Options::legacy()),
        ("laravel", Options::laravel()),
    ] {
        let base = [
            "--url",
            url.as_str(),
            "--layout",
            layout,
            "--queue",
            "bench",
        ];
        bq_py(&[&["publish", "--count", &count][..], &base[..]].concat())?;
        let transport = BabelTransport::connect(&RedisConfig::from_url(&url)?, options).await?;
        let consumer = transport
            .consumer(
                &Source::queue("bench")?,
                ConsumerOptions::new(std::time::Duration::from_secs(30), 3),
            )
            .await?;
        let stop = CancellationToken::new();
        let (mut done, started) = (0, Instant::now());
        while done < N {
            let batch = consumer.receive(100, &stop).await?;
            let receipts: Vec<_> = batch.iter().map(|d| d.receipt.clone()).collect();
            consumer.ack(&receipts).await?;
            done += batch.len();
        }
        let rust = N as f64 / started.elapsed().as_secs_f64();
        consumer.close().await?;

        bq_py(&[&["publish", "--count", &count][..], &base[..]].concat())?;
        let out = bq_py(&[&["bench", "--count", &count, "--idle", "1"][..], &base[..]].concat())?;
        let result: serde_json::Value = serde_json::from_str(out.trim())?;
        let seconds = result["seconds"].as_f64().unwrap_or(f64::NAN);
        let py = result["count"].as_f64().unwrap_or(0.0) / seconds;
        println!("| {layout} | {rust:.0} | {py:.0} | {:.1}x |", rust / py);
    }
    Ok(())
}
