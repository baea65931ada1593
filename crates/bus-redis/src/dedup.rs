//! Deduplication at send: `send_once.lua` checks the queue's deduplication key, sets it
//! and stores the message in one step (docs/redis-layout.md, "Deduplication"). It is a
//! script call of its own, so it does not join the coalesced `RPUSH` of plain sends. With
//! a partition key the script also takes the per-key ordering keys (protocol 4): on an
//! ordered queue the message joins its key's order, as a keyed send does.
//! `send_once_batch.lua` does the same for many messages in one call: a batch is grouped
//! by partition and by its messages' window, due time and partition key, one call per
//! group (at most [`BATCH_MAX`] messages each).

use std::time::Duration;

use bus_core::transport::{Deduplication, Outgoing};
use bus_core::MessageId;
use fred::types::Value;

use crate::scripts;
use crate::transport::{epoch_ms, RedisTransport, Written};

/// Stores `message` unless `dedup.key` is held in its queue (on a partitioned queue: in
/// the partition the partition key, else the deduplication key, picks); returns the
/// first message's id when it is.
pub(crate) async fn send(
    transport: &RedisTransport,
    queue: &str,
    message: Outgoing,
    dedup: Deduplication<'_>,
) -> bus_core::Result<Option<MessageId>> {
    let keys = transport
        .keys_for_send(queue, Some(dedup.partition.unwrap_or(dedup.key)))
        .await?;
    let window = i64::try_from(dedup.window.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    let due = dedup
        .due
        .map_or_else(String::new, |due| epoch_ms(due).to_string());
    let mut args = vec![
        Value::from(window),
        Value::from(due),
        Value::from(message.id.as_str()),
        Value::Bytes(message.payload),
    ];
    let mut script_keys = vec![keys.dedup(dedup.key), keys.ready, keys.delayed, keys.msgs];
    if let Some(key) = dedup.partition {
        if key.is_empty() {
            return Err(bus_core::Error::Config(format!(
                "sending to {queue} with an empty key: a key must have at least one character"
            )));
        }
        args.push(Value::from(key));
        script_keys.extend([keys.flow, keys.kready, keys.kbusy, keys.kq, keys.kdue]);
    }
    let (reply, not_replicated) = match transport
        .write_reply(&scripts::SEND_ONCE, script_keys, args)
        .await?
    {
        Written::Done(reply) => (reply, None),
        Written::NotReplicated(reply, error) => (reply, Some(error)),
    };
    let first = match &reply {
        Value::Integer(_) => None,
        other => match other.as_string() {
            Some(first) => Some(MessageId::from(first)),
            None => return Err(scripts::SEND_ONCE.unexpected(other).into()),
        },
    };
    match (first, not_replicated) {
        // Only a write that stored something is reported as not replicated.
        (None, Some(error)) => Err(error),
        (first, _) => Ok(first),
    }
}

/// At most this many messages go in one `send_once_batch` call (its KEYS and ARGV grow
/// with it, and the script runs alone on the server).
pub(crate) const BATCH_MAX: usize = 1_000;

/// What the messages of one `send_once_batch` call share.
#[derive(PartialEq)]
struct Group<'a> {
    ready: String,
    window: Duration,
    due: Option<std::time::SystemTime>,
    partition: Option<&'a str>,
}

/// Stores each message unless its deduplication key is held (or taken by an earlier
/// message of the batch); returns per message, in order, the first message's id when it
/// is. One script call per partition and per window, due time and partition key.
pub(crate) async fn send_batch(
    transport: &RedisTransport,
    queue: &str,
    messages: Vec<(Outgoing, Deduplication<'_>)>,
) -> bus_core::Result<Vec<Option<MessageId>>> {
    if messages.iter().any(|(_, d)| d.partition == Some("")) {
        return Err(bus_core::Error::Config(format!(
            "sending to {queue} with an empty key: a key must have at least one character"
        )));
    }
    // Groups in the order first seen, each with its messages' places in the batch.
    let mut groups: Vec<(Group<'_>, crate::keys::QueueKeys, Vec<usize>)> = Vec::new();
    let mut firsts = vec![None; messages.len()];
    let mut slots: Vec<Option<(Outgoing, &str)>> = Vec::with_capacity(messages.len());
    for (i, (message, dedup)) in messages.into_iter().enumerate() {
        let keys = transport
            .keys_for_send(queue, Some(dedup.partition.unwrap_or(dedup.key)))
            .await?;
        let group = Group {
            ready: keys.ready.clone(),
            window: dedup.window,
            due: dedup.due,
            partition: dedup.partition,
        };
        match groups.iter_mut().find(|(g, _, _)| *g == group) {
            Some((_, _, places)) => places.push(i),
            None => groups.push((group, keys, vec![i])),
        }
        slots.push(Some((message, dedup.key)));
    }
    for (group, keys, places) in groups {
        for chunk in places.chunks(BATCH_MAX) {
            let batch: Vec<(Outgoing, &str)> =
                chunk.iter().filter_map(|&i| slots[i].take()).collect();
            let answers = send_group(transport, &group, &keys, batch).await?;
            for (&i, first) in chunk.iter().zip(answers) {
                firsts[i] = first;
            }
        }
    }
    Ok(firsts)
}

/// One `send_once_batch` call: KEYS ready, delayed, msgs [, flow, kready, kbusy, kq,
/// kdue], one dedup key per message; ARGV n, window, due, key, then id, envelope pairs.
async fn send_group(
    transport: &RedisTransport,
    group: &Group<'_>,
    keys: &crate::keys::QueueKeys,
    batch: Vec<(Outgoing, &str)>,
) -> bus_core::Result<Vec<Option<MessageId>>> {
    let script = &scripts::SEND_ONCE_BATCH;
    let n = batch.len();
    let window = i64::try_from(group.window.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    let due = group
        .due
        .map_or_else(String::new, |due| epoch_ms(due).to_string());
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
        Value::from(n as i64),
        Value::from(window),
        Value::from(due),
        Value::from(group.partition.unwrap_or("")),
    ]);
    for (message, key) in batch {
        script_keys.push(keys.dedup(key));
        args.push(Value::from(message.id.as_str()));
        args.push(Value::Bytes(message.payload));
    }
    let (reply, not_replicated) = match transport.write_reply(script, script_keys, args).await? {
        Written::Done(reply) => (reply, None),
        Written::NotReplicated(reply, error) => (reply, Some(error)),
    };
    let answers = script.array(reply)?;
    if answers.len() != n {
        return Err(script.unexpected(&Value::Array(answers)).into());
    }
    let mut stored = false;
    let mut firsts = Vec::with_capacity(n);
    for answer in answers {
        match answer {
            Value::Integer(_) => {
                stored = true;
                firsts.push(None);
            }
            other => match other.as_string() {
                Some(first) => firsts.push(Some(MessageId::from(first))),
                None => return Err(script.unexpected(&other).into()),
            },
        }
    }
    match not_replicated {
        // Only a write that stored something is reported as not replicated.
        Some(error) if stored => Err(error),
        _ => Ok(firsts),
    }
}
