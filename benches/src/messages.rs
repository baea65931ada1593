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

/// The benchmarks' handler: does nothing but count, with the concurrency they measure
/// (1,000 running, 1,000 prefetched).
#[derive(Debug, Clone, Default)]
pub struct Noop(pub std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Noop {
    /// Messages handled so far.
    pub fn handled(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[async_trait::async_trait]
impl<C: bus_core::Command> bus_core::CommandProcessor<C> for Noop {
    async fn process(&self, _: C, _: &bus_core::Context) -> Result<(), bus_core::ProcessError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn settings(&self) -> bus_core::ProcessingSettings {
        bus_core::ProcessingSettings::default()
            .max_concurrent_calls(1_000)
            .prefetch_count(1_000)
    }
}
