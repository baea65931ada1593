//! Reading a queue's state from Redis at bounded cost: the counts management gives, plus
//! the expired locks and the counters the processing rate is derived from. Every kind of
//! queue the fleet serves (the bus's own, BabelQueue's layouts) is read the same way.

use bus_core::transport::Source;
use bus_management::{source_name, Fleet, Management, QueueStats};
use bus_redis::admin::Counters;
use bus_redis::RedisTransport;
use serde::Serialize;

use crate::Result;

/// The state of one queue or subscription at one moment, read with a fixed number of
/// O(1) or O(log n) commands (no command reads a list's or a set's contents).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct QueueSnapshot {
    /// `queue`, or `topic/subscription`; `<kind>:<queue>` for another kind of queue
    /// (`babel:orders`).
    pub name: String,
    /// The kind of queue: `bus` for the bus's own, else the operator's (`babel`,
    /// `laravel`).
    pub kind: String,
    /// OpenTelemetry's `messaging.system`: `bus`, or another kind's (`babelqueue`).
    pub system: String,
    /// The command queue, or the topic of a subscription (OpenTelemetry's
    /// `messaging.destination.name`); another kind's queue by its own name.
    pub destination: String,
    /// The subscription's name; `None` for a command queue.
    pub subscription: Option<String>,
    /// Messages waiting (`LLEN ready`).
    pub ready: u64,
    /// Messages of an ordered queue waiting for their key (per-key ordering; the `keyed`
    /// count of `flow`), not in `ready`.
    pub keyed: u64,
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
    /// Fresh messages consumers have taken so far (the `seq` counter): only grows. 0 for
    /// a kind that keeps no such counter (BabelQueue's), whose rate is then not shown.
    pub taken_total: u64,
    /// Envelopes stored beside the lists (`HLEN msgs`): messages taken and not finished,
    /// plus delayed sends (0 for another kind).
    pub stored: u64,
    /// Redis's clock when read, in ms since the Unix epoch.
    pub at_ms: u64,
    /// Whether the queue is paused (flow control).
    pub paused: bool,
    /// A fleet-wide circuit breaker holds every consumer back until then (ms since the
    /// Unix epoch, Redis's clock); `None`: none is set.
    pub breaker_until_ms: Option<u64>,
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

    /// Every queue's snapshot of every kind the fleet serves, read now.
    pub async fn read_fleet(fleet: &Fleet) -> Result<Vec<QueueSnapshot>> {
        Reader::for_fleet(fleet.clone(), None).snapshot_all().await
    }
}

/// Reads snapshots (and what else the dashboard shows) through management, over a
/// transport's connection: every read of the layout is `bus_redis::admin`'s.
#[derive(Debug, Clone)]
pub(crate) struct Reader {
    fleet: Fleet,
}

impl Reader {
    pub(crate) fn new(transport: RedisTransport, saga_prefix: Option<&str>) -> Self {
        Self::for_fleet(
            Fleet::new(Management::from_transport(transport)),
            saga_prefix,
        )
    }

    pub(crate) fn for_fleet(fleet: Fleet, saga_prefix: Option<&str>) -> Self {
        let fleet = match saga_prefix {
            Some(prefix) => fleet.map_management(|m| m.saga_prefix(prefix)),
            None => fleet,
        };
        Reader { fleet }
    }

    pub(crate) fn management(&self) -> &Management {
        self.fleet.management()
    }

    pub(crate) fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// The key prefix (namespace) of the bus's keys.
    pub(crate) fn prefix(&self) -> &str {
        self.management().key_prefix()
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
        self.management().admin()
    }

    /// Every queue of every kind: the bus's own queues and subscriptions, then the
    /// others' as `<kind>:<queue>`.
    pub(crate) async fn queues(&self) -> Result<Vec<String>> {
        Ok(self.fleet.queues().await?)
    }

    /// The snapshot of one queue (as [`Reader::queues`] names it) at Redis time `now_ms`.
    pub(crate) async fn snapshot(&self, name: &str, now_ms: u64) -> Result<QueueSnapshot> {
        match self.fleet.native_source(name)? {
            Some(source) => self.native_snapshot(&source, now_ms).await,
            None => self.other_snapshot(name, now_ms).await,
        }
    }

    /// Another kind's queue: its counts, no rate counters.
    async fn other_snapshot(&self, name: &str, now_ms: u64) -> Result<QueueSnapshot> {
        let (operator, address) = self.fleet.resolve(name)?;
        let stats = self.fleet.stats(name).await?;
        Ok(QueueSnapshot {
            name: address.to_string(),
            kind: operator.kind().to_owned(),
            system: operator.system().to_owned(),
            destination: address.name().to_owned(),
            subscription: None,
            ready: stats.ready,
            keyed: stats.keyed,
            in_flight: stats.in_flight,
            expired_locks: stats.expired_locks,
            paused: stats.paused,
            breaker_until_ms: stats.breaker_until_ms,
            delayed: stats.delayed,
            dead: stats.dead_letters,
            oldest_ready_age_ms: stats
                .oldest_sent_at_ms
                .map(|sent| now_ms.saturating_sub(sent)),
            taken_total: 0,
            stored: 0,
            at_ms: now_ms,
        })
    }

    /// One of the bus's own queues or subscriptions at Redis time `now_ms`.
    async fn native_snapshot(&self, source: &Source, now_ms: u64) -> Result<QueueSnapshot> {
        let (stats, counters): (QueueStats, Counters) = tokio::try_join!(
            async { Ok::<_, crate::Error>(self.management().stats(source).await?) },
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
            kind: bus_management::NATIVE.to_owned(),
            system: bus_management::NATIVE.to_owned(),
            destination,
            subscription,
            ready: stats.ready,
            keyed: stats.keyed,
            in_flight: stats.in_flight,
            // (Counted at Redis's time of the stats, a moment from `now_ms`.)
            expired_locks: stats.expired_locks,
            paused: stats.paused,
            breaker_until_ms: stats.breaker_until_ms,
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

    /// Snapshots of every queue of every kind, read concurrently (one connection
    /// pipelines them), in the order the fleet lists them.
    pub(crate) async fn snapshot_all(&self) -> Result<Vec<QueueSnapshot>> {
        let (queues, now_ms) = tokio::try_join!(self.queues(), self.redis_now_ms())?;
        futures::future::try_join_all(queues.iter().map(|q| self.snapshot(q, now_ms))).await
    }
}
