//! A host process running one every-second recurring schedule and consuming its queue,
//! for the cron test.
//!
//! Environment: `REDIS_URL`, `BUS_PREFIX`; `CLOCK_OFFSET_MS` shifts the clock the
//! schedule reads (a skewed host; 0 by default); `MISSED=catch_up_once` sets that policy
//! (else the default, skip); `CONSUME=0` runs the schedule without consuming its queue.
//! The schedule `beat` sends `Beat` every second (cron
//! `* * * * * *`, UTC); each handled `Beat` appends `"<pid> <tick>"` to
//! `cron_ticks_key`. Starts its host 200 ms into a second of the system clock and sets
//! `cron_up_key` to that start time (ms), so that a test tells a catch-up (a tick at or
//! before the start) from the first tick on time (after it); runs until killed, SIGINT
//! or SIGTERM.

use bus_chaos::process::{env, init_logging};
use bus_core::headers;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bus_chaos::{cron_ticks_key, cron_up_key, Beat};
use bus_core::{CommandProcessor, Context, Host, Missed, ProcessError, Recurring};
use bus_redis::{RedisConfig, RedisTransport};
use fred::prelude::{Client, KeysInterface, ListInterface};

struct Handler {
    client: Client,
    prefix: String,
}

#[async_trait]
impl CommandProcessor<Beat> for Handler {
    async fn process(&self, _: Beat, ctx: &Context) -> Result<(), ProcessError> {
        let tick = ctx
            .headers()
            .get(headers::TICK)
            .cloned()
            .ok_or_else(|| ProcessError::dead_letter("a Beat without its tick"))?;
        let line = format!("{} {tick}", std::process::id());
        let _: i64 = self
            .client
            .rpush(cron_ticks_key(&self.prefix), line)
            .await?;
        Ok(())
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    init_logging();
    let prefix = env("BUS_PREFIX")?;
    let offset: i64 = std::env::var("CLOCK_OFFSET_MS")
        .ok()
        .map(|o| o.parse())
        .transpose()?
        .unwrap_or(0);
    let missed = match std::env::var("MISSED").as_deref() {
        Ok("catch_up_once") => Missed::CatchUpOnce,
        _ => Missed::Skip,
    };
    let config = RedisConfig::from_url(&env("REDIS_URL")?)?.prefix(prefix.as_str());
    let transport = RedisTransport::connect(&config).await?;
    let client = transport.client().clone();
    let into_second = now_ms() % 1000;
    tokio::time::sleep(Duration::from_millis((1200 - into_second) % 1000)).await;
    let started_ms = now_ms();
    let mut builder = Host::builder().transport(transport);
    if std::env::var("CONSUME").as_deref() != Ok("0") {
        builder = builder.command::<Beat, _>(Handler {
            client: client.clone(),
            prefix: prefix.clone(),
        });
    }
    let running = builder
        .schedule(
            Recurring::new("* * * * * *", || Beat)
                .name("beat")
                .missed(missed),
        )
        .schedule_clock_offset(offset)
        .build()?
        .start()
        .await?;
    let pid = std::process::id();
    let _: () = client
        .set(cron_up_key(&prefix, pid), started_ms, None, None, false)
        .await?;
    bus_core::shutdown_signal().await;
    running.shutdown().await?;
    Ok(())
}
