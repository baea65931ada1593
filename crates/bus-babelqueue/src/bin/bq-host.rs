//! A bus host on a BabelQueue queue, every setting at its default (`RedisConfig`,
//! `Options`, `ProcessingSettings`): one processor for `urn:babel:orders:created` on
//! queue `orders`. Prints `{"ready": true}` once connected, then per handled message
//! `{"id": ..., "delivery": n}`. With `--crash` the handler prints `{"crash": id,
//! "delivery": n}` and aborts the process (a message that kills every consumer).
//!
//! `bq-host --url redis://127.0.0.1:6379 [--layout laravel] [--crash]`; SIGTERM or SIGINT
//! stops it.

use async_trait::async_trait;
use bus_babelqueue::{BabelTransport, Options};
use bus_core::{Command, CommandProcessor, Context, Host, Message, MessageKind, ProcessError};
use bus_redis::RedisConfig;
use serde::{Deserialize, Serialize};

/// The data BabelQueue carries; its members do not matter here.
#[derive(Serialize, Deserialize)]
struct Created {}

impl Message for Created {
    const NAME: &'static str = "orders";
    const TYPE: &'static str = "urn:babel:orders:created";
    const KIND: MessageKind = MessageKind::Command;
}
impl Command for Created {}

struct Handler {
    crash: bool,
}

#[async_trait]
impl CommandProcessor<Created> for Handler {
    async fn process(&self, _: Created, ctx: &Context) -> Result<(), ProcessError> {
        let (id, delivery) = (ctx.message_id().to_string(), ctx.delivery_count());
        if self.crash {
            println!(
                "{}",
                serde_json::json!({ "crash": id, "delivery": delivery })
            );
            std::process::abort();
        }
        println!("{}", serde_json::json!({ "id": id, "delivery": delivery }));
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let url = value("--url").ok_or("--url is required")?;
    let options = match value("--layout").as_deref() {
        Some("laravel") => Options::laravel(),
        _ => Options::legacy(),
    };
    let crash = args.iter().any(|a| a == "--crash");
    let transport = BabelTransport::connect(&RedisConfig::from_url(&url)?, options).await?;
    let host = Host::builder()
        .transport(transport)
        .command::<Created, _>(Handler { crash })
        .build()?;
    println!("{}", serde_json::json!({ "ready": true }));
    host.run_until_signal().await?;
    Ok(())
}
