//! The message of the throughput benchmarks, and its envelopes as the bus encodes them.

use bus_core::RedisCommand;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// The throughput benchmarks' command: a ~100-byte JSON body.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "bench")]
pub struct Order {
    /// Its number.
    pub n: u64,
    /// Padding to about 100 bytes.
    pub text: String,
}

/// About 100 bytes of JSON.
pub fn order(n: u64) -> Order {
    Order {
        n,
        text: "x".repeat(82),
    }
}

/// Envelopes exactly as the bus encodes them, for the raw phases.
pub fn envelopes(count: u64) -> Vec<Bytes> {
    (0..count)
        .map(|n| {
            let body = bus_core::Format::Json.encode("bench", &order(n)).unwrap();
            Bytes::from(
                bus_core::Envelope::new("bench", bus_core::Format::Json, body)
                    .encode()
                    .unwrap(),
            )
        })
        .collect()
}
