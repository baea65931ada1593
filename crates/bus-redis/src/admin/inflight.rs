//! What the dashboard shows beyond the counts: the messages in flight, the error
//! histories of stored messages, the counters behind a queue's throughput, Redis's clock.

use bus_core::{ErrorRecord, MessageSummary, Source};
use bytes::Bytes;
use fred::prelude::{ClientLike, HashesInterface, KeysInterface, SortedSetsInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
use serde::Serialize;

use super::browse::scored_members;
use super::partitions::locate;
use super::records::parse_errors;
use super::{last_index, Admin};
use crate::keys::QueueKeys;
use crate::{Error, Result};

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
    /// Envelopes stored (`HLEN msgs`): taken and not yet finished, or delayed.
    pub stored: u64,
}

impl Admin {
    /// The `n` in-flight messages whose locks expire first (`ZRANGE inflight 0 n-1
    /// WITHSCORES`, then their envelopes, counts and errors): bounded by `n`. Over all
    /// shards of a partitioned queue, ids prefixed with their shard.
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
        let client = self.client();
        let reply: Value = client
            .zrange(&keys.inflight, 0, last_index(n), None, false, None, true)
            .await?;
        let locked = scored_members(reply)?;
        if locked.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = locked.iter().map(|(id, _)| id.clone()).collect();
        let (envelopes, counts, errors) = tokio::try_join!(
            async {
                Ok::<_, Error>(
                    client
                        .hmget::<Vec<Option<Bytes>>, _, _>(&keys.msgs, ids.clone())
                        .await?,
                )
            },
            async {
                Ok(client
                    .hmget::<Vec<Option<u64>>, _, _>(&keys.deliveries, ids.clone())
                    .await?)
            },
            self.errors_at(keys, &ids),
        )?;
        Ok(locked
            .into_iter()
            .zip(envelopes)
            .zip(counts.into_iter().zip(errors))
            .map(|(((storage_id, deadline), envelope), (count, errors))| {
                let (message, decode_error) = match envelope {
                    Some(envelope) => MessageSummary::read(&envelope),
                    None => (None, Some("no stored envelope".to_owned())),
                };
                InFlightMessage {
                    storage_id,
                    lock_deadline_ms: deadline.max(0.0) as u64,
                    delivery_count: count.unwrap_or(0),
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
            let (taken, stored): (Option<u64>, u64) =
                tokio::try_join!(client.get(&keys.seq), client.hlen(&keys.msgs))?;
            counters.taken_total += taken.unwrap_or(0);
            counters.stored += stored;
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
