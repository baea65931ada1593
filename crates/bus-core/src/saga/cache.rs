//! The state and stamp a host last wrote for each saga.
//!
//! A saga step needs the state and its stamp. When this host wrote the saga last, it
//! already has both, so the step skips the read: one round trip instead of two. An entry
//! goes stale when another host writes the saga; the stamp check then refuses the write
//! and the step runs again on a fresh read (see `flow`), so a stale entry costs time,
//! never correctness.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use super::Stamp;

/// Entries kept before the cache starts over (a bound on memory, not a tuning knob).
const CAPACITY: usize = 10_000;

#[derive(Debug, Default)]
pub(crate) struct StateCache {
    entries: Mutex<HashMap<String, (Bytes, Stamp)>>,
}

impl StateCache {
    fn entries(&self) -> MutexGuard<'_, HashMap<String, (Bytes, Stamp)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn get(&self, key: &str) -> Option<(Bytes, Stamp)> {
        self.entries().get(key).cloned()
    }

    pub(crate) fn put(&self, key: String, data: Bytes, stamp: Stamp) {
        let mut entries = self.entries();
        if entries.len() >= CAPACITY && !entries.contains_key(&key) {
            entries.clear();
        }
        entries.insert(key, (data, stamp));
    }

    pub(crate) fn forget(&self, key: &str) {
        self.entries().remove(key);
    }
}
