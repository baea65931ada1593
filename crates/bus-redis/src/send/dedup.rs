//! Deduplication at send: `send_once_batch.lua` checks each message's deduplication key,
//! sets it and stores the message in one step per message, for any number of messages of
//! one queue or partition in one call (docs/redis-layout.md, "Deduplication"). A batch
//! ([`send_batch`]) is grouped by partition and by its messages' window, due time and
//! partition key, one call per group of at most [`BATCH_MAX`]. Concurrent single sends
//! of one group share a call (`write/once.rs`), as plain sends share an `RPUSH`. With a
//! partition key the script also takes the per-key ordering keys: on an
//! ordered queue the messages join their key's order, as a keyed send's do.
//! (`send_once.lua`, the single form, stays for foreign producers.)

use bus_core::transport::{Deduplication, Outgoing};
use bus_core::MessageId;

use crate::keys::QueueKeys;
use crate::transport::RedisTransport;
use crate::write::epoch_ms;
use crate::write::once::{self, Group, BATCH_MAX};
use async_trait::async_trait;
use bus_core::transport::Deduplicated;

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
        .writer()
        .keys_for_send(queue, Some(dedup.partition.unwrap_or(dedup.key)))
        .await?;
    let group = Group {
        ready: keys.ready.clone(),
        window_ms: i64::try_from(dedup.window.as_millis())
            .unwrap_or(i64::MAX)
            .max(1),
        due: dedup
            .due
            .map_or_else(String::new, |due| epoch_ms(due).to_string()),
        partition: dedup.partition.map(str::to_owned),
    };
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
        .writer()
        .send_once(group, keys, message, dedup.key.to_owned())
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
            let conn = transport.writer().connection();
            let outcome = once::call(conn, &group, &keys, batch).await;
            for (at, &i) in chunk.iter().enumerate() {
                firsts[i] = once::answer(conn, &outcome, at, chunk.len())?;
            }
        }
    }
    Ok(firsts)
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
