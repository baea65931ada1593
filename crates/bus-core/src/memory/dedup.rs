//! Deduplication at send on the in-memory transport: the same semantics as Redis's
//! (`lua/send_once.lua`, `lua/send_once_batch.lua`; docs/concepts.md, "Deduplication").

use tokio::time::Instant;

use super::{entries, to_instant, Queue};
use crate::transport::{Deduplication, Outgoing};
use crate::MessageId;

impl Queue {
    /// Stores `message` unless `dedup.key` is held: then returns the first message's id
    /// and stores nothing. The caller holds the state's lock, so the check and the store
    /// are one step.
    pub(super) fn store_once(
        &mut self,
        message: Outgoing,
        dedup: &Deduplication<'_>,
        now: Instant,
    ) -> Option<MessageId> {
        match self.dedup.get(dedup.key) {
            Some((first, until)) if *until > now => return Some(first.clone()),
            _ => {}
        }
        // Expired keys are dropped now and then, not on every send.
        if self.dedup.len() >= 1024 {
            self.dedup.retain(|_, (_, until)| *until > now);
        }
        self.dedup.insert(
            dedup.key.to_owned(),
            (message.id.clone(), now + dedup.window),
        );
        // With a partition key, ordered as a keyed send (send_once.lua's keyed form).
        match (dedup.partition, dedup.due) {
            (Some(key), Some(due)) => self.send_keyed_at(key, vec![message], to_instant(due)),
            (Some(key), None) => self.send_keyed(key, vec![message]),
            (None, Some(due)) => {
                entries(vec![message]).for_each(|e| self.delay(e, to_instant(due)))
            }
            (None, None) => self.ready.extend(entries(vec![message])),
        }
        None
    }
}
