//! A consumer process for reliability tests.
//!
//! Environment: `REDIS_URL`, `BUS_PREFIX`, `CHAOS_MODE` (`record`: mark the job processed
//! then ack; `abort`: count the run then abort the whole process), `CHAOS_LOCK_MS`,
//! `CHAOS_LIMIT` (dead-letter delivery limit). Runs until killed or SIGINT.

use std::time::Duration;

use async_trait::async_trait;
use bus_chaos::{processed_key, runs_key, Job};
use bus_core::{CommandProcessor, Context, Host, ProcessError, ProcessingSettings};
use bus_redis::{RedisConfig, RedisTransport};
use fred::prelude::{Client, KeysInterface, SetsInterface};

struct Handler {
    client: Client,
    prefix: String,
    abort: bool,
    settings: ProcessingSettings,
}

#[async_trait]
impl CommandProcessor<Job> for Handler {
    async fn process(&self, job: Job, _: &Context) -> Result<(), ProcessError> {
        let _: i64 = self.client.incr(runs_key(&self.prefix)).await?;
        if self.abort {
            std::process::abort();
        }
        let _: i64 = self.client.sadd(processed_key(&self.prefix), job.n).await?;
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        self.settings.clone()
    }
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prefix = env("BUS_PREFIX")?;
    let config = RedisConfig::from_url(&env("REDIS_URL")?)?.prefix(prefix.as_str());
    let transport = RedisTransport::connect(&config).await?;
    let lock = Duration::from_millis(env("CHAOS_LOCK_MS")?.parse()?);
    let handler = Handler {
        client: transport.client().clone(),
        prefix,
        abort: env("CHAOS_MODE")? == "abort",
        settings: ProcessingSettings::default()
            .max_concurrent_calls(32)
            .prefetch_count(64)
            .message_lock_timeout(lock)
            .dead_letter_delivery_limit(env("CHAOS_LIMIT")?.parse()?),
    };
    Host::builder()
        .transport(transport)
        .command::<Job, _>(handler)
        .recovery_interval(Duration::from_millis(100))
        .build()?
        .run_until_ctrl_c()
        .await?;
    Ok(())
}
