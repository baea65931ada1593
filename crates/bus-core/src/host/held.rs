//! The messages a worker holds: reserved, and not yet settled in the transport.

use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::cancel::Cancel;
use crate::fast_hash::FastMap;
use crate::transport::Receipt;

/// Each held message with the token that cancels its handler (shutdown, lost lock). A
/// message leaves only when its final transition is done in the transport (an ack once
/// it is flushed), so "nothing held" means nothing of ours can be lost with the process.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Receipts are ids the bus made: hashed fast, not flood-resistant (memory.rs).
    map: Mutex<FastMap<Receipt, Cancel>>,
    emptied: Notify,
}

impl Held {
    fn map(&self) -> MutexGuard<'_, FastMap<Receipt, Cancel>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds a fetched batch (one lock for all); returns the cancellation each handler
    /// gets.
    pub(super) fn insert_all<'a>(
        &self,
        receipts: impl ExactSizeIterator<Item = &'a Receipt>,
    ) -> Vec<Cancel> {
        let cancels = Cancel::batch(receipts.len());
        let mut map = self.map();
        map.reserve(receipts.len());
        for (receipt, cancel) in receipts.zip(&cancels) {
            map.insert(receipt.clone(), cancel.clone());
        }
        cancels
    }

    pub(super) fn remove<'a>(&self, receipts: impl IntoIterator<Item = &'a Receipt>) {
        let mut map = self.map();
        for receipt in receipts {
            map.remove(receipt);
        }
        if map.is_empty() {
            self.emptied.notify_waiters();
        }
    }

    pub(super) fn receipts(&self) -> Vec<Receipt> {
        self.map().keys().cloned().collect()
    }

    /// Cancels the handler of a message whose lock was lost ([`Cancel::lost`]).
    pub(super) fn cancel(&self, receipt: &Receipt) -> bool {
        self.map().get(receipt).is_some_and(Cancel::lost)
    }

    pub(super) fn cancel_all(&self) {
        for cancel in self.map().values() {
            cancel.cancel();
        }
    }

    /// Takes everything still held.
    pub(super) fn drain(&self) -> Vec<Receipt> {
        let drained = self.map().drain().map(|(r, _)| r).collect();
        self.emptied.notify_waiters();
        drained
    }

    /// Returns once nothing is held.
    pub(super) async fn until_empty(&self) {
        loop {
            let emptied = self.emptied.notified();
            tokio::pin!(emptied);
            // Register before looking, so that a removal in between is not missed.
            emptied.as_mut().enable();
            if self.map().is_empty() {
                return;
            }
            emptied.await;
        }
    }
}
