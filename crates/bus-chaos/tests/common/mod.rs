//! What the chaos tests share: the consumer process, a client bus, and Redis readings.

#![allow(dead_code)]

use std::process::{Child, Command};

use std::time::{SystemTime, UNIX_EPOCH};

use bus_chaos::{processed_key, timeline_key, Job};
use bus_core::transport::Source;
use bus_core::{Bus, BusConfig, Message};
use bus_redis::keys::QueueKeys;
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::SyncClient;

/// The chaos consumer's command, with its environment set.
pub fn consumer_command(url: &str, prefix: &str, mode: &str, lock_ms: u64, limit: u32) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_chaos-consumer"));
    command
        .env("REDIS_URL", url)
        .env("BUS_PREFIX", prefix)
        .env("CHAOS_MODE", mode)
        .env("CHAOS_LOCK_MS", lock_ms.to_string())
        .env("CHAOS_LIMIT", limit.to_string())
        .env("RUST_LOG", "warn");
    command
}

/// Starts a chaos consumer.
pub fn consumer(url: &str, prefix: &str, mode: &str, lock_ms: u64, limit: u32) -> Child {
    consumer_command(url, prefix, mode, lock_ms, limit)
        .spawn()
        .expect("start chaos-consumer")
}

pub async fn bus(url: &str, prefix: &str) -> Bus {
    let config = RedisConfig::from_url(url).unwrap().prefix(prefix);
    Bus::new(
        RedisTransport::connect(&config).await.unwrap(),
        BusConfig::default(),
    )
}

pub async fn send_jobs(bus: &Bus, count: u64) {
    for start in (0..count).step_by(1000) {
        let batch: Vec<Job> = (start..(start + 1000).min(count))
            .map(|n| Job { n })
            .collect();
        bus.send_batch(&batch).await.unwrap();
    }
}

/// The keys of the jobs' queue under `prefix`, as the transport names them.
pub fn keys(prefix: &str) -> QueueKeys {
    QueueKeys::new(prefix, &Source::queue(<Job as Message>::NAME).unwrap())
}

/// Ready, in flight (stored messages locked one by one, plus fresh ones held in
/// leases), delayed, stored (docs/redis-layout.md), as the harness counts them.
pub fn backlog(client: &mut SyncClient, prefix: &str) -> [i64; 4] {
    let c = bus_test_redis::bus::counts(client, prefix, <Job as Message>::NAME);
    [c.ready, c.inflight, c.delayed, c.msgs]
}

pub fn kill(child: &mut Child) {
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
}

/// Now, in ms since the epoch (the clock the consumers record their runs with).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// How many distinct jobs the consumers handled.
pub fn processed(client: &mut SyncClient, prefix: &str) -> i64 {
    client.int(&["SCARD", &processed_key(prefix)]).unwrap()
}

/// The consumers' timeline: one line of numbers per handler run, as the `record` mode
/// writes it (job, start, ...).
pub fn timeline_fields(client: &mut SyncClient, prefix: &str) -> Vec<Vec<u64>> {
    let list = client
        .cmd(&["LRANGE", &timeline_key(prefix), "0", "-1"])
        .unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .map(|line| {
            line.as_str()
                .unwrap()
                .split(' ')
                .map(|f| f.parse().unwrap())
                .collect()
        })
        .collect()
}
