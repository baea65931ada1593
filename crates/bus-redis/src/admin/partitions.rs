//! Partitioned queues (docs/redis-layout.md, "Partitioned queues"): a queue spread over
//! N shards, each a queue of its own. Administration shows it as one queue: its counts are
//! summed over the shards, with a per-shard breakdown ([`Admin::shard_stats`]); every
//! operation acts on every shard; the storage ids it shows carry their shard
//! (`<shard>:~<n>`), since `~<n>` repeats across shards. That text is the operator's (what
//! `bus` prints and takes back); it is written by [`Shard::shown_id`] and read by
//! `locate` here only. Consumers' receipts carry the shard as a field.

use bus_core::records::QueueStats;
use bus_core::transport::Source;
use fred::prelude::HashesInterface;

use super::Admin;
use crate::keys::{self, QueueKeys};
use crate::{shard_of_key, Result, MAX_PARTITIONS};

/// One shard of a source: its index (`None` for a queue that is not partitioned) and keys.
#[derive(Debug)]
pub(super) struct Shard {
    pub(super) index: Option<u16>,
    pub(super) keys: QueueKeys,
}

impl Shard {
    /// A storage id as shown to operators: prefixed with the shard on a partitioned queue.
    pub(super) fn shown_id(&self, id: &str) -> String {
        match self.index {
            Some(shard) => format!("{shard}:{id}"),
            None => id.to_owned(),
        }
    }
}

impl Admin {
    /// How many shards a queue has (1: not partitioned; always 1 for a subscription): the
    /// larger of this transport's configuration ([`RedisConfig::partitions`]) and what
    /// the queue's consumers recorded (`<prefix>:registry:partitions`).
    ///
    /// [`RedisConfig::partitions`]: crate::RedisConfig::partitions
    pub async fn partitions(&self, source: &Source) -> Result<u16> {
        let Source::Queue(queue) = source else {
            return Ok(1);
        };
        let recorded: Option<i64> = self
            .client()
            .hget(keys::partition_registry(self.key_prefix()), queue.as_str())
            .await?;
        let recorded = recorded
            .and_then(|n| u16::try_from(n).ok())
            .unwrap_or(1)
            .clamp(1, MAX_PARTITIONS);
        Ok(recorded.max(self.transport.config().partitions_of(queue)))
    }

    /// The shards of a source, shard 0 first: one, without an index, for a queue that is
    /// not partitioned or a subscription.
    pub(super) async fn shards(&self, source: &Source) -> Result<Vec<Shard>> {
        let count = self.partitions(source).await?;
        Ok(match source {
            Source::Queue(queue) if count > 1 => (0..count)
                .map(|shard| Shard {
                    index: Some(shard),
                    keys: QueueKeys::shard(self.key_prefix(), queue, shard),
                })
                .collect(),
            _ => vec![Shard {
                index: None,
                keys: self.keys(source),
            }],
        })
    }

    /// The ready list a raw send goes to: on a partitioned queue, the shard of the
    /// message id (FNV-1a, as a keyed send), so sends spread over the shards.
    pub(super) async fn ready_for(&self, source: &Source, message_id: &str) -> Result<String> {
        let shards = self.shards(source).await?;
        let count = u16::try_from(shards.len()).unwrap_or(1);
        let shard = usize::from(shard_of_key(message_id.as_bytes(), count));
        Ok(shards
            .into_iter()
            .nth(shard)
            .map_or_else(|| self.keys(source).ready, |shard| shard.keys.ready))
    }

    /// The counts of each shard of a partitioned queue, shard 0 first, each named after
    /// its hash tag (`orders:0`); empty for a queue that is not partitioned.
    /// [`Admin::stats`] is their sum.
    pub async fn shard_stats(&self, source: &Source) -> Result<Vec<QueueStats>> {
        let mut out = Vec::new();
        for shard in self.shards(source).await? {
            let Some(index) = shard.index else {
                return Ok(Vec::new());
            };
            let mut stats = self.stats_at(source, &shard.keys).await?;
            stats.queue = format!("{}:{index}", stats.queue);
            out.push(stats);
        }
        Ok(out)
    }
}

/// The shard (an index into `shards`) a storage id as administration shows it belongs to
/// (`<shard>:<id>` on a partitioned queue), with the shard's own id; `None` when it names
/// no shard. On a queue that is not partitioned, the id as given.
pub(super) fn locate(shards: &[Shard], id: &str) -> Option<(usize, String)> {
    if let [only] = shards {
        return only.index.is_none().then(|| (0, id.to_owned()));
    }
    let (index, own) = id.split_once(':')?;
    let index: usize = index.parse().ok()?;
    (index < shards.len()).then(|| (index, own.to_owned()))
}

/// The counts of a partitioned queue: its shards' summed; the oldest ready message is
/// the oldest of any shard.
pub(super) fn summed(source: &Source, shards: &[QueueStats]) -> QueueStats {
    let mut total = QueueStats::new(source);
    for shard in shards {
        total.ready += shard.ready;
        total.keyed += shard.keyed;
        total.in_flight += shard.in_flight;
        total.expired_locks += shard.expired_locks;
        total.delayed += shard.delayed;
        total.dead_letters += shard.dead_letters;
        total.paused |= shard.paused;
        total.breaker_until_ms = total.breaker_until_ms.max(shard.breaker_until_ms);
        total.redis_now_ms = total.redis_now_ms.max(shard.redis_now_ms);
        if let Some(sent) = shard.oldest_sent_at_ms {
            if total.oldest_sent_at_ms.map_or(true, |oldest| sent < oldest) {
                total.oldest_sent_at_ms = Some(sent);
                total.oldest_age_ms = shard.oldest_age_ms;
            }
        }
    }
    total
}
