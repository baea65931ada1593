//! Deduplication at send: `send_once.lua` checks the queue's deduplication key, sets it
//! and stores the message in one step (docs/redis-layout.md, "Deduplication"). It is a
//! script call of its own, so it does not join the coalesced `RPUSH` of plain sends. With
//! a partition key the script also takes the per-key ordering keys (protocol 4): on an
//! ordered queue the message joins its key's order, as a keyed send does.

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
