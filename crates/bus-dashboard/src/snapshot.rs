//! Reading a queue's state from Redis at bounded cost: the counts management gives, plus
//! the expired locks and the counters the processing rate is derived from.

use bus_core::transport::Source;
use bus_management::{source_name, Management, QueueStats};
use bus_redis::admin::Counters;
use bus_redis::RedisTransport;
use serde::Serialize;

use crate::Result;

/// The state of one queue or subscription at one moment, read with a fixed number of
/// O(1) or O(log n) commands (no command reads a list's or a set's contents).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct QueueSnapshot {
    /// `queue`, or `topic/subscription`.
    pub name: String,
    /// The command queue, or the topic of a subscription (OpenTelemetry's
    /// `messaging.destination.name`).
    pub destination: String,
    /// The subscription's name; `None` for a command queue.
    pub subscription: Option<String>,
    /// Messages waiting (`LLEN ready`).
    pub ready: u64,
    /// Messages reserved by consumers (`ZCARD inflight` plus `GET leased`).
    pub in_flight: u64,
    /// Of those, the ones whose lock deadline has passed (stored and leased):
    /// their consumer is gone or stuck; recovery will requeue them.
    pub expired_locks: u64,
    /// Delayed sends and retries waiting for their time (`ZCARD delayed`).
    pub delayed: u64,
    /// Dead letters (`LLEN dead`).
    pub dead: u64,
    /// Age of the next ready message (by its send time), in ms.
    pub oldest_ready_age_ms: Option<u64>,
    /// Fresh messages consumers have taken so far (the `seq` counter): only grows.
    pub taken_total: u64,
    /// Envelopes stored beside the lists (`HLEN msgs`): messages taken and not finished,
    /// plus delayed sends.
    pub stored: u64,
    /// Redis's clock when read, in ms since the Unix epoch.
    pub at_ms: u64,
}

impl QueueSnapshot {
    /// Messages that left the queue for good (acknowledged, deleted or moved away) since
    /// the counters began: fresh messages taken minus envelopes still stored. An estimate:
    /// a delayed send counts against it until it finishes.
    pub fn finished_estimate(&self) -> i64 {
        self.taken_total as i64 - self.stored as i64
    }

    /// Every queue's and subscription's snapshot under the transport's key prefix, read
    /// now (what `bus stats --watch` derives its rates from).
    pub async fn read_all(transport: &RedisTransport) -> Result<Vec<QueueSnapshot>> {
        Reader::new(transport.clone(), None).snapshot_all().await
    }
}

/// Reads snapshots (and what else the dashboard shows) through management, over a
/// transport's connection: every read of the layout is `bus_redis::admin`'s.
#[derive(Debug, Clone)]
pub(crate) struct Reader {
    management: Management,
}

impl Reader {
    pub(crate) fn new(transport: RedisTransport, saga_prefix: Option<&str>) -> Self {
        let mut management = Management::from_transport(transport);
        if let Some(prefix) = saga_prefix {
            management = management.saga_prefix(prefix);
        }
        Reader { management }
    }

    pub(crate) fn management(&self) -> &Management {
        &self.management
    }

    /// The key prefix (namespace) of the bus's keys.
    pub(crate) fn prefix(&self) -> &str {
        self.management.key_prefix()
    }

    /// Redis's clock, in ms since the Unix epoch (the clock lock deadlines are set by).
    pub(crate) async fn redis_now_ms(&self) -> Result<u64> {
        Ok(self
            .admin()
            .redis_now_ms()
            .await
            .map_err(bus_management::Error::from)?)
    }

    fn admin(&self) -> &bus_redis::admin::Admin {
        self.management.admin()
    }

    /// Every registered queue and subscription.
    pub(crate) async fn sources(&self) -> Result<Vec<Source>> {
        Ok(self.management.sources().await?)
    }

    /// The snapshot of one source at Redis time `now_ms`.
    pub(crate) async fn snapshot(&self, source: &Source, now_ms: u64) -> Result<QueueSnapshot> {
        let (stats, counters): (QueueStats, Counters) = tokio::try_join!(
            async { Ok::<_, crate::Error>(self.management.stats(source).await?) },
            async {
                Ok(self
                    .admin()
                    .counters(source)
                    .await
                    .map_err(bus_management::Error::from)?)
            },
        )?;
        let (destination, subscription) = match source {
            Source::Queue(queue) => (queue.clone(), None),
            Source::Subscription { topic, name } => (topic.clone(), Some(name.clone())),
        };
        Ok(QueueSnapshot {
            name: source_name(source),
            destination,
            subscription,
            ready: stats.ready,
            in_flight: stats.in_flight,
            // (Counted at Redis's time of the stats, a moment from `now_ms`.)
            expired_locks: stats.expired_locks,
            delayed: stats.delayed,
            dead: stats.dead_letters,
            oldest_ready_age_ms: stats
                .oldest_sent_at_ms
                .map(|sent| now_ms.saturating_sub(sent)),
            taken_total: counters.taken_total,
            stored: counters.stored,
            at_ms: now_ms,
        })
    }

    /// Snapshots of every registered source, read concurrently (one connection pipelines
    /// them), in the order management lists the sources.
    pub(crate) async fn snapshot_all(&self) -> Result<Vec<QueueSnapshot>> {
        let (sources, now_ms) = tokio::try_join!(self.sources(), self.redis_now_ms())?;
        futures::future::try_join_all(sources.iter().map(|s| self.snapshot(s, now_ms))).await
    }
}
