//! A bus host on BabelQueue queues beside the real Python SDK's worker: each
//! drains N messages that the Python SDK published on the same queue of the same Redis,
//! with a no-op handler, in the same run, on both layouts; and the bus host on its own
//! (native) queues in the same run, N messages of the same shape pre-filled by the bus,
//! as the yardstick of the BabelQueue host (at >= 60% of the native one).
//!
//! `cargo bench -p benches --bench babelqueue` (needs the venv of the tests,
//! `target/bq-venv`, which scripts/test.sh creates, or `BQ_PYTHON`). `ROUNDS=n` repeats
//! the three host rows n times (the Python worker runs in the first round only).
//! `PROFILE=legacy|laravel|native N=200000` runs one host alone, pre-filled from Rust, for
//! `perf record` (no Python).
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
    Bus, BusConfig, Command as BusCommand, CommandProcessor, Context, Host, Message, MessageKind,
    ProcessError, ProcessingSettings, Transport,
};
use bus_redis::{RedisConfig, RedisTransport};
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

/// What bq.py publishes (`data_for`), for the pre-fills from Rust: the native row and
/// `PROFILE`. The handlers read `i` only, on every row.
#[derive(Debug, Serialize, Deserialize)]
struct Published {
    i: u64,
    text: String,
    big: u64,
    empty: Vec<u8>,
    ratio: f64,
}

fn published(i: u64) -> Published {
    Published {
        i,
        text: "ü / \"q\" \u{2028}".to_owned(),
        big: 9_007_199_254_740_993,
        empty: Vec::new(),
        ratio: 0.1,
    }
}

macro_rules! published_to {
    ($ty:ident, $queue:literal) => {
        #[derive(Debug, Serialize, Deserialize)]
        #[serde(transparent)]
        struct $ty(Published);
        impl Message for $ty {
            const NAME: &'static str = $queue;
            const TYPE: &'static str = "urn:babel:orders:created";
            const KIND: MessageKind = MessageKind::Command;
        }
        impl BusCommand for $ty {}
    };
}
published_to!(ToNative, "bench-native");
published_to!(ToBabel, "bench");

/// The same message on a native queue.
#[derive(Debug, Serialize, Deserialize)]
struct NativeOrder {
    i: u64,
}
impl Message for NativeOrder {
    const NAME: &'static str = "bench-native";
    const TYPE: &'static str = "urn:babel:orders:created";
    const KIND: MessageKind = MessageKind::Command;
}
impl BusCommand for NativeOrder {}

/// First and last handling instants, and the count.
#[derive(Default)]
struct Clock(Mutex<(Option<Instant>, Option<Instant>, usize)>);

impl Clock {
    fn tick(&self) {
        let now = Instant::now();
        let mut clock = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        clock.0.get_or_insert(now);
        clock.1 = Some(now);
        clock.2 += 1;
    }
}

fn settings() -> ProcessingSettings {
    ProcessingSettings::default()
        .max_concurrent_calls(100)
        .prefetch_count(100)
}

#[async_trait]
impl CommandProcessor<Order> for Arc<Clock> {
    fn settings(&self) -> ProcessingSettings {
        settings()
    }
    async fn process(&self, _: Order, _: &Context) -> Result<(), ProcessError> {
        self.tick();
        Ok(())
    }
}

#[async_trait]
impl CommandProcessor<NativeOrder> for Arc<Clock> {
    fn settings(&self) -> ProcessingSettings {
        settings()
    }
    async fn process(&self, _: NativeOrder, _: &Context) -> Result<(), ProcessError> {
        self.tick();
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

type BoxError = Box<dyn std::error::Error>;

/// The bus host on the BabelQueue queue `bench`, drained of its N messages.
async fn host_rate(url: &str, options: Options) -> Result<f64, BoxError> {
    let transport = BabelTransport::connect(&RedisConfig::from_url(url)?, options).await?;
    drain::<Order>(transport, N).await
}

/// The bus host on a native queue, pre-filled by the bus with N messages of the same
/// shape (the SDK's `{"i": n}`), drained the same way.
async fn native_rate(
    url: &str,
    round: usize,
    n: usize,
    cpu_at_start: Option<(u16, &mut (f64, f64))>,
) -> Result<f64, BoxError> {
    let config = RedisConfig::from_url(url)?.prefix(format!("native{round}"));
    let transport = RedisTransport::connect(&config).await?;
    let bus = Bus::new(Arc::new(transport.clone()), BusConfig::default());
    let orders: Vec<ToNative> = (0..n as u64).map(|i| ToNative(published(i))).collect();
    for batch in orders.chunks(1_000) {
        bus.send_batch(batch).await?;
    }
    if let Some((port, at)) = cpu_at_start {
        *at = cpu(port)?;
    }
    drain::<NativeOrder>(transport, n).await
}

/// CPU seconds so far: Redis's (`INFO cpu`) and this process's (`/proc/self/stat`, in
/// clock ticks of 10 ms).
fn cpu(port: u16) -> Result<(f64, f64), BoxError> {
    let info = bus_test_redis::SyncClient::connect(port)?.info("cpu")?;
    let field = |name: &str| -> f64 {
        bus_test_redis::info_field(&info, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let redis = field("used_cpu_user") + field("used_cpu_sys");
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // After the command name's closing parenthesis: fields 14 and 15 are utime, stime.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse().ok())
        .collect();
    Ok((redis, ticks.iter().sum::<f64>() / 100.0))
}

/// `PROFILE`: one host alone on `n` messages pre-filled from Rust, `REPEAT` times, with
/// the CPU that Redis and this process spent per message while the host drained them
/// (the fill is not counted; the drain includes host start and stop).
async fn profile(port: u16, url: &str, which: &str, n: usize) -> Result<(), BoxError> {
    let repeat: usize = std::env::var("REPEAT").map_or(Ok(3), |r| r.parse())?;
    for round in 1..=repeat {
        let mut before = (0.0, 0.0);
        let rate = match which {
            "native" => native_rate(url, round, n, Some((port, &mut before))).await?,
            layout => {
                let options = if layout == "laravel" {
                    Options::laravel()
                } else {
                    Options::legacy()
                };
                let config = RedisConfig::from_url(url)?;
                let transport = BabelTransport::connect(&config, options).await?;
                let bus = Bus::new(Arc::new(transport.clone()), BusConfig::default());
                let orders: Vec<ToBabel> = (0..n as u64).map(|i| ToBabel(published(i))).collect();
                for batch in orders.chunks(1_000) {
                    bus.send_batch(batch).await?;
                }
                before = cpu(port)?;
                drain::<Order>(transport, n).await?
            }
        };
        let after = cpu(port)?;
        let per = |a: f64, b: f64| (a - b) * 1e6 / n as f64;
        println!(
            "{which}: {rate:.0} msg/s ({n} messages); CPU per message while draining: Redis {:.1} µs, host process {:.1} µs",
            per(after.0, before.0),
            per(after.1, before.1)
        );
    }
    Ok(())
}

async fn drain<M>(transport: impl Transport, n: usize) -> Result<f64, BoxError>
where
    M: BusCommand,
    Arc<Clock>: CommandProcessor<M>,
{
    let clock = Arc::new(Clock::default());
    let running = Host::builder()
        .transport(transport)
        .command::<M, _>(Arc::clone(&clock))
        .build()?
        .start()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while clock.0.lock().map(|c| c.2).unwrap_or(0) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    running.shutdown().await?;
    let (first, last, count) = *clock
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match (first, last) {
        (Some(first), Some(last)) if count == n => Ok(n as f64 / (last - first).as_secs_f64()),
        _ => Err(format!("the host handled {count} of {n}").into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    let url = server.url();
    let count = N.to_string();
    if let Ok(which) = std::env::var("PROFILE") {
        let n = std::env::var("N").map_or(Ok(200_000), |n| n.parse())?;
        return profile(server.port(), &url, &which, n).await;
    }
    let rounds: usize = std::env::var("ROUNDS").map_or(Ok(1), |r| r.parse())?;
    println!("{N} messages per side, no-op handler, one redis-server");
    println!(
        "| round | native host msg/s | layout | bus host msg/s | of native | Python SDK worker msg/s | bus / SDK |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|");
    for round in 1..=rounds {
        let native = native_rate(&url, round, N, None).await?;
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
            let (py, ratio) = if round == 1 {
                bq_py(&[&["publish", "--count", &count][..], &base[..]].concat())?;
                let args = [&["bench", "--count", &count, "--idle", "1"][..], &base[..]].concat();
                let out = bq_py(&args)?;
                let result: serde_json::Value = serde_json::from_str(out.trim())?;
                let seconds = result["seconds"].as_f64().unwrap_or(f64::NAN);
                let py = result["count"].as_f64().unwrap_or(0.0) / seconds;
                (format!("{py:.0}"), format!("{:.1}x", rust / py))
            } else {
                ("-".to_owned(), "-".to_owned())
            };
            println!(
                "| {round} | {native:.0} | {layout} | {rust:.0} | {:.0}% | {py} | {ratio} |",
                100.0 * rust / native
            );
        }
    }
    Ok(())
}
