//! The Redis provider: an attachment is a list of chunks and a meta hash under the
//! scope's hash tag, both with a TTL (docs/wire-format.md, "Attachments").

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use bus_redis::{lua, LuaScript};
use bytes::{Bytes, BytesMut};
use fred::prelude::{Client, HashesInterface, KeysInterface, ListInterface};
use fred::types::Value;
use futures::StreamExt;

use crate::{keys, AttachmentMeta, AttachmentProvider, AttachmentRef, BodyStream, ByteStream};
use crate::{Error, Result};

static PUT_CHUNK: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "put_chunk",
        keys = ["data"],
        argv = ["chunk", "index:int", "ttl_ms:int"],
    )
});
static SEAL: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "seal",
        keys = ["meta", "data"],
        argv = ["ttl_ms:int", "chunks:int", "fields..."],
    )
});
static TOUCH: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "touch",
        keys = ["meta", "data", "refs..."],
        argv = ["ttl_ms:int"],
    )
});
static SHARE: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("share", keys = ["refs", "meta"], argv = [],));
static HOLD: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "hold",
        keys = ["refs", "meta", "data"],
        argv = ["op", "change:int", "token"],
    )
});

/// Every script of this crate's `lua/`, for the test that checks them all. Not an API.
#[doc(hidden)]
pub fn catalog() -> Vec<&'static LuaScript> {
    vec![&PUT_CHUNK, &SEAL, &TOUCH, &SHARE, &HOLD]
}

/// The prelude files of `lua/` (no script of their own).
#[doc(hidden)]
pub const PRELUDES: [&str; 0] = [];

/// Attachments in Redis, written and read one chunk at a time, so neither side holds more
/// than a chunk (plus the sender's own read buffer) of a large file.
#[derive(Debug, Clone)]
pub struct RedisProvider {
    client: Client,
    prefix: String,
    chunk_size: usize,
    max_size: u64,
    ttl: Duration,
    compress: bool,
}

/// The meta hash's `encoding` of a body stored as one DEFLATE stream per chunk.
const DEFLATE: &str = "deflate";

impl RedisProvider {
    /// Default chunk size: 256 KiB.
    pub const DEFAULT_CHUNK_SIZE: usize = 256 * 1024;
    /// Default size limit: 100 MiB.
    pub const DEFAULT_MAX_SIZE: u64 = 100 * 1024 * 1024;
    /// Default expiry: 14 days, longer than any retry schedule; a dead letter kept longer
    /// needs a longer TTL (or `touch`).
    pub const DEFAULT_TTL: Duration = Duration::from_secs(14 * 24 * 3600);

    /// On `client` (e.g. `RedisConfig::connect_client`), under the transport's `prefix`.
    pub fn new(client: Client, prefix: impl Into<String>) -> Self {
        RedisProvider {
            client,
            prefix: prefix.into(),
            chunk_size: Self::DEFAULT_CHUNK_SIZE,
            max_size: Self::DEFAULT_MAX_SIZE,
            ttl: Self::DEFAULT_TTL,
            compress: false,
        }
    }
    /// Compresses each chunk (DEFLATE, one stream per chunk, so both sides still hold one
    /// chunk at a time and a reader can start at any chunk); off by default. The size
    /// limit and the reference's `length` count the uncompressed bytes. Readers decompress
    /// by the attachment's `encoding`, whatever their own setting.
    pub fn compress(mut self, on: bool) -> Self {
        self.compress = on;
        self
    }
    /// The size of each stored chunk (at least 1 byte).
    pub fn chunk_size(mut self, bytes: usize) -> Self {
        self.chunk_size = bytes.max(1);
        self
    }
    /// The largest attachment stored; a larger one is refused and nothing of it kept.
    pub fn max_size(mut self, bytes: u64) -> Self {
        self.max_size = bytes;
        self
    }
    /// Every attachment's expiry, from when it is stored.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    fn ttl_ms(ttl: Duration) -> Value {
        Value::Integer(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1))
    }

    /// The reference of the complete attachment `id` of `scope`, read back from its meta
    /// hash (what the dashboard's download needs); `None` when it is not (or no longer)
    /// stored here.
    pub async fn stat(&self, scope: &str, id: &str) -> Result<Option<AttachmentRef>> {
        let meta: HashMap<String, String> = self
            .client
            .hgetall(keys::meta(&self.prefix, scope, id))
            .await?;
        if meta.is_empty() {
            return Ok(None);
        }
        let field = |name: &str| meta.get(name).cloned().unwrap_or_default();
        let corrupt = |reason: &str| Error::Corrupt {
            id: id.to_owned(),
            reason: reason.to_owned(),
        };
        Ok(Some(AttachmentRef {
            id: id.to_owned(),
            scope: scope.to_owned(),
            name: field("name"),
            content_type: field("content_type"),
            length: field("length").parse().map_err(|_| corrupt("no length"))?,
            metadata: serde_json::from_str(&field("metadata")).unwrap_or_default(),
        }))
    }

    /// Meta, data and refs: every key of an attachment.
    fn keys_of(&self, attachment: &AttachmentRef) -> [String; 3] {
        let (scope, id) = (&attachment.scope, &attachment.id);
        [
            keys::meta(&self.prefix, scope, id),
            keys::data(&self.prefix, scope, id),
            keys::refs(&self.prefix, scope, id),
        ]
    }

    /// Runs hold.lua (`kind`: release or handover): `change` holders, once per `token`;
    /// whether it deleted.
    async fn hold(
        &self,
        attachment: &AttachmentRef,
        kind: &str,
        change: i64,
        token: &str,
    ) -> Result<bool> {
        let [meta, data, refs] = self.keys_of(attachment);
        let deleted: i64 = HOLD
            .run(
                &self.client,
                vec![refs, meta, data],
                vec![kind.into(), Value::Integer(change), token.into()],
            )
            .await?
            .convert()?;
        Ok(deleted == 1)
    }

    async fn put_chunk(&self, data: &str, index: u64, chunk: Bytes) -> Result<()> {
        PUT_CHUNK
            .run(
                &self.client,
                vec![data.to_owned()],
                vec![
                    Value::Bytes(chunk),
                    Value::Integer(index as i64),
                    Self::ttl_ms(self.ttl),
                ],
            )
            .await?;
        Ok(())
    }

    /// A chunk as stored: compressed when the provider compresses.
    fn encode(&self, chunk: Bytes) -> Result<Bytes> {
        if !self.compress {
            return Ok(chunk);
        }
        let mut encoder = flate2::write::DeflateEncoder::new(
            Vec::with_capacity(chunk.len() / 2),
            flate2::Compression::fast(),
        );
        encoder.write_all(&chunk).map_err(Error::Body)?;
        Ok(encoder.finish().map_err(Error::Body)?.into())
    }

    /// Writes the chunks and returns their count and total length.
    async fn write(
        &self,
        data: &str,
        declared: Option<u64>,
        mut body: BodyStream,
    ) -> Result<(u64, u64)> {
        let mut pending = BytesMut::new();
        let (mut chunks, mut total) = (0u64, 0u64);
        while let Some(piece) = body.next().await {
            let piece = piece.map_err(Error::Body)?;
            total += piece.len() as u64;
            if total > self.max_size {
                return Err(Error::TooLarge {
                    size: total,
                    max: self.max_size,
                });
            }
            if declared.is_some_and(|declared| total > declared) {
                return Err(Error::LengthMismatch {
                    declared: declared.unwrap_or(0),
                    actual: total,
                });
            }
            pending.extend_from_slice(&piece);
            while pending.len() >= self.chunk_size {
                let chunk = pending.split_to(self.chunk_size).freeze();
                self.put_chunk(data, chunks, self.encode(chunk)?).await?;
                chunks += 1;
            }
        }
        if !pending.is_empty() {
            self.put_chunk(data, chunks, self.encode(pending.freeze())?)
                .await?;
            chunks += 1;
        }
        if let Some(declared) = declared.filter(|&declared| declared != total) {
            return Err(Error::LengthMismatch {
                declared,
                actual: total,
            });
        }
        Ok((chunks, total))
    }
}

#[async_trait]
impl AttachmentProvider for RedisProvider {
    async fn put(
        &self,
        scope: &str,
        meta: AttachmentMeta,
        body: BodyStream,
    ) -> Result<AttachmentRef> {
        if let Some(size) = meta.length.filter(|&length| length > self.max_size) {
            return Err(Error::TooLarge {
                size,
                max: self.max_size,
            });
        }
        let id = ulid::Ulid::new().to_string();
        let data = keys::data(&self.prefix, scope, &id);
        let (chunks, length) = match self.write(&data, meta.length, body).await {
            Ok(written) => written,
            Err(error) => {
                // What was written expires anyway; delete it now if Redis lets us.
                let _: Result<i64, _> = self.client.del(&data).await;
                return Err(error);
            }
        };
        let attachment = AttachmentRef {
            id,
            scope: scope.to_owned(),
            name: meta.name,
            content_type: meta.content_type,
            length,
            metadata: meta.metadata,
        };
        let metadata = serde_json::to_string(&attachment.metadata).unwrap_or_default();
        let mut args = vec![Self::ttl_ms(self.ttl), Value::Integer(chunks as i64)];
        for (field, value) in [
            ("name", attachment.name.clone()),
            ("content_type", attachment.content_type.clone()),
            ("length", length.to_string()),
            ("chunks", chunks.to_string()),
            ("metadata", metadata),
        ]
        .into_iter()
        .chain(self.compress.then(|| ("encoding", DEFLATE.to_owned())))
        {
            args.push(field.into());
            args.push(value.into());
        }
        let meta_key = keys::meta(&self.prefix, scope, &attachment.id);
        if let Err(error) = SEAL
            .run(&self.client, vec![meta_key, data.clone()], args)
            .await
        {
            let _: Result<i64, _> = self.client.del(&data).await;
            return Err(error.into());
        }
        Ok(attachment)
    }

    async fn open(&self, attachment: &AttachmentRef) -> Result<ByteStream> {
        let id = attachment.id.clone();
        let meta: HashMap<String, String> = self
            .client
            .hgetall(keys::meta(&self.prefix, &attachment.scope, &id))
            .await?;
        if meta.is_empty() {
            return Err(Error::NotFound { id });
        }
        let chunks: u64 = meta
            .get("chunks")
            .and_then(|chunks| chunks.parse().ok())
            .ok_or_else(|| Error::Corrupt {
                id: id.clone(),
                reason: "no chunk count".into(),
            })?;
        let deflated = match meta.get("encoding").map(String::as_str) {
            None => false,
            Some(DEFLATE) => true,
            Some(other) => {
                return Err(Error::Corrupt {
                    id,
                    reason: format!("unknown encoding {other:?}"),
                })
            }
        };
        let length: u64 = meta
            .get("length")
            .and_then(|length| length.parse().ok())
            .unwrap_or(attachment.length);
        let client = self.client.clone();
        let data = keys::data(&self.prefix, &attachment.scope, &id);
        // One chunk per read: LRANGE i i; `seen` bounds what a compressed chunk may
        // inflate to (the length left), so a corrupt one cannot fill the memory.
        let body = futures::stream::try_unfold((0u64, 0u64), move |(index, seen)| {
            let (client, data, id) = (client.clone(), data.clone(), id.clone());
            async move {
                if index == chunks {
                    return Ok(None);
                }
                let at = index as i64;
                let mut got: Vec<Bytes> = client.lrange(&data, at, at).await?;
                let Some(chunk) = got.pop() else {
                    return Err(Error::NotFound { id });
                };
                let chunk = if deflated {
                    inflate(&chunk, length.saturating_sub(seen), &id)?
                } else {
                    chunk
                };
                let seen = seen + chunk.len() as u64;
                Ok(Some((chunk, (index + 1, seen))))
            }
        });
        Ok(body.boxed())
    }

    async fn delete(&self, attachment: &AttachmentRef) -> Result<bool> {
        let [meta, data, refs] = self.keys_of(attachment);
        let removed: i64 = self.client.del(vec![meta, data]).await?;
        let _: i64 = self.client.del(refs).await?;
        Ok(removed > 0)
    }

    async fn touch(&self, attachment: &AttachmentRef, ttl: Duration) -> Result<bool> {
        let touched: i64 = TOUCH
            .run(
                &self.client,
                self.keys_of(attachment).to_vec(),
                vec![Self::ttl_ms(ttl)],
            )
            .await?
            .convert()?;
        Ok(touched == 1)
    }

    async fn share(&self, attachment: &AttachmentRef) -> Result<bool> {
        let [meta, _, refs] = self.keys_of(attachment);
        let shared: i64 = SHARE
            .run(&self.client, vec![refs, meta], vec![])
            .await?
            .convert()?;
        Ok(shared == 1)
    }

    async fn shared_by(
        &self,
        attachment: &AttachmentRef,
        copies: u64,
        token: &str,
    ) -> Result<bool> {
        let copies = i64::try_from(copies).unwrap_or(i64::MAX);
        self.hold(attachment, "handover", copies, token).await
    }

    async fn release(&self, attachment: &AttachmentRef, token: &str) -> Result<bool> {
        self.hold(attachment, "release", -1, token).await
    }
}

/// One stored chunk inflated, refused past `at_most` bytes.
fn inflate(chunk: &[u8], at_most: u64, id: &str) -> Result<Bytes> {
    let corrupt = |reason: String| Error::Corrupt {
        id: id.to_owned(),
        reason,
    };
    let mut out = Vec::new();
    flate2::read::DeflateDecoder::new(chunk)
        .take(at_most.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| corrupt(format!("a compressed chunk does not inflate: {e}")))?;
    if out.len() as u64 > at_most {
        return Err(corrupt(
            "a chunk inflates past the attachment's length".into(),
        ));
    }
    Ok(out.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bus_test_redis::TestRedis;

    // A client re-sends a script that was in flight when its connection dropped: a chunk
    // written twice must be stored once.
    #[tokio::test]
    async fn a_chunk_written_twice_is_stored_once() {
        let redis = TestRedis::start().unwrap();
        let config = bus_redis::RedisConfig::from_url(&redis.url()).unwrap();
        let provider =
            RedisProvider::new(config.connect_client().await.unwrap(), redis.namespace());
        let data = keys::data(redis.namespace(), "files", "id");
        let chunk = |byte: u8| Bytes::from(vec![byte; 3]);
        provider.put_chunk(&data, 0, chunk(0)).await.unwrap();
        provider.put_chunk(&data, 0, chunk(0)).await.unwrap();
        provider.put_chunk(&data, 1, chunk(1)).await.unwrap();
        provider.put_chunk(&data, 1, chunk(1)).await.unwrap();
        let stored: Vec<Bytes> = provider.client.lrange(&data, 0, -1).await.unwrap();
        assert_eq!(stored, vec![chunk(0), chunk(1)]);
        // A gap (chunks expired under a stalled writer) is an error, not a corrupt body.
        assert!(provider.put_chunk(&data, 3, chunk(3)).await.is_err());
    }
}
