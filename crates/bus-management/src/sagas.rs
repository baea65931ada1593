//! Sagas: list them (`SCAN`, never `KEYS`) and delete them, through the saga store.

use bus_core::SagaStore;
use bus_redis_saga::RedisSagaStore;
use serde::Serialize;

use crate::{Management, Result};

/// A saga found by [`Management::sagas`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SagaEntry {
    /// The saga's partition key (per saga type).
    pub partition: String,
    /// The saga's id.
    pub id: String,
    /// Its Redis key.
    pub key: String,
    /// Time left before it expires, in ms; `None` if it has no expiry (or is gone).
    pub ttl_ms: Option<u64>,
}

/// One saga, as [`Management::saga`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SagaState {
    /// The saga's partition key (per saga type).
    pub partition: String,
    /// The saga's id.
    pub id: String,
    /// Its Redis key.
    pub key: String,
    /// Its serialized state, as the saga's serializer wrote it (JSON by default);
    /// described instead when it is not text (MessagePack).
    pub data: String,
    /// Its concurrency stamp, which changes on every write.
    pub stamp: String,
    /// Time left before it expires, in ms; `None` if it has no expiry.
    pub ttl_ms: Option<u64>,
}

impl Management {
    /// The saga store management reads sagas through (its keys are its own).
    pub fn saga_store(&self) -> RedisSagaStore {
        RedisSagaStore::new(self.admin().transport().client().clone())
            .prefix(self.saga_key_prefix())
    }

    /// The sagas of one partition, or of all, sorted by key (the store's `list`:
    /// `SCAN ... COUNT 1000` on every master, never `KEYS`). Only saga hashes are listed:
    /// another key at a saga's name (a string from an older layout, say) is not a saga,
    /// and [`Management::delete_saga`] would refuse it.
    pub async fn sagas(&self, partition: Option<&str>) -> Result<Vec<SagaEntry>> {
        if let Some(partition) = partition {
            bus_core::transport::validate_name("saga partition", partition)?;
        }
        let found = self.saga_store().list(partition).await?;
        Ok(found
            .into_iter()
            .map(|(saga, ttl_ms)| SagaEntry {
                partition: saga.partition().to_owned(),
                id: saga.id().to_owned(),
                key: saga.key().to_owned(),
                ttl_ms,
            })
            .collect())
    }

    /// One saga's state, stamp and time to live (the store's `get`, which fails with a
    /// clear error when the key holds something that is not a saga); `None` if there is
    /// no saga at its key.
    pub async fn saga(&self, partition: &str, id: &str) -> Result<Option<SagaState>> {
        bus_core::transport::validate_name("saga partition", partition)?;
        let store = self.saga_store();
        let key = store.key(partition, id);
        let (data, stamp) = match store.get(partition, id).await {
            Ok(found) => found,
            Err(bus_core::Error::SagaNotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let ttl_ms = store.ttl_ms(partition, id).await?;
        let data = match std::str::from_utf8(&data) {
            Ok(text) => text.to_owned(),
            Err(_) => format!("<{} bytes that are not UTF-8>", data.len()),
        };
        Ok(Some(SagaState {
            partition: partition.to_owned(),
            id: id.to_owned(),
            key,
            data,
            stamp: stamp.as_str().to_owned(),
            ttl_ms,
        }))
    }

    /// Deletes a saga whatever its state (the store's `delete`: one script that refuses a
    /// key that is not a saga hash). Returns whether it existed.
    pub async fn delete_saga(&self, partition: &str, id: &str) -> Result<bool> {
        bus_core::transport::validate_name("saga partition", partition)?;
        let store = self.saga_store();
        let existed = store.exists(partition, id).await?;
        store.delete(partition, id).await?;
        Ok(existed)
    }
}
