//! A bus host on BabelQueue queues beside the real Python SDK's worker (issue 11): each
//! drains N messages that the Python SDK published on the same queue of the same Redis,
//! with a no-op handler, in the same run, on both layouts.
//!
//! `cargo bench -p benches --bench babelqueue` (needs the venv of the tests,
//! `target/bq-venv`, which scripts/test.sh creates, or `BQ_PYTHON`).
//!
//! The host runs with 100 concurrent calls and 100 prefetched; the SDK's worker as it
//! ships (one message at a time). The rate is from the first handled message to the
//! last on both sides (start-up excluded).

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bus_babelqueue::{BabelTransport, Options};
use bus_core::{
    Command as BusCommand, CommandProcessor, Context, Host, Message, MessageKind, ProcessError,
    ProcessingSettings,
};
use bus_redis::RedisConfig;
use bus_test_redis::RedisServer;
use serde::{Deserialize, Serialize};

const N: usize = 20_000;

/// The body bq.py publishes; only the URN matters here.
#[derive(Debug, Serialize, Deserialize)]
struct Order {
    i: u64,
}
impl Message for Order {
    const NAME: &'static str = "bench";
    const TYPE: &'static str = "urn:babel:orders:created";
    const KIND: MessageKind = MessageKind::Command;
}
impl BusCommand for Order {}

/// First and last handling instants, and the count.
#[derive(Default)]
struct Clock(Mutex<(Option<Instant>, Option<Instant>, usize)>);

#[async_trait]
impl CommandProcessor<Order> for Arc<Clock> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(100)
            .prefetch_count(100)
    }
    async fn process(&self, _: Order, _: &Context) -> Result<(), ProcessError> {
        let now = Instant::now();
        let mut clock = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        clock.0.get_or_insert(now);
        clock.1 = Some(now);
        clock.2 += 1;
        Ok(())
    }
}

fn bq_py(args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/bus-babelqueue/tests/python/bq.py");
    let out = Command::new(bus_test_redis::python::bq_python())
        .arg(script)
        .args(args)
        .output()?;
    if !out.status.success() {
        return Err(format!("bq.py {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

async fn host_rate(url: &str, options: Options) -> Result<f64, Box<dyn std::error::Error>> {
    let clock = Arc::new(Clock::default());
    let transport = BabelTransport::connect(&RedisConfig::from_url(url)?, options).await?;
    let running = Host::builder()
        .transport(transport)
        .command::<Order, _>(Arc::clone(&clock))
        .build()?
        .start()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while clock.0.lock().map(|c| c.2).unwrap_or(0) < N && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    running.shutdown().await?;
    let (first, last, count) = *clock
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match (first, last) {
        (Some(first), Some(last)) if count == N => Ok(N as f64 / (last - first).as_secs_f64()),
        _ => Err(format!("the host handled {count} of {N}").into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = RedisServer::start()?;
    let url = server.url();
    let count = N.to_string();
    println!("{N} messages per side, no-op handler, one redis-server");
    println!("| layout | bus host msg/s | Python SDK worker msg/s | ratio |");
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
        let rust = host_rate(&url, options).await?;
        bq_py(&[&["publish", "--count", &count][..], &base[..]].concat())?;
        let out = bq_py(&[&["bench", "--count", &count, "--idle", "1"][..], &base[..]].concat())?;
        let result: serde_json::Value = serde_json::from_str(out.trim())?;
        let seconds = result["seconds"].as_f64().unwrap_or(f64::NAN);
        let py = result["count"].as_f64().unwrap_or(0.0) / seconds;
        println!("| {layout} | {rust:.0} | {py:.0} | {:.1}x |", rust / py);
    }
    Ok(())
}
