//! Deduplication at send: `send_once_batch.lua` checks each message's deduplication key,
//! sets it and stores the message in one step per message, for any number of messages of
//! one queue or partition in one call (docs/redis-layout.md, "Deduplication"). A batch
//! ([`send_batch`]) is grouped by partition and by its messages' window, due time and
//! partition key, one call per group of at most [`BATCH_MAX`]. Concurrent single sends
//! of one group share a call (`dedup_lanes.rs`), as plain sends share an `RPUSH`. With a
//! partition key the script also takes the per-key ordering keys (protocol 4): on an
//! ordered queue the messages join their key's order, as a keyed send's do.
//! (`send_once.lua`, the single form, stays for foreign producers.)

use bus_core::transport::{Deduplication, Outgoing};
use bus_core::MessageId;
use fred::types::Value;

use crate::durable::WriteError;
use crate::keys::QueueKeys;
use crate::scripts;
use crate::transport::{epoch_ms, RedisTransport};
use async_trait::async_trait;
use bus_core::transport::Deduplicated;

/// At most this many messages go in one `send_once_batch` call (its KEYS and ARGV grow
/// with it, and the script runs alone on the server).
pub(crate) const BATCH_MAX: usize = 1_000;

/// What the messages of one `send_once_batch` call share: the queue or partition (its
/// ready list names it), the window, the due time and the partition key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Group {
    ready: String,
    window_ms: i64,
    /// Ms since the Unix epoch, or empty: ready now.
    due: String,
    partition: Option<String>,
}

impl Group {
    fn of(keys: &QueueKeys, dedup: &Deduplication<'_>) -> Self {
        Group {
            ready: keys.ready.clone(),
            window_ms: i64::try_from(dedup.window.as_millis())
                .unwrap_or(i64::MAX)
                .max(1),
            due: dedup
                .due
                .map_or_else(String::new, |due| epoch_ms(due).to_string()),
            partition: dedup.partition.map(str::to_owned),
        }
    }
}

/// The raw outcome of one call, shared by every message it carried.
pub(crate) type Outcome = Result<Value, WriteError>;

/// The keys a deduplicated send writes, and its group.
async fn place(
    transport: &RedisTransport,
    queue: &str,
    dedup: &Deduplication<'_>,
) -> bus_core::Result<(QueueKeys, Group)> {
    if let Some(key) = dedup.partition {
        bus_core::transport::refuse_empty_key(queue, key)?;
    }
    // On a partitioned queue: the partition key's partition, else the deduplication key's.
    let keys = transport
        .keys_for_send(queue, Some(dedup.partition.unwrap_or(dedup.key)))
        .await?;
    let group = Group::of(&keys, dedup);
    Ok((keys, group))
}

/// Stores `message` unless `dedup.key` is held in its queue (on a partitioned queue: in
/// the partition the partition key, else the deduplication key, picks); returns the
/// first message's id when it is. Joins the call of concurrent sends of its group.
pub(crate) async fn send(
    transport: &RedisTransport,
    queue: &str,
    message: Outgoing,
    dedup: Deduplication<'_>,
) -> bus_core::Result<Option<MessageId>> {
    let (keys, group) = place(transport, queue, &dedup).await?;
    transport
        .once_lanes()
        .send(transport, group, keys, message, dedup.key.to_owned())
        .await
}

/// Stores each message unless its deduplication key is held (or taken by an earlier
/// message of the batch); returns per message, in order, the first message's id when it
/// is. One script call per group.
pub(crate) async fn send_batch(
    transport: &RedisTransport,
    queue: &str,
    messages: Vec<(Outgoing, Deduplication<'_>)>,
) -> bus_core::Result<Vec<Option<MessageId>>> {
    // Groups in the order first seen, each with its messages' places in the batch.
    let mut groups: Vec<(Group, QueueKeys, Vec<usize>)> = Vec::new();
    let mut slots = Vec::with_capacity(messages.len());
    for (i, (message, dedup)) in messages.into_iter().enumerate() {
        let (keys, group) = place(transport, queue, &dedup).await?;
        match groups.iter_mut().find(|(g, _, _)| *g == group) {
            Some((_, _, places)) => places.push(i),
            None => groups.push((group, keys, vec![i])),
        }
        slots.push(Some((message, dedup.key.to_owned())));
    }
    let mut firsts = vec![None; slots.len()];
    for (group, keys, places) in groups {
        for chunk in places.chunks(BATCH_MAX) {
            let batch: Vec<(Outgoing, String)> =
                chunk.iter().filter_map(|&i| slots[i].take()).collect();
            let outcome = call(transport, &group, &keys, batch).await;
            for (at, &i) in chunk.iter().enumerate() {
                firsts[i] = answer(transport, &outcome, at, chunk.len())?;
            }
        }
    }
    Ok(firsts)
}

/// One `send_once_batch` call: KEYS ready, delayed, msgs [, flow, kready, kbusy, kq,
/// kdue], one dedup key per message; ARGV n, window, due, key, then id, envelope pairs.
pub(crate) async fn call(
    transport: &RedisTransport,
    group: &Group,
    keys: &QueueKeys,
    batch: Vec<(Outgoing, String)>,
) -> Outcome {
    let n = batch.len();
    let mut script_keys = Vec::with_capacity(8 + n);
    script_keys.extend([keys.ready.clone(), keys.delayed.clone(), keys.msgs.clone()]);
    if group.partition.is_some() {
        script_keys.extend([
            keys.flow.clone(),
            keys.kready.clone(),
            keys.kbusy.clone(),
            keys.kq.clone(),
            keys.kdue.clone(),
        ]);
    }
    let mut args = Vec::with_capacity(4 + 2 * n);
    args.extend([
        Value::from(i64::try_from(n).unwrap_or(i64::MAX)),
        Value::from(group.window_ms),
        Value::from(group.due.as_str()),
        Value::from(group.partition.as_deref().unwrap_or("")),
    ]);
    for (message, key) in batch {
        script_keys.push(keys.dedup(&key));
        args.push(Value::from(message.id.as_str()));
        args.push(Value::Bytes(message.payload));
    }
    transport
        .write_raw(&scripts::SEND_ONCE_BATCH, script_keys, args)
        .await
}

/// The answer for message `at` of the `n` a call carried: `None` stored, or the first
/// message's id. Only a message that was stored is reported as not replicated.
pub(crate) fn answer(
    transport: &RedisTransport,
    outcome: &Outcome,
    at: usize,
    n: usize,
) -> bus_core::Result<Option<MessageId>> {
    let script = &scripts::SEND_ONCE_BATCH;
    let (reply, not_replicated) = match outcome {
        Ok(reply) => (reply, None),
        Err(error @ WriteError::NotReplicated { written, .. }) => (written, Some(error)),
        Err(error) => return Err(transport.write_error(error.clone())),
    };
    let Value::Array(answers) = reply else {
        return Err(script.unexpected(reply).into());
    };
    if answers.len() != n {
        return Err(script.unexpected(reply).into());
    }
    match &answers[at] {
        Value::Integer(_) => match not_replicated {
            Some(error) => Err(transport.write_error(error.clone())),
            None => Ok(None),
        },
        other => match other.as_string() {
            Some(first) => Ok(Some(MessageId::from(first))),
            None => Err(script.unexpected(other).into()),
        },
    }
}

#[async_trait]
impl Deduplicated for RedisTransport {
    async fn send_deduplicated(
        &self,
        queue: &str,
        message: Outgoing,
        dedup: Deduplication<'_>,
    ) -> bus_core::Result<Option<MessageId>> {
        send(self, queue, message, dedup).await
    }

    async fn send_deduplicated_batch(
        &self,
        queue: &str,
        messages: Vec<(Outgoing, Deduplication<'_>)>,
    ) -> bus_core::Result<Vec<Option<MessageId>>> {
        send_batch(self, queue, messages).await
    }
}
