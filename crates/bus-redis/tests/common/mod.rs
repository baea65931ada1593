//! Shared test plumbing: a real redis-server per test, a namespaced transport, and
//! bounded waiting.

#![allow(dead_code)]

use bus_core::{Bus, Host, RedisCommand};
use bus_redis::keys::QueueKeys;
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::TestRedis;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "work")]
pub struct Work {
    pub n: u64,
}

pub async fn transport(redis: &TestRedis) -> RedisTransport {
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace());
    RedisTransport::connect(&config).await.unwrap()
}

#[allow(unused_imports)]
pub use bus_test_redis::eventually_async as eventually;

/// A host running in the background.
pub struct Running {
    pub bus: Bus,
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<bus_core::Result<()>>,
}

impl Running {
    pub fn start(host: Host) -> Self {
        let bus = host.bus();
        let stop = CancellationToken::new();
        let signal = stop.clone();
        let handle = tokio::spawn(host.run(async move { signal.cancelled().await }));
        Running { bus, stop, handle }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        self.handle.await.unwrap().unwrap();
    }
}

/// Counts of a queue's structures, read with the synchronous harness client.
#[derive(Debug, PartialEq, Eq, Default)]
pub struct Counts {
    pub ready: i64,
    pub msgs: i64,
    /// Stored messages locked in `inflight` plus leased ones (`leased`).
    pub inflight: i64,
    pub delayed: i64,
    pub dead: i64,
}

pub fn counts(redis: &TestRedis, queue: &str) -> Counts {
    let mut c = redis.client();
    let keys = QueueKeys::new(
        redis.namespace(),
        &bus_core::transport::Source::queue(queue).unwrap(),
    );
    let mut n = |cmd: &str, key: &str| {
        let reply = c.cmd(&[cmd, key]).unwrap();
        // GET of a counter: a bulk string, or nil (0).
        reply
            .as_int()
            .unwrap_or_else(|| reply.as_str().map_or(0, |s| s.parse().unwrap()))
    };
    Counts {
        ready: n("LLEN", &keys.ready),
        msgs: n("HLEN", &keys.msgs),
        inflight: n("ZCARD", &keys.inflight) + n("GET", &keys.leased),
        delayed: n("ZCARD", &keys.delayed),
        dead: n("LLEN", &keys.dead),
    }
}
