//! What the handler middleware and the consumer layers of one [`Workflows`](crate::Workflows)
//! share: what a member's handler left for its settle (its result, or that it suspended),
//! and the elements the consumers hold, where a durable step finds its message's envelope.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use bus_core::transport::{Receipt, Source};
use bus_core::{Envelope, MessageId};
use bytes::Bytes;
use tokio::time::Instant;

use crate::ids::MemberRef;

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

/// A delivery a consumer holds.
#[derive(Debug)]
pub(crate) struct HeldDelivery {
    pub(crate) payload: Bytes,
    pub(crate) member: Option<HeldMember>,
}

/// A held delivery that is a batch member.
#[derive(Debug, Clone)]
pub(crate) struct HeldMember {
    pub(crate) member: MemberRef,
    pub(crate) id: MessageId,
    /// Until when its lock surely holds: from before the reserve or renewal that last
    /// extended it, plus the lock timeout (less a margin). A settle that returned before
    /// then was current, so its member can be confirmed at once.
    pub(crate) valid_until: Instant,
    /// A dead mark was written when it was received (alone, at its delivery limit).
    pub(crate) premarked: bool,
}

/// One consumer's held deliveries.
#[derive(Debug)]
pub(crate) struct Holding {
    pub(crate) source: Source,
    pub(crate) held: Mutex<HashMap<Receipt, HeldDelivery>>,
}

impl Holding {
    pub(crate) fn new(source: Source) -> Self {
        Holding {
            source,
            held: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn held(&self) -> MutexGuard<'_, HashMap<Receipt, HeldDelivery>> {
        lock(&self.held)
    }
}

#[derive(Debug, Default)]
pub(crate) struct Tracker {
    flags: Mutex<HashMap<MessageId, Flags>>,
    holdings: Mutex<Vec<Weak<Holding>>>,
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

    pub(crate) fn register(&self, holding: &Arc<Holding>) {
        let mut holdings = lock(&self.holdings);
        holdings.retain(|h| h.strong_count() > 0);
        holdings.push(Arc::downgrade(holding));
    }

    /// The element of message `id` that a consumer holds, and where it came from: what a
    /// durable step sends again. A scan of the held elements (a durable step parks once
    /// per run, so its cost is paid per park, not per message).
    pub(crate) fn element(&self, id: &MessageId) -> Option<(Source, Bytes)> {
        let holdings: Vec<Arc<Holding>> = lock(&self.holdings)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let needle = id.as_str().as_bytes();
        for holding in holdings {
            let held = holding.held();
            for delivery in held.values() {
                if memchr::memmem::find(&delivery.payload, needle).is_none() {
                    continue;
                }
                // The id may also appear in another message's body: check it is this one's.
                if Envelope::decode_shared(&delivery.payload).is_ok_and(|e| e.id == *id) {
                    return Some((holding.source.clone(), delivery.payload.clone()));
                }
            }
        }
        None
    }
}
