//! A consumer process for reliability tests.
//!
//! Environment: `REDIS_URL`, `BUS_PREFIX`, `CHAOS_MODE` (`record`: mark the job processed
//! then ack; `abort`: count the run then abort the whole process; `poison`: abort for
//! job 0 only, record the others; `hold`: never finish; `block`: block the thread for
//! `CHAOS_WORK_MS`, then record; `flaky`: fail while `failing_key` exists, else record,
//! pushing every run to `attempts_key`, and hang while `holding_key` exists), `CHAOS_LOCK_MS`, `CHAOS_LIMIT` (dead-letter delivery
//! limit); optional `CHAOS_GRACE_MS` (shutdown grace), `CHAOS_CONCURRENCY` and
//! `CHAOS_PREFETCH` (32 and 64 by default), `CHAOS_WORK_MS` (how long each
//! handler awaits before it records), `CHAOS_LONG_EVERY` and `CHAOS_LONG_MS` (every n-th
//! job awaits that long instead), `CHAOS_RECOVERY_MS` (the host's recovery interval, 100
//! by default; `default`: the host's default), `CHAOS_TIMELINE=1` (also push each run's job,
//! start, end and delivery count to `timeline_key`), `CHAOS_BREAKER=1` (a circuit breaker
//! with its default settings; `fleet`: the same with the fleet scope). The Redis connection
//! keeps the default
//! `RedisConfig`. Runs until killed, SIGINT or SIGTERM.

use bus_chaos::process::{env, init_logging};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bus_chaos::{
    attempts_key, failing_key, held_key, holding_key, poison_runs_key, processed_key, runs_key,
    timeline_key, Job,
};
use bus_core::{
    BreakerScope, CircuitBreaker, CommandProcessor, Context, Host, ProcessError, ProcessingSettings,
};
use bus_redis::{RedisConfig, RedisTransport};
use fred::prelude::{Client, KeysInterface, ListInterface, SetsInterface};

struct Handler {
    client: Client,
    prefix: String,
    mode: String,
    /// How long each handler works (awaiting, as an I/O-bound handler does).
    work: Option<Duration>,
    /// Every n-th job (`job.n % n == 0`) works this long instead of `work`.
    long: Option<(u64, Duration)>,
    /// Push each run's start and end to `timeline_key`.
    timeline: bool,
    settings: ProcessingSettings,
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

#[async_trait]
impl CommandProcessor<Job> for Handler {
    async fn process(&self, job: Job, context: &Context) -> Result<(), ProcessError> {
        let start = now_ms();
        let _: i64 = self.client.incr(runs_key(&self.prefix)).await?;
        if self.mode == "hold" {
            std::future::pending::<()>().await;
        }
        if self.mode == "abort" {
            std::process::abort();
        }
        if self.mode == "flaky" {
            let holding: i64 = self.client.exists(holding_key(&self.prefix)).await?;
            if holding > 0 {
                let run = format!("{} {start}", std::process::id());
                let _: i64 = self.client.rpush(held_key(&self.prefix), run).await?;
                std::future::pending::<()>().await;
            }
            let failing: i64 = self.client.exists(failing_key(&self.prefix)).await?;
            if let Some(work) = self.work {
                tokio::time::sleep(work).await;
            }
            let outcome = if failing > 0 { "fail" } else { "ok" };
            let run = format!("{} {start} {} {outcome}", std::process::id(), now_ms());
            let _: i64 = self.client.rpush(attempts_key(&self.prefix), run).await?;
            if failing > 0 {
                return Err(ProcessError::retry("the downstream service is down"));
            }
            let _: i64 = self.client.sadd(processed_key(&self.prefix), job.n).await?;
            return Ok(());
        }
        if self.mode == "poison" && job.n == 0 {
            let _: i64 = self.client.incr(poison_runs_key(&self.prefix)).await?;
            std::process::abort();
        }
        let work = match self.long {
            Some((every, long)) if job.n % every == 0 => Some(long),
            _ => self.work,
        };
        if let Some(work) = work {
            if self.mode == "block" {
                // What the docs say not to do, and what many handlers do anyway.
                std::thread::sleep(work);
            } else {
                tokio::time::sleep(work).await;
            }
        }
        if self.timeline {
            let delivery = context.delivery_count();
            let run = format!("{} {start} {} {delivery}", job.n, now_ms());
            let _: i64 = self.client.rpush(timeline_key(&self.prefix), run).await?;
        }
        let _: i64 = self.client.sadd(processed_key(&self.prefix), job.n).await?;
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        self.settings.clone()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The host's warnings (RUST_LOG, `warn` from the tests) go to stderr, which the tests
    // inherit: what a fault did shows in the test's output.
    init_logging();
    let prefix = env("BUS_PREFIX")?;
    // The default RedisConfig: the fault tests check the defaults.
    let config = RedisConfig::from_url(&env("REDIS_URL")?)?.prefix(prefix.as_str());
    let grace = match env("CHAOS_GRACE_MS") {
        Ok(ms) => Duration::from_millis(ms.parse()?),
        Err(_) => Duration::from_secs(30),
    };
    let transport = RedisTransport::connect(&config).await?;
    let lock = Duration::from_millis(env("CHAOS_LOCK_MS")?.parse()?);
    let handler = Handler {
        client: transport.client().clone(),
        prefix,
        mode: env("CHAOS_MODE")?,
        work: match env("CHAOS_WORK_MS") {
            Ok(ms) => Some(Duration::from_millis(ms.parse()?)),
            Err(_) => None,
        },
        long: match (env("CHAOS_LONG_EVERY"), env("CHAOS_LONG_MS")) {
            (Ok(every), Ok(ms)) => Some((every.parse()?, Duration::from_millis(ms.parse()?))),
            _ => None,
        },
        timeline: env("CHAOS_TIMELINE").is_ok_and(|on| on == "1"),
        settings: ProcessingSettings::default()
            .max_concurrent_calls(env("CHAOS_CONCURRENCY").map_or(Ok(32), |n| n.parse())?)
            .prefetch_count(env("CHAOS_PREFETCH").map_or(Ok(64), |n| n.parse())?)
            .message_lock_timeout(lock)
            .dead_letter_delivery_limit(env("CHAOS_LIMIT")?.parse()?)
            .circuit_breaker(match env("CHAOS_BREAKER").as_deref() {
                Ok("1") => Some(CircuitBreaker::default()),
                Ok("fleet") => Some(CircuitBreaker::default().scope(BreakerScope::Fleet)),
                _ => None,
            }),
    };
    // 100 ms unless the test asks for another interval (`default`: the host's own).
    let recovery = match env("CHAOS_RECOVERY_MS").as_deref() {
        Ok("default") => None,
        Ok(ms) => Some(Duration::from_millis(ms.parse()?)),
        Err(_) => Some(Duration::from_millis(100)),
    };
    let mut builder = Host::builder()
        .transport(transport)
        .command::<Job, _>(handler);
    if let Some(interval) = recovery {
        builder = builder.recovery_interval(interval);
    }
    builder
        .shutdown_grace(grace)
        .build()?
        .run_until_signal()
        .await?;
    Ok(())
}
