//! Looking at waiting messages without taking them: the next ready ones, the scheduled ones.

use bus_core::records::MessageSummary;
use bus_core::transport::Source;
use bytes::Bytes;
use fred::prelude::{HashesInterface, ListInterface, SortedSetsInterface};
use fred::types::Value;
use serde::Serialize;

pub use bus_core::operator::ReadyMessage;

use super::{last_index, Admin};
use crate::keys::{QueueKeys, WAKE};
use crate::{Error, Result};

/// A delayed message, as [`Admin::scheduled`] shows it.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ScheduledMessage {
    /// Its storage id.
    pub storage_id: String,
    /// When it becomes ready, in ms since the Unix epoch (Redis's clock).
    pub due_at_ms: u64,
    /// Deliveries so far (0 for a delayed send, more for a retry waiting for its backoff).
    pub delivery_count: u64,
    /// The decoded envelope; `None` when missing or not readable.
    pub message: Option<MessageSummary>,
    /// Why there is no readable envelope.
    pub decode_error: Option<String>,
}

impl Admin {
    /// The next `n` ready messages of a queue, in processing order, without taking them
    /// (`LRANGE ready 0 n-1`, stored ids resolved through `msgs`). A partitioned queue has
    /// an order per shard only: its shards' next messages, shard by shard.
    pub async fn peek(&self, source: &Source, n: u64) -> Result<Vec<ReadyMessage>> {
        let mut out = Vec::new();
        for shard in self.shards(source).await? {
            let left = n.saturating_sub(out.len() as u64);
            if left == 0 {
                break;
            }
            for mut ready in self.peek_at(&shard.keys, left).await? {
                ready.position = out.len() as u64;
                ready.storage_id = ready.storage_id.map(|id| shard.shown_id(&id));
                out.push(ready);
            }
        }
        Ok(out)
    }

    async fn peek_at(&self, keys: &QueueKeys, n: u64) -> Result<Vec<ReadyMessage>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let client = self.client();
        // Recovered messages waiting to run alone go first, then the ready list; the
        // wake-up marker is not a message.
        let mut elements: Vec<Bytes> = client.lrange(&keys.suspects, 0, last_index(n)).await?;
        let more = n.saturating_sub(elements.len() as u64);
        if more > 0 {
            let ready: Vec<Bytes> = client.lrange(&keys.ready, 0, last_index(more)).await?;
            elements.extend(ready);
        }
        elements.retain(|e| e.as_ref() != WAKE.as_bytes());
        if elements.is_empty() {
            return Ok(Vec::new());
        }
        // An element is a storage id when `msgs` has it (as reserve decides).
        let stored: Vec<Option<Bytes>> = client.hmget(&keys.msgs, elements.clone()).await?;
        let stored_ids: Vec<String> = elements
            .iter()
            .zip(&stored)
            .filter(|(_, envelope)| envelope.is_some())
            .map(|(element, _)| String::from_utf8_lossy(element).into_owned())
            .collect();
        let mut counts = self
            .delivery_counts(&keys.deliveries, &stored_ids)
            .await?
            .into_iter();
        let mut out = Vec::with_capacity(elements.len());
        for (position, (element, stored)) in elements.into_iter().zip(stored).enumerate() {
            let (storage_id, delivery_count, envelope) = match stored {
                Some(envelope) => (
                    Some(String::from_utf8_lossy(&element).into_owned()),
                    counts.next().unwrap_or(0),
                    envelope,
                ),
                None => (None, 0, element),
            };
            let (message, decode_error) = MessageSummary::read(&envelope);
            out.push(ReadyMessage::new(
                position as u64,
                storage_id,
                delivery_count,
                message,
                decode_error,
            ));
        }
        Ok(out)
    }

    /// The first `n` delayed messages of a queue, earliest due first (`ZRANGE delayed 0
    /// n-1 WITHSCORES`, envelopes from `msgs`; over all shards of a partitioned queue).
    pub async fn scheduled(&self, source: &Source, n: u64) -> Result<Vec<ScheduledMessage>> {
        let mut out = Vec::new();
        for shard in self.shards(source).await? {
            for mut scheduled in self.scheduled_at(&shard.keys, n).await? {
                scheduled.storage_id = shard.shown_id(&scheduled.storage_id);
                out.push(scheduled);
            }
        }
        out.sort_by_key(|s| s.due_at_ms);
        out.truncate(usize::try_from(n).unwrap_or(usize::MAX));
        Ok(out)
    }

    /// Cancels the delayed message `id` (as [`Admin::scheduled`] shows it) of a queue:
    /// removed in one step (`cancel.lua`) and never delivered. `false` when nothing waits
    /// under that id.
    pub async fn cancel(&self, source: &Source, id: &str) -> Result<bool> {
        let shards = self.shards(source).await?;
        let Some((shard, own)) = super::partitions::locate(&shards, id) else {
            return Ok(false);
        };
        let keys = &shards[shard].keys;
        let script_keys = vec![
            keys.delayed.clone(),
            keys.msgs.clone(),
            keys.deliveries.clone(),
            keys.errors.clone(),
            keys.kdue.clone(),
        ];
        let cancelled = crate::scripts::CANCEL
            .run_int(self.client(), script_keys, vec![Value::from(own)])
            .await?;
        Ok(cancelled == 1)
    }

    async fn scheduled_at(&self, keys: &QueueKeys, n: u64) -> Result<Vec<ScheduledMessage>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let client = self.client();
        let reply: Value = client
            .zrange(&keys.delayed, 0, last_index(n), None, false, None, true)
            .await?;
        let due = scored_members(reply)?;
        if due.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = due.iter().map(|(id, _)| id.clone()).collect();
        let envelopes: Vec<Option<Bytes>> = client.hmget(&keys.msgs, ids.clone()).await?;
        let counts = self.delivery_counts(&keys.deliveries, &ids).await?;
        Ok(due
            .into_iter()
            .zip(envelopes)
            .zip(counts)
            .map(|(((storage_id, due_at), envelope), delivery_count)| {
                let (message, decode_error) = match envelope {
                    Some(envelope) => MessageSummary::read(&envelope),
                    None => (None, Some("no stored envelope".to_owned())),
                };
                ScheduledMessage {
                    storage_id,
                    due_at_ms: due_at.max(0.0) as u64,
                    delivery_count,
                    message,
                    decode_error,
                }
            })
            .collect())
    }

    /// `HMGET deliveries ids`, missing counts as 0.
    async fn delivery_counts(&self, key: &str, ids: &[String]) -> Result<Vec<u64>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let counts: Vec<Option<u64>> = self.client().hmget(key, ids.to_vec()).await?;
        Ok(counts.into_iter().map(Option::unwrap_or_default).collect())
    }
}

/// Members and scores of a `WITHSCORES` reply: flat `[member, score, ...]` (RESP2) or
/// pairs `[[member, score], ...]` (RESP3).
pub(super) fn scored_members(reply: Value) -> Result<Vec<(String, f64)>> {
    let unexpected = |v: &Value| Error::Protocol {
        script: "ZRANGE WITHSCORES",
        detail: format!("{v:?}"),
    };
    let items = match reply {
        Value::Array(items) => items,
        Value::Null => return Ok(Vec::new()),
        other => return Err(unexpected(&other)),
    };
    let pair = |member: &Value, score: &Value| -> Result<(String, f64)> {
        let member = member.as_string().ok_or_else(|| unexpected(member))?;
        let score = score.as_f64().ok_or_else(|| unexpected(score))?;
        Ok((member, score))
    };
    if items.iter().all(|item| matches!(item, Value::Array(_))) {
        items
            .iter()
            .map(|item| match item {
                Value::Array(p) if p.len() == 2 => pair(&p[0], &p[1]),
                other => Err(unexpected(other)),
            })
            .collect()
    } else if items.len() % 2 == 0 {
        items.chunks(2).map(|p| pair(&p[0], &p[1])).collect()
    } else {
        Err(unexpected(&Value::Array(items)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scored_replies_read_in_both_shapes() {
        let flat = Value::Array(vec![
            "a".into(),
            Value::Double(5.0),
            "b".into(),
            Value::Double(7.0),
        ]);
        assert_eq!(
            scored_members(flat).unwrap(),
            vec![("a".to_owned(), 5.0), ("b".to_owned(), 7.0)]
        );
        let pairs = Value::Array(vec![Value::Array(vec!["a".into(), Value::Double(5.0)])]);
        assert_eq!(scored_members(pairs).unwrap(), vec![("a".to_owned(), 5.0)]);
        assert!(scored_members(Value::Null).unwrap().is_empty());
        assert!(scored_members(Value::Array(vec!["odd".into()])).is_err());
    }
}
