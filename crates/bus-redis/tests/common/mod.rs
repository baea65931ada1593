//! What only bus-redis's tests share: the `Work` command and a host run in the
//! background; the rest is the harness's (bus-test-redis, feature `bus`).

#![allow(dead_code)]

use bus_core::RedisCommand;
use serde::{Deserialize, Serialize};

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

/// A host running in the background (the harness's).
#[allow(unused_imports)]
pub use bus_test_redis::bus::Running;
