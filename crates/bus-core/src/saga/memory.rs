//! The in-memory saga store: the Redis store's semantics inside one process (SPEC §5.4).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::time::Instant;

use super::store::saga_key;
use super::{SagaStore, Stamp};
use crate::{Error, Result};

/// Creates between two sweeps of expired sagas that were never read again.
const SWEEP_EVERY: usize = 1024;

/// An in-process [`SagaStore`]: sagas expire after their time to live (on tokio's
/// clock, so paused-time tests work), stamps change on every write, and not found is
/// reported before conflict. Clones share the same sagas.
///
/// State is lost when the process ends: use it for tests and for embedded runs, and a
/// persistent store (`bus_redis_saga::RedisSagaStore`) in production.
#[derive(Debug, Clone, Default)]
pub struct MemorySagaStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    sagas: HashMap<String, Entry>,
    creates_since_sweep: usize,
}

#[derive(Debug)]
struct Entry {
    data: Bytes,
    stamp: Stamp,
    /// `None` when the time to live is too long to represent: never expires.
    expires_at: Option<Instant>,
}

impl Entry {
    fn is_live(&self, now: Instant) -> bool {
        match self.expires_at {
            Some(at) => at > now,
            None => true,
        }
    }
}

impl Inner {
    /// The live entry at `key`; an expired one is removed on the way.
    fn live(&mut self, key: &str) -> Option<&mut Entry> {
        let now = Instant::now();
        if self.sagas.get(key).is_some_and(|e| !e.is_live(now)) {
            self.sagas.remove(key);
        }
        self.sagas.get_mut(key)
    }
}

impl MemorySagaStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many sagas are live (not expired).
    pub fn len(&self) -> usize {
        let now = Instant::now();
        self.lock()
            .sagas
            .values()
            .filter(|e| e.is_live(now))
            .count()
    }

    /// Whether no saga is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl SagaStore for MemorySagaStore {
    async fn create(&self, partition: &str, id: &str, data: Bytes, ttl: Duration) -> Result<Stamp> {
        let key = saga_key(partition, id);
        let mut inner = self.lock();
        inner.creates_since_sweep += 1;
        if inner.creates_since_sweep >= SWEEP_EVERY {
            let now = Instant::now();
            inner.sagas.retain(|_, e| e.is_live(now));
            inner.creates_since_sweep = 0;
        }
        if inner.live(&key).is_some() {
            return Err(Error::SagaExists { key });
        }
        let stamp = Stamp::generate();
        let expires_at = Instant::now().checked_add(ttl.max(Duration::from_millis(1)));
        inner.sagas.insert(
            key,
            Entry {
                data,
                stamp: stamp.clone(),
                expires_at,
            },
        );
        Ok(stamp)
    }

    async fn get(&self, partition: &str, id: &str) -> Result<(Bytes, Stamp)> {
        let key = saga_key(partition, id);
        match self.lock().live(&key) {
            Some(entry) => Ok((entry.data.clone(), entry.stamp.clone())),
            None => Err(Error::SagaNotFound { key }),
        }
    }

    async fn update(
        &self,
        partition: &str,
        id: &str,
        data: Bytes,
        expected: &Stamp,
    ) -> Result<Stamp> {
        let key = saga_key(partition, id);
        let mut inner = self.lock();
        let Some(entry) = inner.live(&key) else {
            return Err(Error::SagaNotFound { key });
        };
        if entry.stamp != *expected {
            return Err(Error::SagaConflict { key });
        }
        let stamp = Stamp::generate();
        entry.data = data;
        entry.stamp = stamp.clone();
        Ok(stamp)
    }

    async fn complete(&self, partition: &str, id: &str, expected: &Stamp) -> Result<()> {
        let key = saga_key(partition, id);
        let mut inner = self.lock();
        match inner.live(&key) {
            None => Err(Error::SagaNotFound { key }),
            Some(entry) if entry.stamp != *expected => Err(Error::SagaConflict { key }),
            Some(_) => {
                inner.sagas.remove(&key);
                Ok(())
            }
        }
    }

    async fn delete(&self, partition: &str, id: &str) -> Result<()> {
        self.lock().sagas.remove(&saga_key(partition, id));
        Ok(())
    }
}
