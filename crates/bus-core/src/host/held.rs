//! The messages a worker holds: reserved, and not yet settled in the transport.

use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::cancel::Cancel;
use crate::fast_hash::FastMap;
use crate::transport::{Held as HeldAs, Receipt};

/// Each held message with the token that cancels its handler (shutdown, lost lock). A
/// message leaves only when its final transition is done in the transport (an ack once
/// it is flushed), so "nothing held" means nothing of ours can be lost with the process.
#[derive(Debug, Default)]
pub(super) struct Held {
    map: Mutex<Map>,
    emptied: Notify,
}

/// Leased messages are kept per lease: a fetched batch is one lease, so its messages share
/// one entry and one copy of the lease's key, and are found by index, not hashed one by
/// one. A lease's entry leaves with its last message, so the map is empty exactly when
/// nothing is held. Receipts are ids the bus made: hashed fast, not flood-resistant
/// (memory.rs).
#[derive(Debug, Default)]
struct Map {
    /// By the lease's key, then by the partition that handed it out (almost always one).
    leases: FastMap<Bytes, Vec<(u16, Lease)>>,
    stored: FastMap<Receipt, Cancel>,
}

/// The held messages of one lease, by index (a position in the reserved batch, so the
/// slots are as many as the batch's messages).
#[derive(Debug, Default)]
struct Lease {
    slots: Vec<Option<Cancel>>,
    held: usize,
}

impl Lease {
    fn hold(&mut self, index: u32, cancel: Cancel) {
        let index = index as usize;
        if self.slots.len() <= index {
            self.slots.resize_with(index + 1, || None);
        }
        if self.slots[index].replace(cancel).is_none() {
            self.held += 1;
        }
    }
}

impl Map {
    fn is_empty(&self) -> bool {
        self.leases.is_empty() && self.stored.is_empty()
    }

    fn lease(&self, shard: u16, lease: &Bytes) -> Option<&Lease> {
        let shards = self.leases.get(&lease[..])?;
        shards.iter().find(|(s, _)| *s == shard).map(|(_, l)| l)
    }

    fn lease_mut(&mut self, shard: u16, lease: &Bytes) -> Option<&mut Lease> {
        let shards = self.leases.get_mut(&lease[..])?;
        shards.iter_mut().find(|(s, _)| *s == shard).map(|(_, l)| l)
    }

    /// Holds each message; the messages of one lease come together (a fetched batch), so
    /// its entry is looked up once per run of them.
    fn insert_all<'r>(&mut self, held: impl Iterator<Item = (&'r Receipt, Cancel)>) {
        let Map { leases, stored } = self;
        let mut run: Option<(u16, &'r Bytes, &mut Lease)> = None;
        for (receipt, cancel) in held {
            let (lease, index) = match &receipt.held {
                HeldAs::Leased { lease, index } => (lease, *index),
                HeldAs::Stored { .. } => {
                    stored.insert(receipt.clone(), cancel);
                    continue;
                }
            };
            let entry = match run.take() {
                Some((shard, key, entry)) if shard == receipt.shard && key == lease => entry,
                _ => {
                    let shards = leases.entry(lease.clone()).or_default();
                    let at = match shards.iter().position(|(s, _)| *s == receipt.shard) {
                        Some(at) => at,
                        None => {
                            shards.push((receipt.shard, Lease::default()));
                            shards.len() - 1
                        }
                    };
                    &mut shards[at].1
                }
            };
            entry.hold(index, cancel);
            run = Some((receipt.shard, lease, entry));
        }
    }

    fn get(&self, receipt: &Receipt) -> Option<&Cancel> {
        match &receipt.held {
            HeldAs::Leased { lease, index } => {
                let entry = self.lease(receipt.shard, lease)?;
                entry.slots.get(*index as usize)?.as_ref()
            }
            HeldAs::Stored { .. } => self.stored.get(receipt),
        }
    }

    fn remove(&mut self, receipt: &Receipt) {
        match &receipt.held {
            HeldAs::Leased { lease, index } => {
                let Some(entry) = self.lease_mut(receipt.shard, lease) else {
                    return;
                };
                let slot = entry.slots.get_mut(*index as usize);
                if slot.and_then(Option::take).is_some() {
                    entry.held -= 1;
                    if entry.held == 0 {
                        self.forget_lease(receipt.shard, lease);
                    }
                }
            }
            HeldAs::Stored { .. } => {
                self.stored.remove(receipt);
            }
        }
    }

    fn forget_lease(&mut self, shard: u16, lease: &Bytes) {
        if let Some(shards) = self.leases.get_mut(&lease[..]) {
            shards.retain(|(s, _)| *s != shard);
            if shards.is_empty() {
                self.leases.remove(&lease[..]);
            }
        }
    }

    /// Every held message's cancellation.
    fn cancels(&self) -> impl Iterator<Item = &Cancel> + '_ {
        let leased = self.leases.values().flatten();
        let leased = leased.flat_map(|(_, entry)| entry.slots.iter().flatten());
        leased.chain(self.stored.values())
    }

    /// Every held message's receipt.
    fn receipts(&self) -> impl Iterator<Item = Receipt> + '_ {
        let leased = self.leases.iter().flat_map(|(lease, shards)| {
            shards.iter().flat_map(move |(shard, entry)| {
                let slots = entry.slots.iter().enumerate();
                slots
                    .filter(|(_, cancel)| cancel.is_some())
                    .map(move |(index, _)| {
                        let mut receipt = Receipt::leased(lease.clone(), index as u32);
                        receipt.shard = *shard;
                        receipt
                    })
            })
        });
        leased.chain(self.stored.keys().cloned())
    }
}

impl Held {
    fn map(&self) -> MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds a fetched batch (one lock for all); returns the cancellation each handler
    /// gets.
    pub(super) fn insert_all<'a>(
        &self,
        receipts: impl ExactSizeIterator<Item = &'a Receipt>,
    ) -> Vec<Cancel> {
        let cancels = Cancel::batch(receipts.len());
        self.map().insert_all(receipts.zip(cancels.iter().cloned()));
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
        self.map().receipts().collect()
    }

    /// Cancels the handler of a message whose lock was lost ([`Cancel::lost`]).
    pub(super) fn cancel(&self, receipt: &Receipt) -> bool {
        self.map().get(receipt).is_some_and(Cancel::lost)
    }

    pub(super) fn cancel_all(&self) {
        for cancel in self.map().cancels() {
            cancel.cancel();
        }
    }

    /// Takes everything still held.
    pub(super) fn drain(&self) -> Vec<Receipt> {
        let drained = {
            let mut map = self.map();
            let receipts = map.receipts().collect();
            *map = Map::default();
            receipts
        };
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
            emptied.as_mut().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leased(lease: &'static [u8], index: u32) -> Receipt {
        Receipt::leased(Bytes::from_static(lease), index)
    }

    #[test]
    fn leased_and_stored_messages_are_held_until_each_is_removed() {
        let held = Held::default();
        let mut other_shard = leased(b"~L1", 0);
        other_shard.shard = 2;
        let batch = [
            leased(b"~L1", 0),
            leased(b"~L1", 1),
            other_shard.clone(),
            Receipt::stored(Bytes::from_static(b"m-1"), 3),
        ];
        let cancels = held.insert_all(batch.iter());
        let mut all = held.receipts();
        all.sort_by_key(|r| format!("{r:?}"));
        let mut expected = batch.to_vec();
        expected.sort_by_key(|r| format!("{r:?}"));
        assert_eq!(all, expected);

        // Lost locks cancel only their own handler, once; unknown receipts nothing.
        assert!(held.cancel(&leased(b"~L1", 1)));
        assert!(!held.cancel(&leased(b"~L1", 1)), "reported once");
        assert!(cancels[1].token().is_cancelled());
        assert!(!cancels[0].token().is_cancelled());
        assert!(!held.cancel(&leased(b"~L1", 7)));
        assert!(!held.cancel(&leased(b"~L9", 0)));

        held.remove([&batch[0], &batch[0], &leased(b"~L1", 9)]);
        assert_eq!(
            held.receipts().len(),
            3,
            "a removal twice or of what is not held counts once"
        );
        held.remove([&batch[1], &other_shard]);
        assert!(
            held.map().leases.is_empty(),
            "a lease leaves with its last message"
        );
        assert_eq!(held.receipts(), vec![batch[3].clone()]);
        assert_eq!(held.drain(), vec![batch[3].clone()]);
        assert!(held.map().is_empty());
    }

    #[tokio::test]
    async fn until_empty_returns_when_the_last_message_is_removed() {
        let held = std::sync::Arc::new(Held::default());
        let receipt = leased(b"~L1", 0);
        let _cancels = held.insert_all([&receipt].into_iter());
        let waiting = tokio::spawn({
            let held = std::sync::Arc::clone(&held);
            async move { held.until_empty().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        held.remove([&receipt]);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("until_empty returns once nothing is held")
            .unwrap();
    }
}
