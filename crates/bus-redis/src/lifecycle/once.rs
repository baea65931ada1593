//! Step marks on Redis (docs/redis-layout.md, "Step marks"): one string per step of a
//! message, read with `GET` and written with `SET NX PX GET`, one command each.

use std::time::Duration;

use bus_core::transport::Source;
use bus_core::MessageId;
use bytes::Bytes;
use fred::prelude::KeysInterface;
use fred::types::{Expiration, SetOptions, Value};

use crate::{keys, Error, RedisTransport};

/// The result stored for step `step` of message `id`, if a delivery completed it.
pub(crate) async fn mark(
    transport: &RedisTransport,
    source: &Source,
    id: &MessageId,
    step: &str,
) -> bus_core::Result<Option<Bytes>> {
    let key = keys::step_mark(transport.prefix(), source, id.as_str(), step);
    let stored: Option<Bytes> = transport.client().get(key).await.map_err(Error::from)?;
    Ok(stored)
}

/// Marks the step done with `result` for `keep`, unless marked: then returns that mark.
pub(crate) async fn set(
    transport: &RedisTransport,
    source: &Source,
    id: &MessageId,
    step: &str,
    result: Bytes,
    keep: Duration,
) -> bus_core::Result<Option<Bytes>> {
    let key = keys::step_mark(transport.prefix(), source, id.as_str(), step);
    let keep_ms = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX).max(1);
    let earlier: Option<Bytes> = transport
        .client()
        .set(
            key,
            Value::Bytes(result),
            Some(Expiration::PX(keep_ms)),
            Some(SetOptions::NX),
            true,
        )
        .await
        .map_err(Error::from)?;
    Ok(earlier)
}
