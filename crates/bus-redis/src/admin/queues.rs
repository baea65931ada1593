//! Queues: counts, purge, a raw send, removing a subscription.

use bus_core::defaults;
use bus_core::records::{MessageSummary, QueueStats};
use bus_core::transport::{now_ms, Source};
use bus_core::Envelope;
use bytes::Bytes;
use fred::prelude::{ListInterface, SortedSetsInterface};
use fred::types::Value;
use serde::Serialize;

pub use bus_core::operator::Purged;

use super::partitions::summed;
use super::Admin;
use crate::keys::{self, QueueKeys};
use crate::scripts;
use crate::Result;

/// Elements (and delayed messages) purged per script call: each call is short, so Redis
/// keeps serving everyone else during a long purge.
const PURGE_BATCH: u64 = 1000;

/// What [`Admin::remove_subscription`] did: one of two outcomes, for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsubscribe {
    /// The subscription is gone.
    Removed(RemovedSubscription),
    /// It still holds messages and `force` was not given: nothing was changed.
    Refused(Held),
}

/// What a removed subscription left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RemovedSubscription {
    /// Whether the name was in the topic's subscriptions.
    pub was_registered: bool,
    /// How many of the subscription queue's keys existed and were deleted.
    pub deleted_keys: u64,
}

/// The messages a subscription still holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Held {
    /// Messages waiting.
    pub ready: u64,
    /// Messages reserved by consumers.
    pub in_flight: u64,
    /// Messages scheduled.
    pub delayed: u64,
    /// Dead letters.
    pub dead: u64,
}

impl Admin {
    /// The counts of a queue or subscription, and the age of its next ready message, in
    /// one consistent snapshot (`lua/admin_stats.lua`, read only). A partitioned queue's
    /// are its shards' summed (one snapshot per shard); [`Admin::shard_stats`] has them.
    pub async fn stats(&self, source: &Source) -> Result<QueueStats> {
        let shards = self.shard_stats(source).await?;
        if !shards.is_empty() {
            return Ok(summed(source, &shards));
        }
        self.stats_at(source, &self.keys(source)).await
    }

    /// The counts of one key set (a queue, or one shard of a partitioned queue).
    pub(super) async fn stats_at(&self, source: &Source, keys: &QueueKeys) -> Result<QueueStats> {
        let keys = keys.clone();
        let script = &scripts::ADMIN_STATS;
        let reply = script
            .run_array(
                self.client(),
                vec![
                    keys.ready,
                    keys.inflight,
                    keys.delayed,
                    keys.dead,
                    keys.msgs,
                    keys.suspects,
                    keys.leases,
                    keys.leased,
                    keys.flow.clone(),
                ],
                Vec::new(),
            )
            .await?;
        let mut values = reply.clone().into_iter();
        let mut count = || -> Result<u64> {
            let value = values
                .next()
                .ok_or_else(|| script.unexpected(&Value::Array(reply.clone())))?;
            Ok(script.int(&value)?.max(0) as u64)
        };
        let (ready, in_flight, expired_locks, delayed, dead, redis_now_ms, keyed) = (
            count()?,
            count()?,
            count()?,
            count()?,
            count()?,
            count()?,
            count()?,
        );
        let head = match values.next() {
            Some(value) => script.bytes(value)?,
            None => None,
        };
        let oldest_sent_at_ms = head
            .as_deref()
            .and_then(|envelope| MessageSummary::decode(envelope).ok())
            .map(|m| m.sent_at_ms);
        // (Built field by field: the record is bus-core's and `#[non_exhaustive]`.)
        let mut stats = QueueStats::new(source);
        stats.ready = ready;
        stats.keyed = keyed;
        stats.in_flight = in_flight;
        stats.expired_locks = expired_locks;
        stats.delayed = delayed;
        stats.dead_letters = dead;
        stats.oldest_sent_at_ms = oldest_sent_at_ms;
        stats.oldest_age_ms = oldest_sent_at_ms.map(|sent| now_ms().saturating_sub(sent));
        stats.redis_now_ms = redis_now_ms;
        (stats.paused, stats.breaker_until_ms) = self.paused_at(&keys.flow).await?;
        Ok(stats)
    }

    /// [`Admin::stats`] of every queue and subscription [`Admin::sources`] lists.
    pub async fn stats_all(&self) -> Result<Vec<QueueStats>> {
        let mut all = Vec::new();
        for source in self.sources().await? {
            all.push(self.stats(&source).await?);
        }
        Ok(all)
    }

    /// Deletes the messages waiting on a queue: the ready ones, the delayed ones
    /// (scheduled sends and retries waiting for their backoff) and, on an ordered queue,
    /// those waiting for their key. Messages in flight (their handlers are running) and
    /// dead letters are kept.
    ///
    /// Works in batches of 1,000, each one atomic script, so Redis is never blocked for
    /// long; it deletes at most what was there when it started, so messages sent during
    /// the purge may survive it.
    pub async fn purge(&self, source: &Source) -> Result<Purged> {
        let mut purged = Purged::default();
        // A partitioned queue's shards one after the other.
        for shard in self.shards(source).await? {
            let of_shard = self.purge_at(&shard.keys).await?;
            purged.ready += of_shard.ready;
            purged.delayed += of_shard.delayed;
            purged.keyed += of_shard.keyed;
        }
        Ok(purged)
    }

    async fn purge_at(&self, keys: &QueueKeys) -> Result<Purged> {
        let client = self.client();
        let (ready, suspects, mut delayed_left, mut keys_left) = tokio::try_join!(
            client.llen::<u64, _>(&keys.ready),
            client.llen::<u64, _>(&keys.suspects),
            client.zcard::<u64, _>(&keys.delayed),
            client.llen::<u64, _>(&keys.kheads),
        )?;
        // (Key, envelope pairs: a head per pair.)
        keys_left = keys_left.div_ceil(2);
        // Recovered messages waiting to run alone are waiting messages too.
        let mut ready_left = ready + suspects;
        let script = &scripts::ADMIN_PURGE;
        let mut purged = Purged::default();
        // The keys' lists (per-key ordering): the heads that may start, popped in batches
        // with their keys' lists, then, once, those of the keys at their limit (a sweep
        // that ends the keyed part).
        let mut keys_swept = false;
        while ready_left + delayed_left > 0 || !keys_swept {
            let max_keys = if keys_swept {
                -1
            } else {
                keys_left.min(PURGE_BATCH) as i64
            };
            let reply = script
                .run_array(
                    client,
                    vec![
                        keys.ready.clone(),
                        keys.delayed.clone(),
                        keys.msgs.clone(),
                        keys.deliveries.clone(),
                        keys.errors.clone(),
                        keys.inflight.clone(),
                        keys.dead_info.clone(),
                        keys.suspects.clone(),
                        keys.flow.clone(),
                        keys.kheads.clone(),
                        keys.kbusy.clone(),
                        keys.kq.clone(),
                        keys.kdue.clone(),
                        keys.kwait.clone(),
                        keys.kof.clone(),
                        keys.kready.clone(),
                    ],
                    vec![
                        Value::from(ready_left.min(PURGE_BATCH) as i64),
                        Value::from(delayed_left.min(PURGE_BATCH) as i64),
                        Value::from(max_keys),
                    ],
                )
                .await?;
            let [ready, delayed, keyed, popped, swept] = reply.as_slice() else {
                return Err(script.unexpected(&Value::Array(reply)));
            };
            let count = |value: &Value| -> Result<u64> { Ok(script.int(value)?.max(0) as u64) };
            let (ready, delayed) = (count(ready)?, count(delayed)?);
            purged.ready += ready;
            purged.delayed += delayed;
            purged.keyed += count(keyed)?;
            keys_left = keys_left.saturating_sub(count(popped)?);
            keys_swept |= count(swept)? == 1;
            if ready + delayed == 0 {
                // Emptied by someone else meanwhile.
                (ready_left, delayed_left) = (0, 0);
            }
            ready_left = ready_left.saturating_sub(ready);
            delayed_left = delayed_left.saturating_sub(delayed);
        }
        Ok(purged)
    }

    /// Appends an envelope to the ready list of a queue or subscription as a fresh
    /// element, as a foreign producer would (one `RPUSH`; on a partitioned queue, to the
    /// shard of its message id); refused with [`bus_core::Error::MessageTooLarge`] above
    /// the bus's default limit.
    pub async fn send(&self, source: &Source, envelope: &Envelope) -> Result<()> {
        let encoded = envelope.encode()?;
        if encoded.len() > defaults::MAX_MESSAGE_SIZE {
            return Err(bus_core::Error::MessageTooLarge {
                size: encoded.len(),
                max: defaults::MAX_MESSAGE_SIZE,
            }
            .into());
        }
        let _: i64 = self
            .client()
            .rpush(
                self.ready_for(source, envelope.id.as_str()).await?,
                Bytes::from(encoded),
            )
            .await?;
        Ok(())
    }

    /// Removes a subscription of a topic: its name leaves the topic's subscriptions (so
    /// publishes stop writing to it) and its queue's keys are deleted, in one atomic
    /// script (`lua/admin_unsubscribe.lua`). A subscription whose queue still holds
    /// messages (ready, waiting for its key, in flight, delayed or dead) is
    /// [`Unsubscribe::Refused`] and left untouched, unless `force`.
    ///
    /// Stop the subscription's consumers first: a consumer registers its subscription
    /// again when it starts.
    pub async fn remove_subscription(
        &self,
        topic: &str,
        name: &str,
        force: bool,
    ) -> Result<Unsubscribe> {
        let source = Source::subscription(topic, name)?;
        let queue = self.keys(&source);
        // The four counted keys first (the script checks them), the leases (counted too,
        // and their own keys deleted), then every other one.
        let counted = [
            &queue.ready,
            &queue.inflight,
            &queue.delayed,
            &queue.dead,
            &queue.leases,
            &queue.leased,
        ];
        let mut script_keys = vec![keys::subscriptions(self.key_prefix(), topic)];
        script_keys.extend(counted.iter().map(|key| key.to_string()));
        script_keys.extend(
            queue
                .all()
                .into_iter()
                .filter(|key| !counted.iter().any(|c| c.as_str() == *key))
                .map(str::to_owned),
        );
        // The prefixes of the per-key lists and rate windows, deleted key by key.
        script_keys.extend([queue.kq.clone(), queue.kstarts.clone()]);
        let script = &scripts::ADMIN_UNSUBSCRIBE;
        let reply = script
            .run_array(
                self.client(),
                script_keys,
                vec![Value::from(name), Value::from(i64::from(force))],
            )
            .await?;
        let ints = reply
            .iter()
            .map(|v| script.int(v))
            .collect::<Result<Vec<i64>>>()?;
        let count = |n: i64| n.max(0) as u64;
        match ints.as_slice() {
            [1, was, deleted] => Ok(Unsubscribe::Removed(RemovedSubscription {
                was_registered: *was == 1,
                deleted_keys: count(*deleted),
            })),
            [0, ready, in_flight, delayed, dead] => Ok(Unsubscribe::Refused(Held {
                ready: count(*ready),
                in_flight: count(*in_flight),
                delayed: count(*delayed),
                dead: count(*dead),
            })),
            _ => Err(script.unexpected(&Value::Array(reply))),
        }
    }
}
