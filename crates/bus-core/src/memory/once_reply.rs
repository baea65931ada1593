//! Reply inboxes and step marks on the in-memory transport, apart from the queues' state:
//! the same semantics as Redis's lists and marks (docs/redis-layout.md, "Request and
//! reply", "Step marks"), expiry included.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::{ReplyInbox, Result};

/// Every inbox of one transport (and its clones), by name.
#[derive(Debug, Default, Clone)]
pub(super) struct Inboxes(Arc<Mutex<HashMap<String, Inbox>>>);

#[derive(Debug, Default)]
struct Inbox {
    replies: VecDeque<Bytes>,
    /// Like Redis's list expiry: set by each push.
    expires: Option<Instant>,
    arrived: Arc<Notify>,
}

impl Inboxes {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Inbox>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn open(&self, name: &str) -> Box<dyn ReplyInbox> {
        Box::new(MemoryInbox {
            inboxes: self.clone(),
            name: name.to_owned(),
        })
    }

    pub(super) fn push(&self, inbox: &str, element: Bytes, keep: Duration) {
        let mut inboxes = self.lock();
        let entry = inboxes.entry(inbox.to_owned()).or_default();
        if entry.expires.is_some_and(|at| at <= Instant::now()) {
            entry.replies.clear();
        }
        entry.replies.push_back(element);
        entry.expires = Some(Instant::now() + keep);
        entry.arrived.notify_one();
    }

    /// How many inboxes hold replies (a Redis key each), for tests.
    pub(super) fn held(&self) -> usize {
        let now = Instant::now();
        self.lock()
            .values()
            .filter(|i| !i.replies.is_empty() && i.expires.map_or(true, |at| at > now))
            .count()
    }
}

#[derive(Debug)]
struct MemoryInbox {
    inboxes: Inboxes,
    name: String,
}

impl MemoryInbox {
    /// Takes what the inbox holds (dropping it, like Redis drops an empty list), or the
    /// notification of the next push.
    fn take(&self) -> std::result::Result<Vec<Bytes>, Arc<Notify>> {
        let mut inboxes = self.inboxes.lock();
        let inbox = inboxes.entry(self.name.clone()).or_default();
        let live = inbox.expires.map_or(true, |at| at > Instant::now());
        if live && !inbox.replies.is_empty() {
            let replies = inbox.replies.drain(..).collect();
            inboxes.remove(&self.name);
            return Ok(replies);
        }
        Err(Arc::clone(&inbox.arrived))
    }
}

#[async_trait]
impl ReplyInbox for MemoryInbox {
    fn name(&self) -> &str {
        &self.name
    }

    async fn receive(&self, wait: Duration) -> Result<Vec<Bytes>> {
        let arrived = match self.take() {
            Ok(replies) => return Ok(replies),
            Err(arrived) => arrived,
        };
        // `notify_one` keeps a permit, so a push between `take` and here is not missed.
        let _ = tokio::time::timeout(wait, arrived.notified()).await;
        Ok(self.take().unwrap_or_default())
    }

    async fn close(&self) -> Result<()> {
        self.inboxes.lock().remove(&self.name);
        Ok(())
    }
}

/// Step marks by key, each with its expiry.
#[derive(Debug, Default, Clone)]
pub(super) struct Marks(Arc<Mutex<HashMap<String, (Bytes, Instant)>>>);

impl Marks {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (Bytes, Instant)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn get(&self, key: &str) -> Option<Bytes> {
        let marks = self.lock();
        let (result, expires) = marks.get(key)?;
        (*expires > Instant::now()).then(|| result.clone())
    }

    /// Sets the mark unless a live one is there; returns that one.
    pub(super) fn set(&self, key: String, result: Bytes, keep: Duration) -> Option<Bytes> {
        let now = Instant::now();
        let mut marks = self.lock();
        if let Some((earlier, expires)) = marks.get(&key) {
            if *expires > now {
                return Some(earlier.clone());
            }
        }
        // Expired marks go when the map has grown, so it stays bounded by the live ones.
        if marks.len() >= 1024 && marks.len().is_power_of_two() {
            marks.retain(|_, (_, expires)| *expires > now);
        }
        marks.insert(key, (result, now + keep));
        None
    }
}
