//! Delayed messages by id: read, cancel, reschedule, one script each
//! (`read_scheduled.lua`, `cancel.lua`, `reschedule.lua`; docs/redis-layout.md, "Delayed
//! messages by id"). On a partitioned queue a delayed send went to one shard in turn, so
//! each call looks in every shard, one script per shard, until one has the message.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bus_core::transport::Source;
use bus_core::MessageId;
use fred::types::Value;
use tokio_util::bytes::Bytes;

use crate::keys::QueueKeys;
use crate::scripts;
use crate::transport::RedisTransport;
use crate::write::epoch_ms;
use async_trait::async_trait;
use bus_core::transport::Scheduling;

/// The keys of `queue`, or of each of its shards.
fn queue_keys(transport: &RedisTransport, queue: &str) -> bus_core::Result<Vec<QueueKeys>> {
    Ok(transport.shard_keys(&Source::queue(queue)?))
}

pub(crate) async fn read(
    transport: &RedisTransport,
    queue: &str,
    id: &MessageId,
) -> bus_core::Result<Option<(SystemTime, Bytes)>> {
    let script = &scripts::READ_SCHEDULED;
    for keys in queue_keys(transport, queue)? {
        let args = vec![Value::from(id.as_str())];
        let reply = script
            .run_array(transport.client(), vec![keys.delayed, keys.msgs], args)
            .await?;
        let mut reply = reply.into_iter();
        if let (Some(due), Some(element)) = (reply.next(), reply.next()) {
            let due = u64::try_from(script.int(&due)?).unwrap_or(0);
            let element = script
                .bytes(element)?
                .ok_or_else(|| script.unexpected(&Value::Null))?;
            return Ok(Some((UNIX_EPOCH + Duration::from_millis(due), element)));
        }
    }
    Ok(None)
}

pub(crate) async fn cancel(
    transport: &RedisTransport,
    queue: &str,
    id: &MessageId,
) -> bus_core::Result<bool> {
    for keys in queue_keys(transport, queue)? {
        let script_keys = vec![
            keys.delayed,
            keys.msgs,
            keys.deliveries,
            keys.errors,
            keys.kdue,
        ];
        let args = vec![Value::from(id.as_str())];
        if transport
            .writer()
            .write(&scripts::CANCEL, script_keys, args)
            .await?
            .changed()?
        {
            return Ok(true);
        }
    }
    Ok(false)
}

pub(crate) async fn reschedule(
    transport: &RedisTransport,
    queue: &str,
    id: &MessageId,
    due: SystemTime,
) -> bus_core::Result<bool> {
    for keys in queue_keys(transport, queue)? {
        let args = vec![Value::from(id.as_str()), Value::from(epoch_ms(due))];
        let script_keys = vec![keys.delayed, keys.ready];
        if transport
            .writer()
            .write(&scripts::RESCHEDULE, script_keys, args)
            .await?
            .changed()?
        {
            return Ok(true);
        }
    }
    Ok(false)
}

#[async_trait]
impl Scheduling for RedisTransport {
    async fn scheduled(
        &self,
        queue: &str,
        id: &MessageId,
    ) -> bus_core::Result<Option<(SystemTime, Bytes)>> {
        read(self, queue, id).await
    }

    async fn cancel(&self, queue: &str, id: &MessageId) -> bus_core::Result<bool> {
        cancel(self, queue, id).await
    }

    async fn reschedule(
        &self,
        queue: &str,
        id: &MessageId,
        due: SystemTime,
    ) -> bus_core::Result<bool> {
        reschedule(self, queue, id, due).await
    }
}
