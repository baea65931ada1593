//! What the dashboard shows beyond the counts: the messages in flight, the error
//! histories of stored messages, the counters behind a queue's throughput, Redis's clock.

use bus_core::records::{ErrorRecord, MessageSummary};
use bus_core::transport::Source;
use bytes::Bytes;
use fred::prelude::{ClientLike, HashesInterface, KeysInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
use serde::Serialize;

use super::partitions::locate;
use super::records::parse_errors;
use super::Admin;
use crate::keys::QueueKeys;
use crate::scripts;
use crate::Result;

/// A message reserved by a consumer, as [`Admin::in_flight`] shows it.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct InFlightMessage {
    /// Its storage id.
    pub storage_id: String,
    /// When its lock expires, in ms since the Unix epoch (Redis's clock).
    pub lock_deadline_ms: u64,
    /// Deliveries so far, this one included.
    pub delivery_count: u64,
    /// Its error history, oldest first.
    pub errors: Vec<ErrorRecord>,
    /// The decoded envelope; `None` when missing or not readable.
    pub message: Option<MessageSummary>,
    /// Why there is no readable envelope.
    pub decode_error: Option<String>,
}

/// The counters behind a queue's throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Counters {
    /// Storage ids given so far (`seq`): every fresh envelope reserve has taken.
    pub taken_total: u64,
    /// Envelopes stored (`HLEN msgs`) or held in leases (`GET leased`): taken and not yet
    /// finished, or delayed.
    pub stored: u64,
}

impl Admin {
    /// The `n` in-flight messages whose locks expire first: stored ones (`inflight`) and
    /// leased ones (`leases`, docs/redis-layout.md) merged by deadline in one read-only
    /// script (`lua/admin_in_flight.lua`), then their errors: bounded by `n`. A leased
    /// message is shown under the storage id it gets if it leaves its lease other than
    /// by ack, with its implicit delivery count 1.
    /// Over all shards of a partitioned queue, ids prefixed with their shard.
    pub async fn in_flight(&self, source: &Source, n: u64) -> Result<Vec<InFlightMessage>> {
        let mut out = Vec::new();
        for shard in self.shards(source).await? {
            for mut held in self.in_flight_at(&shard.keys, n).await? {
                held.storage_id = shard.shown_id(&held.storage_id);
                out.push(held);
            }
        }
        out.sort_by_key(|held| held.lock_deadline_ms);
        out.truncate(usize::try_from(n).unwrap_or(usize::MAX));
        Ok(out)
    }

    async fn in_flight_at(&self, keys: &QueueKeys, n: u64) -> Result<Vec<InFlightMessage>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let script = &scripts::ADMIN_IN_FLIGHT;
        let reply = script
            .run_array(
                self.client(),
                vec![
                    keys.inflight.clone(),
                    keys.msgs.clone(),
                    keys.deliveries.clone(),
                    keys.leases.clone(),
                ],
                vec![Value::from(i64::try_from(n).unwrap_or(i64::MAX))],
            )
            .await?;
        let mut held = Vec::with_capacity(reply.len() / 4);
        let mut items = reply.into_iter();
        while let (Some(id), Some(deadline), Some(count), Some(envelope)) =
            (items.next(), items.next(), items.next(), items.next())
        {
            let (Some(storage_id), Some(deadline), Some(count)) =
                (id.as_string(), deadline.as_i64(), count.as_u64())
            else {
                return Err(script.unexpected(&Value::from("malformed in-flight entry")));
            };
            held.push((storage_id, deadline, count, envelope.into_bytes()));
        }
        let ids: Vec<String> = held.iter().map(|(id, ..)| id.clone()).collect();
        let errors = self.errors_at(keys, &ids).await?;
        Ok(held
            .into_iter()
            .zip(errors)
            .map(|((storage_id, deadline, count, envelope), errors)| {
                let (message, decode_error) = match envelope {
                    Some(envelope) => MessageSummary::read(&envelope),
                    None => (None, Some("no stored envelope".to_owned())),
                };
                InFlightMessage {
                    storage_id,
                    lock_deadline_ms: deadline.max(0) as u64,
                    delivery_count: count,
                    errors,
                    message,
                    decode_error,
                }
            })
            .collect())
    }

    /// The error histories of stored messages (`HMGET errors ids`), read as
    /// [`Admin::dead_letters`] reads them; an id without one has none (as has an id of a
    /// partitioned queue that names no shard: they are shown `<shard>:<id>`).
    pub async fn errors(&self, source: &Source, ids: &[String]) -> Result<Vec<Vec<ErrorRecord>>> {
        let shards = self.shards(source).await?;
        if let [only] = shards.as_slice() {
            return self.errors_at(&only.keys, ids).await;
        }
        let mut out = vec![Vec::new(); ids.len()];
        for (index, shard) in shards.iter().enumerate() {
            let (positions, own): (Vec<usize>, Vec<String>) = ids
                .iter()
                .enumerate()
                .filter_map(|(position, id)| match locate(&shards, id) {
                    Some((of, own)) if of == index => Some((position, own)),
                    _ => None,
                })
                .unzip();
            let found = self.errors_at(&shard.keys, &own).await?;
            for (position, errors) in positions.into_iter().zip(found) {
                out[position] = errors;
            }
        }
        Ok(out)
    }

    async fn errors_at(&self, keys: &QueueKeys, ids: &[String]) -> Result<Vec<Vec<ErrorRecord>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<Option<Bytes>> = self.client().hmget(&keys.errors, ids.to_vec()).await?;
        Ok(texts
            .iter()
            .map(|t| t.as_deref().map(parse_errors).unwrap_or_default())
            .collect())
    }

    /// A queue's throughput counters, read together (summed over the shards of a
    /// partitioned queue).
    pub async fn counters(&self, source: &Source) -> Result<Counters> {
        let client = self.client();
        let mut counters = Counters {
            taken_total: 0,
            stored: 0,
        };
        for shard in self.shards(source).await? {
            let keys = &shard.keys;
            let (taken, stored, leased): (Option<u64>, u64, Option<u64>) = tokio::try_join!(
                client.get(&keys.seq),
                client.hlen(&keys.msgs),
                client.get(&keys.leased)
            )?;
            counters.taken_total += taken.unwrap_or(0);
            counters.stored += stored + leased.unwrap_or(0);
        }
        Ok(counters)
    }

    /// Redis's clock, in ms since the Unix epoch (the clock lock deadlines are set by).
    pub async fn redis_now_ms(&self) -> Result<u64> {
        let command = CustomCommand::new_static("TIME", ClusterHash::Random, false);
        let reply: Value = self.client().custom(command, Vec::<Value>::new()).await?;
        let parts: Vec<u64> = match reply {
            Value::Array(items) => items
                .iter()
                .filter_map(|v| v.as_string().and_then(|s| s.parse().ok()))
                .collect(),
            _ => Vec::new(),
        };
        match parts.as_slice() {
            [seconds, micros] => Ok(seconds * 1000 + micros / 1000),
            // TIME always answers two integers; a proxy that does not falls back to ours.
            _ => Ok(bus_core::transport::now_ms()),
        }
    }
}
