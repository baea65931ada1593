//! What the chaos tests share: the consumer process, a client bus, and Redis readings.

#![allow(dead_code)]

use std::process::{Child, Command};

use bus_chaos::Job;
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
