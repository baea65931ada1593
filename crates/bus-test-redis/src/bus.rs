//! Fixtures over the bus's own types (feature `bus`): the transport over a test's
//! namespace and what a queue holds, read with the harness's own client (the test's
//! view of Redis, independent of the code under test).

use bus_core::transport::Source;
use bus_core::{Bus, Host};
use bus_redis::keys::QueueKeys;
use bus_redis::{RedisConfig, RedisTransport};

use crate::{SyncClient, TestRedis};

/// The transport's configuration for `redis`: its URL, keys under its namespace.
///
/// # Panics
/// If the URL does not parse (the harness makes it).
pub fn config(redis: &TestRedis) -> RedisConfig {
    RedisConfig::from_url(&redis.url())
        .unwrap_or_else(|e| panic!("the URL {}: {e}", redis.url()))
        .prefix(redis.namespace())
}

/// A connected [`RedisTransport`] over `redis`'s namespace.
///
/// # Panics
/// If it cannot connect.
pub async fn transport(redis: &TestRedis) -> RedisTransport {
    RedisTransport::connect(&config(redis))
        .await
        .unwrap_or_else(|e| panic!("connecting to {}: {e}", redis.url()))
}

/// What one queue's structures hold (docs/redis-layout.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// `ready`: waiting for a consumer.
    pub ready: i64,
    /// `msgs`: stored messages (ready, in flight, delayed or dead).
    pub msgs: i64,
    /// Stored messages locked in `inflight`, plus fresh ones held in leases (`leased`).
    pub inflight: i64,
    /// `delayed`: due later.
    pub delayed: i64,
    /// `dead`: dead letters.
    pub dead: i64,
}

/// The [`Counts`] of `queue` under `prefix`.
///
/// # Panics
/// If the queue name is invalid or Redis cannot be read.
pub fn counts(client: &mut SyncClient, prefix: &str, queue: &str) -> Counts {
    let source = Source::queue(queue).unwrap_or_else(|e| panic!("queue {queue:?}: {e}"));
    let keys = QueueKeys::new(prefix, &source);
    let mut n = |cmd: &str, key: &str| {
        client
            .int(&[cmd, key])
            .unwrap_or_else(|e| panic!("{cmd} {key}: {e}"))
    };
    Counts {
        ready: n("LLEN", &keys.ready),
        msgs: n("HLEN", &keys.msgs),
        inflight: n("ZCARD", &keys.inflight) + n("GET", &keys.leased),
        delayed: n("ZCARD", &keys.delayed),
        dead: n("LLEN", &keys.dead),
    }
}

impl TestRedis {
    /// The [`Counts`] of `queue` in this test's namespace.
    pub fn counts(&self, queue: &str) -> Counts {
        counts(&mut self.client(), self.namespace(), queue)
    }
}

/// A host running in the background until [`Running::stop`], with its bus.
#[derive(Debug)]
pub struct Running {
    /// The host's bus.
    pub bus: Bus,
    stop: tokio_util::sync::CancellationToken,
    handle: tokio::task::JoinHandle<bus_core::Result<()>>,
}

impl Running {
    /// Runs `host` on the current runtime.
    pub fn start(host: Host) -> Self {
        let bus = host.bus();
        let stop = tokio_util::sync::CancellationToken::new();
        let signal = stop.clone();
        let handle = tokio::spawn(host.run(async move { signal.cancelled().await }));
        Running { bus, stop, handle }
    }

    /// Stops the host and waits until it has.
    ///
    /// # Panics
    /// If the host's task panicked or its run failed.
    pub async fn stop(self) {
        self.stop.cancel();
        self.handle
            .await
            .expect("the host's task")
            .expect("the host's run");
    }
}
