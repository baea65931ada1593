//! [`RedisSagaStore`]: the [`SagaStore`] on Redis.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{Error, Result, SagaStore, Stamp};
use bytes::Bytes;
use fred::prelude::{Client, ClientLike, HashesInterface, KeysInterface};
use fred::types::scan::Scanner;
use fred::types::Value;
use futures::TryStreamExt;

use crate::keys;
use crate::scripts::{self, run, Reply};

/// Keys asked for per SCAN call.
const SCAN_COUNT: u32 = 1000;
/// The longest expiry passed to Redis (about 146 million years); longer means the same.
const MAX_TTL_MS: u64 = 1 << 62;

/// Sagas in Redis: one hash per saga at `[<prefix>:]sagas:<partition>:<id>` with the
/// fields `data` (the state) and `stamp`. Create, update, complete and delete are each
/// one single-key Lua script that checks and writes in one step, so the store works on
/// Redis Cluster. A key at a saga's name that is not such a hash fails with
/// [`Error::NotASaga`] and is left alone. See `docs/sagas.md`.
///
/// The store takes a connected fred [`Client`] (give it a reconnect policy); clones share
/// the connection.
///
/// ```no_run
/// use fred::prelude::{Builder, ClientLike, Config};
/// use bus_redis_saga::RedisSagaStore;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Builder::from_config(Config::from_url("redis://127.0.0.1:6379")?).build()?;
/// client.init().await?;
/// let store = RedisSagaStore::new(client).prefix("shop");
/// // Host::builder().saga_store(store)...
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisSagaStore {
    client: Client,
    prefix: String,
}

/// One saga key found by [`RedisSagaStore::scan`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SagaKey {
    key: String,
    partition_len: usize,
    id_start: usize,
}

impl SagaKey {
    /// The whole Redis key.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The saga's partition key.
    pub fn partition(&self) -> &str {
        &self.key[self.id_start - 1 - self.partition_len..self.id_start - 1]
    }
    /// The saga's id.
    pub fn id(&self) -> &str {
        &self.key[self.id_start..]
    }
}

impl RedisSagaStore {
    /// A store over a connected client, under the transport's default key prefix
    /// ([`bus_redis::keys::DEFAULT_PREFIX`], `bus`): sagas live at
    /// `bus:sagas:<partition>:<id>`, as with [`RedisSagaStore::for_transport`] on a
    /// transport with the default prefix. (Before, this default was no prefix at all:
    /// docs/sagas.md, "Key prefix", says how to find and move such sagas.)
    pub fn new(client: Client) -> Self {
        RedisSagaStore {
            client,
            prefix: bus_redis::keys::DEFAULT_PREFIX.to_owned(),
        }
    }

    /// A store on a transport's connection and under its key prefix, so one
    /// application's sagas live beside its queues: `<prefix>:sagas:<partition>:<id>`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use bus_redis::{RedisConfig, RedisTransport};
    /// use bus_redis_saga::RedisSagaStore;
    ///
    /// let transport = RedisTransport::connect(&RedisConfig::from_url("redis://127.0.0.1")?).await?;
    /// let sagas = RedisSagaStore::for_transport(&transport);
    /// let host = bus_core::Host::builder().transport(transport).saga_store(sagas);
    /// # Ok(()) }
    /// ```
    pub fn for_transport(transport: &bus_redis::RedisTransport) -> Self {
        RedisSagaStore::new(transport.client().clone()).prefix(transport.config().key_prefix())
    }

    /// A key prefix (namespace): sagas live at `<prefix>:sagas:<partition>:<id>`, or at
    /// `sagas:<partition>:<id>` with an empty prefix. Use the transport's prefix (the
    /// default) to keep one application's keys together.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The Redis key of a saga.
    pub fn key(&self, partition: &str, id: &str) -> String {
        keys::saga(&self.prefix, partition, id)
    }

    /// The key prefix in use.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// The sagas [`RedisSagaStore::scan`] finds, each with its time to live in ms
    /// (`None`: no expiry). Only saga hashes are listed: another key at a saga's name (a
    /// string from an older layout, say) is not a saga, and `delete` would refuse it.
    pub async fn list(&self, partition: Option<&str>) -> Result<Vec<(SagaKey, Option<u64>)>> {
        let mut out = Vec::new();
        for saga in self.scan(partition).await? {
            let (kind, ttl) = tokio::try_join!(
                self.client.r#type::<String, _>(saga.key()),
                self.client.pttl::<i64, _>(saga.key()),
            )
            .map_err(redis)?;
            if kind == "hash" {
                out.push((saga, u64::try_from(ttl).ok()));
            }
        }
        Ok(out)
    }

    /// A saga's time to live in ms; `None` if it has no expiry or is gone.
    pub async fn ttl_ms(&self, partition: &str, id: &str) -> Result<Option<u64>> {
        let ttl: i64 = self
            .client
            .pttl(self.key(partition, id))
            .await
            .map_err(redis)?;
        Ok(u64::try_from(ttl).ok())
    }

    /// Whether anything is at a saga's key.
    pub async fn exists(&self, partition: &str, id: &str) -> Result<bool> {
        let found: i64 = self
            .client
            .exists(self.key(partition, id))
            .await
            .map_err(redis)?;
        Ok(found > 0)
    }

    /// Every saga key of `partition` (or of all partitions), found with `SCAN ... COUNT
    /// 1000`, never `KEYS`, so Redis is never blocked; on a cluster every master is
    /// scanned. Keys that change during the scan may be missed or reported twice (SCAN's
    /// guarantee); the result is sorted and deduplicated.
    pub async fn scan(&self, partition: Option<&str>) -> Result<Vec<SagaKey>> {
        let pattern = keys::pattern(&self.prefix, partition);
        let mut found = Vec::new();
        if self.client.is_clustered() {
            let pages = self.client.scan_cluster(pattern, Some(SCAN_COUNT), None);
            self.collect(pages, &mut found).await?;
        } else {
            let pages = self.client.scan(pattern, Some(SCAN_COUNT), None);
            self.collect(pages, &mut found).await?;
        }
        found.sort();
        found.dedup();
        Ok(found)
    }

    async fn collect(
        &self,
        pages: impl futures::Stream<Item = Result<fred::types::scan::ScanResult, fred::error::Error>>,
        found: &mut Vec<SagaKey>,
    ) -> Result<()> {
        futures::pin_mut!(pages);
        while let Some(mut page) = pages.try_next().await.map_err(redis)? {
            for key in page.take_results().unwrap_or_default() {
                let Some(key) = key.into_string() else {
                    continue;
                };
                if let Some(parsed) = self.saga_key(key) {
                    found.push(parsed);
                }
            }
            page.next();
        }
        Ok(())
    }

    fn saga_key(&self, key: String) -> Option<SagaKey> {
        let (partition, id) = keys::parse(&self.prefix, &key)?;
        let (partition_len, id_start) = (partition.len(), key.len() - id.len());
        Some(SagaKey {
            key,
            partition_len,
            id_start,
        })
    }

    /// The slow, exact read: tells a missing saga from something else at its key.
    async fn get_checked(&self, key: &str) -> Result<(Bytes, Stamp)> {
        let script = &scripts::GET;
        match run(script, &self.client, key, vec![]).await? {
            Reply::Ok(values) => {
                let reply = Value::Array(values.clone());
                let mut values = values.into_iter();
                match (values.next().and_then(Value::into_bytes), values.next()) {
                    (Some(data), Some(stamp)) => match stamp.as_str() {
                        Some(stamp) => Ok((data, Stamp::new(stamp.into_owned()))),
                        None => Err(script.unexpected(&reply).into()),
                    },
                    _ => Err(script.unexpected(&reply).into()),
                }
            }
            other => Err(other.into_error(key, script)),
        }
    }
}

/// A Redis failure as every crate of the bus reports it: through bus-redis's error (a
/// timeout is an unknown outcome, anything else a transport error holding
/// [`bus_redis::RedisError`]).
fn redis(error: fred::error::Error) -> Error {
    bus_redis::Error::from(error).into()
}

fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, MAX_TTL_MS)
}

#[async_trait]
impl SagaStore for RedisSagaStore {
    async fn create(&self, partition: &str, id: &str, data: Bytes, ttl: Duration) -> Result<Stamp> {
        let key = self.key(partition, id);
        let stamp = Stamp::generate();
        let args = vec![
            Value::Bytes(data),
            Value::from(stamp.as_str()),
            Value::from(ttl_millis(ttl).to_string()),
        ];
        match run(&scripts::CREATE, &self.client, &key, args).await? {
            Reply::Ok(_) => Ok(stamp),
            other => Err(other.into_error(&key, &scripts::CREATE)),
        }
    }

    async fn get(&self, partition: &str, id: &str) -> Result<(Bytes, Stamp)> {
        let key = self.key(partition, id);
        // The fast path: one HMGET. Anything but both fields (nothing there, another
        // type, a foreign hash) goes to the exact script.
        let fields: Result<Value, _> = self.client.hmget(&key, vec!["data", "stamp"]).await;
        match fields {
            Ok(Value::Array(values)) => {
                let mut values = values.into_iter();
                if let (Some(data), Some(stamp)) = (values.next(), values.next()) {
                    if let (Some(data), Some(stamp)) = (data.into_bytes(), stamp.as_str()) {
                        return Ok((data, Stamp::new(stamp.into_owned())));
                    }
                }
            }
            Ok(_) => {}
            Err(e) if e.details().starts_with("WRONGTYPE") => {}
            Err(e) => return Err(redis(e)),
        }
        self.get_checked(&key).await
    }

    async fn update(
        &self,
        partition: &str,
        id: &str,
        data: Bytes,
        expected: &Stamp,
    ) -> Result<Stamp> {
        let key = self.key(partition, id);
        let stamp = Stamp::generate();
        let args = vec![
            Value::Bytes(data),
            Value::from(expected.as_str()),
            Value::from(stamp.as_str()),
        ];
        match run(&scripts::UPDATE, &self.client, &key, args).await? {
            Reply::Ok(_) => Ok(stamp),
            other => Err(other.into_error(&key, &scripts::UPDATE)),
        }
    }

    async fn complete(&self, partition: &str, id: &str, expected: &Stamp) -> Result<()> {
        let key = self.key(partition, id);
        let args = vec![Value::from(expected.as_str())];
        match run(&scripts::COMPLETE, &self.client, &key, args).await? {
            Reply::Ok(_) => Ok(()),
            other => Err(other.into_error(&key, &scripts::COMPLETE)),
        }
    }

    async fn delete(&self, partition: &str, id: &str) -> Result<()> {
        let key = self.key(partition, id);
        match run(&scripts::DELETE, &self.client, &key, vec![]).await? {
            Reply::Ok(_) => Ok(()),
            other => Err(other.into_error(&key, &scripts::DELETE)),
        }
    }
}

impl fmt::Debug for RedisSagaStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSagaStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_are_whole_milliseconds_within_what_redis_accepts() {
        assert_eq!(ttl_millis(Duration::ZERO), 1);
        assert_eq!(ttl_millis(Duration::from_micros(1500)), 1);
        assert_eq!(ttl_millis(Duration::from_secs(2)), 2000);
        assert_eq!(ttl_millis(Duration::MAX), MAX_TTL_MS);
    }
}
