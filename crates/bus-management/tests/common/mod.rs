//! Shared test plumbing: a real redis-server per test, the transport and management over
//! its namespace, dead letters made through the transport's own consumer, bounded waits.

#![allow(dead_code)]

use bus_core::records::ErrorRecord;
use bus_core::transport::ConsumerExt;
use bus_core::transport::{ConsumerOptions, DeadLetterReason, Source};
use bus_core::{Bus, BusConfig, RedisCommand, RedisEvent, Transport};
use bus_management::Management;
use bus_redis::keys::QueueKeys;
use bus_redis::RedisTransport;
use bus_test_redis::TestRedis;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "work")]
pub struct Work {
    pub n: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "staging")]
pub struct Staging {
    pub n: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "paid")]
pub struct Paid {
    pub n: u64,
}

/// A test's Redis, a transport and management over its namespace.
pub struct Setup {
    pub redis: TestRedis,
    pub transport: RedisTransport,
    pub management: Management,
    pub bus: Bus,
}

pub async fn setup() -> Setup {
    let redis = TestRedis::start().unwrap();
    let config = bus_test_redis::bus::config(&redis);
    let transport = bus_test_redis::bus::transport(&redis).await;
    let management = Management::connect(&config).await.unwrap();
    let bus = Bus::new(transport.clone(), BusConfig::default());
    Setup {
        redis,
        transport,
        management,
        bus,
    }
}

impl Setup {
    pub fn keys(&self, source: &Source) -> QueueKeys {
        self.transport.keys(source)
    }

    /// Reserves `n` messages of `source` through the transport's consumer and
    /// dead-letters them with `reason` and an error; returns their storage ids in order.
    pub async fn dead_letter(
        &self,
        source: &Source,
        n: usize,
        reason: DeadLetterReason,
    ) -> Vec<String> {
        let consumer = self
            .transport
            .consumer(source, ConsumerOptions::new(Duration::from_secs(60), 5))
            .await
            .unwrap();
        let stop = CancellationToken::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut ids = Vec::new();
        while ids.len() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} messages arrived",
                ids.len()
            );
            for delivery in consumer.take(n - ids.len(), &stop).await.unwrap() {
                let error = ErrorRecord::now(format!("failure of {}", delivery.delivery_count));
                consumer
                    .dead_letter(&delivery.receipt, reason, Some(&error))
                    .await
                    .unwrap();
                // Its storage id: the last of the dead list (a receipt names a leased
                // message by its lease, not by the id it is stored under when it leaves).
                let dead = self.keys(source).dead;
                let last = self.redis.client().cmd(&["LINDEX", &dead, "-1"]).unwrap();
                ids.push(last.as_str().unwrap().to_owned());
            }
        }
        consumer.close().await.unwrap();
        ids
    }

    /// The length or cardinality of a key, by its type's command.
    pub fn len(&self, cmd: &str, key: &str) -> i64 {
        self.redis.int(&[cmd, key])
    }

    /// `HEXISTS key field`.
    pub fn hexists(&self, key: &str, field: &str) -> bool {
        self.redis.int(&["HEXISTS", key, field]) == 1
    }
}

#[allow(unused_imports)] // not every test binary that shares this module waits
pub use bus_test_redis::eventually_async as eventually;

pub fn work() -> Source {
    Source::queue("work").unwrap()
}
