//! What the handler middleware and the consumer layers of one [`Workflows`](crate::Workflows)
//! share: what a member's handler left for its settle (its result, or that it suspended).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bus_core::MessageId;
use bytes::Bytes;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a member's handler left for its settle.
#[derive(Debug, Default, Clone)]
pub(crate) struct Flags {
    /// The result it set (JSON).
    pub(crate) result: Option<Bytes>,
    /// It suspended (a durable step parked it): this ack settles nothing.
    pub(crate) suspended: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Tracker {
    flags: Mutex<HashMap<MessageId, Flags>>,
}

impl Tracker {
    pub(crate) fn set_result(&self, id: &MessageId, result: Bytes) {
        lock(&self.flags).entry(id.clone()).or_default().result = Some(result);
    }

    pub(crate) fn suspend(&self, id: &MessageId) {
        lock(&self.flags).entry(id.clone()).or_default().suspended = true;
    }

    /// What the handler of `id` left (kept until [`Tracker::forget`]: a settle that fails
    /// is made again).
    pub(crate) fn peek(&self, id: &MessageId) -> Flags {
        let flags = lock(&self.flags);
        if flags.is_empty() {
            return Flags::default();
        }
        flags.get(id).cloned().unwrap_or_default()
    }

    /// Forgets what the handlers of `ids` left (their settle is done).
    pub(crate) fn forget<'a>(&self, ids: impl IntoIterator<Item = &'a MessageId>) {
        let mut flags = lock(&self.flags);
        if flags.is_empty() {
            return;
        }
        for id in ids {
            flags.remove(id);
        }
    }
}
