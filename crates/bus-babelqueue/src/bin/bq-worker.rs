//! A minimal Rust worker of a BabelQueue queue, through the bus adapter: prints one JSON
//! line per handled message (`{"id": ...}`) and acks it. The fleet tests SIGKILL it
//! mid-message (`--hang-at K`: on its K-th message it prints `{"hang": id}` and stops
//! there, holding the reservation).
//!
//! `bq-worker --url redis://127.0.0.1:6379 --queue orders [--layout laravel]
//!  [--urn urn:babel:orders:created] [--retry-after 90] [--hang-at K]`

use std::time::Duration;

use bus_babelqueue::{BabelTransport, Options};
use bus_core::records::ErrorRecord;
use bus_core::transport::{ConsumerExt, ConsumerOptions, DeadLetterReason, Source};
use bus_core::Transport;
use bus_redis::RedisConfig;
use tokio_util::sync::CancellationToken;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let url = arg(&args, "--url").ok_or("--url is required")?;
    let queue = arg(&args, "--queue").ok_or("--queue is required")?;
    let urn = arg(&args, "--urn").unwrap_or_else(|| "urn:babel:orders:created".into());
    let retry_after: u64 = arg(&args, "--retry-after").map_or(Ok(90), |s| s.parse())?;
    let hang_at: usize = arg(&args, "--hang-at").map_or(Ok(0), |s| s.parse())?;
    let options = match arg(&args, "--layout").as_deref() {
        Some("laravel") => Options::laravel(),
        _ => Options::legacy(),
    };
    let transport = BabelTransport::connect(&RedisConfig::from_url(&url)?, options).await?;
    let lock = Duration::from_secs(retry_after);
    let consumer = transport
        .consumer(&Source::queue(queue)?, ConsumerOptions::new(lock, 3))
        .await?;
    println!("{}", serde_json::json!({"ready": true}));
    let (stop, mut seen) = (CancellationToken::new(), 0usize);
    loop {
        for delivery in consumer.take(1, &stop).await? {
            // The adapter reads each element once and hands the reading over.
            let envelope = delivery.decoded.ok_or("the adapter reads every delivery")?;
            let id = envelope.id.to_string();
            if envelope.message_type != urn {
                let error = ErrorRecord::now(format!("no handler for {}", envelope.message_type));
                consumer
                    .dead_letter(
                        &delivery.receipt,
                        DeadLetterReason::UnknownType,
                        Some(&error),
                    )
                    .await?;
                continue;
            }
            seen += 1;
            if seen == hang_at {
                println!("{}", serde_json::json!({ "hang": id }));
                std::future::pending::<()>().await;
            }
            consumer.ack(&[delivery.receipt]).await?;
            println!("{}", serde_json::json!({ "id": id }));
        }
    }
}
