//! What the attachment tests share: a command, a host on a test Redis, the provider.

#![allow(dead_code)]

use std::sync::Arc;

use bus_attachments::{BodyStream, RedisProvider};
use bus_core::RedisCommand;
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::TestRedis;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use bus_test_redis::eventually_async as eventually;

#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "files")]
pub struct Upload {
    pub n: u64,
}

pub fn config(redis: &TestRedis) -> RedisConfig {
    RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace())
}

pub async fn transport(redis: &TestRedis) -> RedisTransport {
    RedisTransport::connect(&config(redis)).await.unwrap()
}

/// The Redis provider with its defaults, under the test's namespace.
pub async fn provider(redis: &TestRedis) -> RedisProvider {
    let client = config(redis).connect_client().await.unwrap();
    RedisProvider::new(client, redis.namespace())
}

/// The attachment keys under the test's namespace.
pub fn attachment_keys(redis: &TestRedis) -> Vec<String> {
    let mut keys: Vec<String> = redis
        .keys()
        .into_iter()
        .filter(|key| key.contains(":att:"))
        .collect();
    keys.sort();
    keys
}

/// Milliseconds to live of `key` (-1: none, -2: gone).
pub fn pttl(redis: &TestRedis, key: &str) -> i64 {
    redis
        .client()
        .cmd(&["PTTL", key])
        .unwrap()
        .as_int()
        .unwrap()
}

/// Byte `i` of the test pattern: not periodic at any chunk size used here.
pub fn pattern_byte(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ (i >> 20) as u8
}

/// A `len`-byte body made piece by piece (64 KiB each), never whole in memory.
pub fn pattern_body(len: u64) -> BodyStream {
    const PIECE: u64 = 64 * 1024;
    let pieces = futures::stream::unfold(0u64, move |at| async move {
        (at < len).then(|| {
            let end = (at + PIECE).min(len);
            let piece: Vec<u8> = (at..end).map(pattern_byte).collect();
            (Ok(Bytes::from(piece)), end)
        })
    });
    Box::pin(pieces)
}

/// Checks bytes against the pattern as they stream by.
#[derive(Debug, Default)]
pub struct PatternCheck {
    pub seen: u64,
    pub mismatches: u64,
}

impl PatternCheck {
    pub fn feed(&mut self, chunk: &[u8]) {
        for &byte in chunk {
            if byte != pattern_byte(self.seen) {
                self.mismatches += 1;
            }
            self.seen += 1;
        }
    }
}

/// A host running in the background (the harness's).
#[allow(unused_imports)]
pub use bus_test_redis::bus::Running;

pub fn shared(provider: RedisProvider) -> Arc<RedisProvider> {
    Arc::new(provider)
}
