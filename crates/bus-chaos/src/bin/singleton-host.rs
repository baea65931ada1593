//! A host process running one singleton processor, for the failover test.
//!
//! Environment: `REDIS_URL`, `BUS_PREFIX`. Every setting is the default apart from
//! `singleton(true)`. Each `Solo` handler awaits 20 ms, then appends its run (pid, n,
//! start and end in µs) to `solo_runs_key`. Sets `solo_up_key` once running; runs until
//! killed, SIGINT or SIGTERM.

use bus_chaos::process::{connect, init_logging};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bus_chaos::{solo_runs_key, solo_up_key, Solo};
use bus_core::{CommandProcessor, Context, Host, ProcessError, ProcessingSettings};
use fred::prelude::{Client, KeysInterface, ListInterface};

struct Handler {
    client: Client,
    prefix: String,
}

fn micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
}

#[async_trait]
impl CommandProcessor<Solo> for Handler {
    async fn process(&self, solo: Solo, _: &Context) -> Result<(), ProcessError> {
        let start = micros();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let run = format!("{} {} {start} {}", std::process::id(), solo.n, micros());
        let _: i64 = self.client.rpush(solo_runs_key(&self.prefix), run).await?;
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default().singleton(true)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    init_logging();
    let (transport, prefix) = connect().await?;
    let client = transport.client().clone();
    let running = Host::builder()
        .transport(transport)
        .command::<Solo, _>(Handler {
            client: client.clone(),
            prefix: prefix.clone(),
        })
        .build()?
        .start()
        .await?;
    let pid = std::process::id();
    let _: () = client
        .set(solo_up_key(&prefix, pid), pid, None, None, false)
        .await?;
    bus_core::shutdown_signal().await;
    running.shutdown().await?;
    Ok(())
}
