//! Request/reply on Redis (docs/redis-layout.md, "Request and reply"): a requester's
//! inbox is a list it reads with `LRANGE` then `LTRIM`, waiting with `BLMOVE` on a
//! connection of its own; a responder pushes its reply with `reply.lua` (the push and the
//! list's expiry in one step).

use std::time::Duration;

use async_trait::async_trait;
use bus_core::ReplyInbox;
use bytes::Bytes;
use fred::prelude::{Client, ClientLike, KeysInterface, ListInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
use fred::util::redis_keyslot;

use crate::{keys, scripts, Error, RedisTransport};

/// Most replies one read takes.
const TAKE: i64 = 100;

/// Pushes `element` onto the inbox `inbox`, which then expires `keep` after this push.
pub(crate) async fn push(
    transport: &RedisTransport,
    inbox: &str,
    element: Bytes,
    keep: Duration,
) -> bus_core::Result<()> {
    bus_core::transport::validate_name("reply inbox", inbox)?;
    let key = keys::reply_inbox(transport.prefix(), inbox);
    let keep_ms = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX).max(1);
    scripts::REPLY
        .run_int(
            transport.client(),
            vec![key],
            vec![Value::Bytes(element), Value::from(keep_ms)],
        )
        .await?;
    Ok(())
}

/// The inbox `name` under the transport's prefix, waiting on a connection of its own.
pub(crate) async fn open(
    transport: &RedisTransport,
    name: &str,
) -> bus_core::Result<Box<dyn ReplyInbox>> {
    bus_core::transport::validate_name("reply inbox", name)?;
    let name = name.to_owned();
    let key = keys::reply_inbox(transport.prefix(), &name);
    // A blocking wait stalls its connection: the inbox has one of its own.
    let waiter = transport.config().connect_client().await?;
    Ok(Box::new(RedisInbox {
        slot: redis_keyslot(key.as_bytes()),
        name,
        key,
        client: transport.client().clone(),
        waiter,
    }))
}

#[derive(Debug)]
struct RedisInbox {
    name: String,
    key: String,
    slot: u16,
    client: Client,
    waiter: Client,
}

impl RedisInbox {
    /// Reads the first replies, then trims what was read: a reply is removed only after
    /// it was read, so a connection lost between the two leaves it to be read again (and
    /// dropped then as a reply already taken), never lost.
    async fn take(&self) -> bus_core::Result<Vec<Bytes>> {
        let replies: Vec<Bytes> = self
            .waiter
            .lrange(&self.key, 0, TAKE - 1)
            .await
            .map_err(Error::from)?;
        if !replies.is_empty() {
            let trimmed: Result<(), _> =
                self.waiter.ltrim(&self.key, replies.len() as i64, -1).await;
            if let Err(e) = trimmed {
                tracing::debug!(error = %e, "trimming read replies failed; they are read again and dropped");
            }
        }
        Ok(replies)
    }

    /// Blocks until the inbox holds a reply or `wait` passes: `BLMOVE i i LEFT LEFT`
    /// rotates the list onto itself, so it changes nothing and only wakes us. Whether a
    /// reply came.
    async fn wait_for_one(&self, wait: Duration) -> bus_core::Result<bool> {
        let timeout = format!("{:.3}", wait.as_secs_f64());
        let args: Vec<Value> = vec![
            self.key.as_str().into(),
            self.key.as_str().into(),
            "LEFT".into(),
            "LEFT".into(),
            timeout.into(),
        ];
        let command = CustomCommand::new("BLMOVE", ClusterHash::Custom(self.slot), true);
        let moved: Value = self
            .waiter
            .custom(command, args)
            .await
            .map_err(Error::from)?;
        Ok(!moved.is_null())
    }
}

#[async_trait]
impl ReplyInbox for RedisInbox {
    fn name(&self) -> &str {
        &self.name
    }

    async fn receive(&self, wait: Duration) -> bus_core::Result<Vec<Bytes>> {
        let replies = self.take().await?;
        if !replies.is_empty() || !self.wait_for_one(wait).await? {
            return Ok(replies);
        }
        self.take().await
    }

    async fn close(&self) -> bus_core::Result<()> {
        // The waiter first: a wait still pending on it ends within its bound, and a reply
        // it takes is then gone with the bus; what came after goes with the `DEL`.
        let _ = self.waiter.quit().await;
        let _: i64 = self.client.del(&self.key).await.map_err(Error::from)?;
        Ok(())
    }
}
