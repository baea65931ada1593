//! The state and stamp a host last wrote for each saga, and when the saga expires.
//!
//! A saga step needs the state and its stamp. When this host wrote the saga last, it
//! already has both, so the step skips the read: one round trip instead of two. An entry
//! goes stale when another host writes the saga; the stamp check then refuses the write
//! and the step runs again on a fresh read (see `flow`), so a stale entry costs time,
//! never correctness.
//!
//! Expiry is different: a handler that runs on a cached copy of an expired saga has its
//! side effects before any write could notice. So an entry never outlives the key it
//! stands for. Each entry carries the instant its saga expires at the latest (known only
//! to the host that created it: the time before its `create` was sent plus the time to
//! live, which updates never extend), and an entry within [`MARGIN`] of it is absent. A
//! saga whose expiry this host does not know (another host created it) is not cached.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::Stamp;

/// Entries kept before the cache starts over (a bound on memory, not a tuning knob).
const CAPACITY: usize = 10_000;

/// How long before its saga's expiry an entry stops counting: room for the store's clock
/// (Redis's) running a little ahead of ours.
pub(crate) const MARGIN: Duration = Duration::from_millis(100);

#[derive(Debug)]
struct Entry {
    data: Bytes,
    stamp: Stamp,
    expires_at: Instant,
}

#[derive(Debug, Default)]
pub(crate) struct StateCache {
    entries: Mutex<HashMap<String, Entry>>,
}

/// A cached saga: its state, its stamp and the instant it expires at the latest.
pub(crate) type Cached = (Bytes, Stamp, Instant);

impl StateCache {
    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry for `key`, unless its saga has expired or is about to.
    pub(crate) fn get(&self, key: &str) -> Option<Cached> {
        let mut entries = self.entries();
        let entry = entries.get(key)?;
        if Instant::now() + MARGIN >= entry.expires_at {
            entries.remove(key);
            return None;
        }
        Some((entry.data.clone(), entry.stamp.clone(), entry.expires_at))
    }

    /// Remembers what was written to `key`; `expires_at` is when the saga expires, when
    /// this host knows it (`None` forgets the entry instead).
    pub(crate) fn put(&self, key: String, data: Bytes, stamp: Stamp, expires_at: Option<Instant>) {
        let mut entries = self.entries();
        let Some(expires_at) = expires_at else {
            entries.remove(&key);
            return;
        };
        if entries.len() >= CAPACITY && !entries.contains_key(&key) {
            entries.clear();
        }
        entries.insert(
            key,
            Entry {
                data,
                stamp,
                expires_at,
            },
        );
    }

    pub(crate) fn forget(&self, key: &str) {
        self.entries().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_entry_is_absent_from_just_before_its_saga_expires() {
        let cache = StateCache::default();
        let expires_at = Instant::now() + Duration::from_secs(1);
        let put = |key: &str, at| cache.put(key.into(), Bytes::from("{}"), Stamp::new("s"), at);
        put("a", Some(expires_at));
        put("unknown", None);
        assert!(cache.get("a").is_some());
        assert!(
            cache.get("unknown").is_none(),
            "an unknown expiry was cached"
        );
        tokio::time::advance(Duration::from_secs(1) - MARGIN - Duration::from_millis(1)).await;
        assert!(cache.get("a").is_some());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(cache.get("a").is_none(), "an entry outlived its margin");
        put("a", Some(Instant::now() + Duration::from_secs(5)));
        put("a", None);
        assert!(
            cache.get("a").is_none(),
            "an unknown expiry kept the old entry"
        );
    }
}
