//! Pushes 10,000 messages through high-throughput settings (1,000 concurrent calls,
//! prefetch 1,000) and reports count, elapsed time and messages per second.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bus_core::{CommandProcessor, Context, Host, ProcessError, ProcessingSettings};
use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use sample_contracts::Ping;
use tokio::sync::Notify;

const MESSAGES: u64 = 10_000;
const BATCH: usize = 1_000;

/// Counts handled messages; clones share the count.
#[derive(Clone, Default)]
struct Counter(Arc<Count>);

#[derive(Default)]
struct Count {
    done: AtomicU64,
    finished: Notify,
}

#[async_trait]
impl CommandProcessor<Ping> for Counter {
    async fn process(&self, _: Ping, _: &Context) -> Result<(), ProcessError> {
        if self.0.done.fetch_add(1, Ordering::Relaxed) + 1 == MESSAGES {
            self.0.finished.notify_one();
        }
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(1_000)
            .prefetch_count(1_000)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .init();
    let backend = match samples::choose_backend("sample").await {
        Ok(backend) => backend,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    println!("running on {}", backend.description);

    let counter = Counter::default();
    let host = Host::builder()
        .transport(Arc::clone(&backend.transport))
        .command::<Ping, _>(counter.clone())
        .build()?;
    let running = host.start().await?;
    let bus = running.bus();

    // indicatif's own `{per_sec}` shows four decimals (`23,082.2083/s`): whole messages.
    let style = ProgressStyle::with_template("{bar:40} {pos}/{len} processed {rate}")?.with_key(
        "rate",
        |state: &ProgressState, out: &mut dyn fmt::Write| {
            let _ = out.write_str(&samples::per_second(state.per_sec()));
        },
    );
    let bar = ProgressBar::new(MESSAGES).with_style(style);
    let started = Instant::now();
    let pings: Vec<Ping> = (0..MESSAGES).map(|n| Ping { n }).collect();
    for batch in pings.chunks(BATCH) {
        bus.send_batch(batch).await?;
    }
    let finished = counter.0.finished.notified();
    tokio::pin!(finished);
    loop {
        bar.set_position(counter.0.done.load(Ordering::Relaxed));
        tokio::select! {
            () = &mut finished => break,
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    running.shutdown().await?;
    backend.close().await;

    let processed = counter.0.done.load(Ordering::Relaxed);
    println!(
        "processed {processed} messages in {:.3} s: {}",
        elapsed.as_secs_f64(),
        samples::per_second(processed as f64 / elapsed.as_secs_f64())
    );
    Ok(())
}
