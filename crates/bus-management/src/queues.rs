//! Queues and topics: listings, counts, purge, a raw send, removing a subscription.

use std::collections::BTreeMap;

use bus_core::transport::now_ms;
use bus_core::{Envelope, Format, Headers, MessageId, Source, DEFAULT_MAX_MESSAGE_SIZE};
use bus_redis::keys;
use bytes::Bytes;
use fred::prelude::{ListInterface, SortedSetsInterface};
use fred::types::Value;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::management::{source_name, wire_name};
use crate::message::MessageSummary;
use crate::scripts;
use crate::{Error, Management, Result};

/// Elements (and delayed messages) purged per script call: each call is short, so Redis
/// keeps serving everyone else during a long purge.
const PURGE_BATCH: u64 = 1000;

/// A topic and the subscriptions registered for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Topic {
    /// The topic.
    pub topic: String,
    /// Its subscriptions, sorted.
    pub subscriptions: Vec<String>,
}

/// The counts of one queue or subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct QueueStats {
    /// `queue`, or `topic/subscription`.
    pub queue: String,
    /// Messages waiting (`LLEN ready`).
    pub ready: u64,
    /// Messages reserved by consumers, running or prefetched (`ZCARD inflight`),
    /// including those whose lock expired.
    pub in_flight: u64,
    /// Of those in flight, the ones whose lock deadline is past (Redis's clock): their
    /// consumer died or lost Redis, and recovery will put them back (or dead-letter them)
    /// once a consumer of the queue runs.
    pub expired_locks: u64,
    /// Delayed sends and retries waiting for their time (`ZCARD delayed`).
    pub delayed: u64,
    /// Dead letters (`LLEN dead`).
    pub dead: u64,
    /// When the next ready message (the head of the ready list) was first sent, in ms
    /// since the Unix epoch (its envelope's send time, the producer's clock): a retried,
    /// recovered or requeued message keeps the time of its first send, so this is not how
    /// long it has been ready. `None` when nothing is ready or the element is not a
    /// readable envelope.
    pub oldest_sent_at_ms: Option<u64>,
    /// How long ago that was (by this machine's clock), in ms.
    pub oldest_age_ms: Option<u64>,
    /// Redis's clock when the counts were taken, in ms since the Unix epoch (the clock
    /// lock deadlines are measured against).
    pub redis_now_ms: u64,
}

/// What [`Management::purge`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Purged {
    /// Ready messages deleted.
    pub ready: u64,
    /// Delayed messages (scheduled sends and retries waiting) deleted.
    pub delayed: u64,
}

/// What [`Management::remove_subscription`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RemovedSubscription {
    /// Whether the name was in the topic's subscriptions.
    pub was_registered: bool,
    /// How many of the subscription queue's keys existed and were deleted.
    pub deleted_keys: u64,
}

impl Management {
    /// The command queues, sorted: those consumers registered (`<prefix>:registry:queues`)
    /// and those whose keys exist (found with `SCAN`, never `KEYS`), so a queue is listed
    /// from its first send even if no consumer ever started.
    pub async fn queues(&self) -> Result<Vec<String>> {
        Ok(self.inventory().await?.queues.into_iter().collect())
    }

    /// The topics, each with its subscriptions, sorted: those consumers registered (the
    /// registry and each topic's `subs` set) and those whose keys exist.
    pub async fn topics(&self) -> Result<Vec<Topic>> {
        Ok(self
            .inventory()
            .await?
            .topics
            .into_iter()
            .map(|(topic, names)| Topic {
                topic,
                subscriptions: names.into_iter().collect(),
            })
            .collect())
    }

    /// Every queue and subscription, in the order `queues` then `topics` list them.
    pub async fn sources(&self) -> Result<Vec<Source>> {
        Ok(self.inventory().await?.sources())
    }

    /// The counts of a queue or subscription, and the age of its next ready message, in
    /// one consistent snapshot (`lua/stats.lua`, read only).
    pub async fn stats(&self, source: &Source) -> Result<QueueStats> {
        let keys = self.keys(source);
        let script = &scripts::STATS;
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
        let (ready, in_flight, expired_locks, delayed, dead, redis_now_ms) =
            (count()?, count()?, count()?, count()?, count()?, count()?);
        let head = match values.next() {
            Some(value) => script.bytes(value)?,
            None => None,
        };
        let oldest_sent_at_ms = head
            .as_deref()
            .and_then(|envelope| MessageSummary::decode(envelope).ok())
            .map(|m| m.sent_at_ms);
        Ok(QueueStats {
            queue: source_name(source),
            ready,
            in_flight,
            expired_locks,
            delayed,
            dead,
            oldest_sent_at_ms,
            oldest_age_ms: oldest_sent_at_ms.map(|sent| now_ms().saturating_sub(sent)),
            redis_now_ms,
        })
    }

    /// [`Management::stats`] of every queue and subscription [`Management::sources`] lists.
    pub async fn stats_all(&self) -> Result<Vec<QueueStats>> {
        let mut all = Vec::new();
        for source in self.sources().await? {
            all.push(self.stats(&source).await?);
        }
        Ok(all)
    }

    /// Deletes the messages waiting on a queue: the ready ones and the delayed ones
    /// (scheduled sends and retries waiting for their backoff). Messages in flight (their
    /// handlers are running) and dead letters are kept.
    ///
    /// Works in batches of 1,000, each one atomic script, so Redis is never blocked for
    /// long; it deletes at most what was there when it started, so messages sent during
    /// the purge may survive it.
    pub async fn purge(&self, source: &Source) -> Result<Purged> {
        let keys = self.keys(source);
        let client = self.client();
        let (ready, suspects, mut delayed_left) = tokio::try_join!(
            client.llen::<u64, _>(&keys.ready),
            client.llen::<u64, _>(&keys.suspects),
            client.zcard::<u64, _>(&keys.delayed),
        )?;
        // Recovered messages waiting to run alone are waiting messages too.
        let mut ready_left = ready + suspects;
        let script = &scripts::PURGE;
        let mut purged = Purged {
            ready: 0,
            delayed: 0,
        };
        while ready_left + delayed_left > 0 {
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
                    ],
                    vec![
                        Value::from(ready_left.min(PURGE_BATCH) as i64),
                        Value::from(delayed_left.min(PURGE_BATCH) as i64),
                    ],
                )
                .await?;
            let [ready, delayed] = reply.as_slice() else {
                return Err(script.unexpected(&Value::Array(reply)));
            };
            let (ready, delayed) = (script.int(ready)? as u64, script.int(delayed)? as u64);
            if ready + delayed == 0 {
                break; // emptied by someone else meanwhile
            }
            purged.ready += ready;
            purged.delayed += delayed;
            ready_left = ready_left.saturating_sub(ready);
            delayed_left = delayed_left.saturating_sub(delayed);
        }
        Ok(purged)
    }

    /// Sends one message with a JSON body, as a foreign producer would: a plain envelope
    /// (type `message_type`, or the queue's wire name when `None`) appended to the ready
    /// list in one `RPUSH`. Returns its message id.
    pub async fn send(
        &self,
        source: &Source,
        message_type: Option<&str>,
        json_body: &str,
        headers: BTreeMap<String, String>,
    ) -> Result<MessageId> {
        let message_type = message_type.unwrap_or_else(|| wire_name(source));
        bus_core::validate_name("message type", message_type)?;
        let body: &RawValue = serde_json::from_str(json_body).map_err(Error::InvalidBody)?;
        let mut envelope = Envelope::new(
            message_type,
            Format::Json,
            Bytes::copy_from_slice(body.get().as_bytes()),
        );
        envelope.headers = Headers::from_iter(headers);
        let encoded = envelope.encode()?;
        if encoded.len() > DEFAULT_MAX_MESSAGE_SIZE {
            return Err(Error::TooLarge {
                size: encoded.len(),
                limit: DEFAULT_MAX_MESSAGE_SIZE,
            });
        }
        let _: i64 = self
            .client()
            .rpush(self.keys(source).ready, Bytes::from(encoded))
            .await?;
        Ok(envelope.id)
    }

    /// Removes a subscription of a topic: its name leaves the topic's subscriptions (so
    /// publishes stop writing to it) and its queue's keys are deleted, in one atomic
    /// script. A subscription whose queue still holds messages (ready, in flight, delayed
    /// or dead) is refused with [`Error::NotEmpty`] and left untouched, unless `force`.
    ///
    /// Stop the subscription's consumers first: a consumer registers its subscription
    /// again when it starts.
    pub async fn remove_subscription(
        &self,
        topic: &str,
        name: &str,
        force: bool,
    ) -> Result<RemovedSubscription> {
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
        let mut script_keys = vec![keys::subscriptions(self.prefix(), topic)];
        script_keys.extend(counted.iter().map(|key| key.to_string()));
        script_keys.extend(
            queue
                .all()
                .into_iter()
                .filter(|key| !counted.iter().any(|c| c.as_str() == *key))
                .map(str::to_owned),
        );
        let script = &scripts::UNSUBSCRIBE;
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
        match ints.as_slice() {
            [1, was, deleted] => Ok(RemovedSubscription {
                was_registered: *was == 1,
                deleted_keys: *deleted as u64,
            }),
            [0, ready, in_flight, delayed, dead] => Err(Error::NotEmpty {
                topic: topic.to_owned(),
                name: name.to_owned(),
                ready: *ready as u64,
                in_flight: *in_flight as u64,
                delayed: *delayed as u64,
                dead: *dead as u64,
            }),
            _ => Err(script.unexpected(&Value::Array(reply))),
        }
    }
}
