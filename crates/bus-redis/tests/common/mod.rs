//! What only bus-redis's tests share: the `Work` command and a host run in the
//! background; the rest is the harness's (bus-test-redis, feature `bus`).

#![allow(dead_code)]

use bus_core::{Bus, Host, RedisCommand};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "work")]
pub struct Work {
    pub n: u64,
}

/// The transport over the test's namespace, and a queue's counts (`redis.counts(queue)`),
/// from the harness.
#[allow(unused_imports)] // not every test binary that shares this module uses them
pub use bus_test_redis::bus::{transport, Counts};

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
