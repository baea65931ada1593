//! [`RedisTimingReporter`]: a host's per-type timing added to one hash per minute, the
//! transport's [`TimingReporter`] (docs/redis-layout.md, "Per-type timing"). Read back by
//! [`Admin::timing`](crate::admin::Admin::timing).

use std::time::Duration;

use async_trait::async_trait;
use bus_core::timing::{TimingReport, TimingReporter, TypeTiming, BUCKETS};
use fred::types::Value;

use crate::{keys, scripts, RedisTransport};

/// How long each minute of timing is kept by default: 72 hours.
pub const DEFAULT_TIMING_RETENTION: Duration = Duration::from_secs(72 * 3600);

/// A report's marker outlives any retry of it: an hour.
const REPORTED_MARKER_TTL_S: u64 = 3600;

/// Bytes of a packed record: handled u32, failed u32, total µs u64, the buckets u32.
pub(crate) const RECORD_BYTES: usize = 4 + 4 + 8 + 4 * BUCKETS;

/// Packs a record as `timing_flush.lua` reads it (counts saturate at the u32 maximum).
pub(crate) fn encode(timing: &TypeTiming) -> Vec<u8> {
    let u32_of = |n: u64| u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes();
    let mut out = Vec::with_capacity(RECORD_BYTES);
    out.extend_from_slice(&u32_of(timing.handled));
    out.extend_from_slice(&u32_of(timing.failed));
    out.extend_from_slice(&timing.total_us.to_le_bytes());
    for count in timing.buckets {
        out.extend_from_slice(&u32_of(count));
    }
    out
}

/// Reads a packed record; `None` for anything else.
pub(crate) fn decode(bytes: &[u8]) -> Option<TypeTiming> {
    if bytes.len() != RECORD_BYTES {
        return None;
    }
    let u32_at = |at: usize| {
        let mut word = [0u8; 4];
        word.copy_from_slice(&bytes[at..at + 4]);
        u64::from(u32::from_le_bytes(word))
    };
    let mut total = [0u8; 8];
    total.copy_from_slice(&bytes[8..16]);
    let mut timing = TypeTiming::default();
    timing.handled = u32_at(0);
    timing.failed = u32_at(4);
    timing.total_us = u64::from_le_bytes(total);
    for (i, count) in timing.buckets.iter_mut().enumerate() {
        *count = u32_at(16 + 4 * i);
    }
    Some(timing)
}

/// Adds reports with `timing_flush.lua`: one script per report (one minute), on one
/// Cluster slot (the `{:timing}` tag).
#[derive(Debug, Clone)]
pub struct RedisTimingReporter {
    transport: RedisTransport,
}

impl RedisTimingReporter {
    /// A reporter on the transport's connection, key prefix and retention
    /// ([`RedisConfig::timing_retention`](crate::RedisConfig::timing_retention)).
    pub fn new(transport: RedisTransport) -> Self {
        RedisTimingReporter { transport }
    }
}

#[async_trait]
impl TimingReporter for RedisTimingReporter {
    async fn record(&self, report: &TimingReport) -> bus_core::Result<()> {
        let config = self.transport.config();
        let prefix = config.key_prefix();
        let expire_at = (report.minute + 1) * 60 + config.timing_kept().as_secs();
        let mut args: Vec<Value> = vec![
            report.seq.to_string().into(),
            expire_at.to_string().into(),
            REPORTED_MARKER_TTL_S.to_string().into(),
        ];
        for (name, timing) in &report.types {
            args.push(name.as_str().into());
            args.push(Value::Bytes(encode(timing).into()));
        }
        let keys = vec![
            keys::timing_minute(prefix, report.minute),
            keys::timing_reported(prefix, &report.host),
        ];
        scripts::TIMING_FLUSH
            .run_int(self.transport.client(), keys, args)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_its_packing() {
        let mut timing = TypeTiming::default();
        timing.handled = 7;
        timing.failed = 2;
        timing.total_us = 5_000_000_000;
        timing.buckets[0] = 3;
        timing.buckets[BUCKETS - 1] = 6;
        let packed = encode(&timing);
        assert_eq!(packed.len(), RECORD_BYTES);
        assert_eq!(RECORD_BYTES, 88);
        assert_eq!(decode(&packed), Some(timing));
        assert_eq!(decode(&packed[1..]), None);
    }
}
