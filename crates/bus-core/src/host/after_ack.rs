//! Work a handler asks for once its message's ack is stored ([`Context::after_ack`]):
//! deleting what only that message needed (its attachment, say), so that a crash between
//! the handler and the ack redelivers the message with everything it refers to.
//!
//! [`Context::after_ack`]: crate::Context::after_ack

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use futures::future::{join_all, BoxFuture};
use futures::FutureExt;

use crate::fast_hash::FastMap;
use crate::transport::Receipt;

/// One piece of after-ack work, awaited by the worker's acker after the batch's ack (the
/// hooks of one batch run concurrently; shutdown waits for them within its bound).
pub(crate) type AfterAckHook = BoxFuture<'static, ()>;

/// The hooks of the messages a worker holds, by receipt. Empty unless a handler asked: the
/// worker then pays one atomic load per ack batch and per failed delivery.
#[derive(Default)]
pub(crate) struct AfterAcks {
    /// How many receipts have hooks: the fast path reads only this.
    pending: AtomicUsize,
    hooks: Mutex<FastMap<Receipt, Vec<AfterAckHook>>>,
}

impl std::fmt::Debug for AfterAcks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfterAcks")
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl AfterAcks {
    fn map(&self) -> MutexGuard<'_, FastMap<Receipt, Vec<AfterAckHook>>> {
        self.hooks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn add(&self, receipt: &Receipt, hook: AfterAckHook) {
        let mut map = self.map();
        let hooks = map.entry(receipt.clone()).or_default();
        if hooks.is_empty() {
            self.pending.fetch_add(1, Ordering::AcqRel);
        }
        hooks.push(hook);
    }

    fn take<'a>(&self, receipts: impl IntoIterator<Item = &'a Receipt>) -> Vec<AfterAckHook> {
        if self.pending.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let mut map = self.map();
        let mut taken = Vec::new();
        for receipt in receipts {
            if let Some(hooks) = map.remove(receipt) {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                taken.extend(hooks);
            }
        }
        taken
    }

    /// Runs the hooks of messages whose ack was stored.
    pub(crate) async fn acked<'a>(&self, receipts: impl IntoIterator<Item = &'a Receipt>) {
        let hooks = self.take(receipts);
        if hooks.is_empty() {
            return;
        }
        // A panicking hook is the handler's code: it must not stop the acker.
        let guarded = hooks
            .into_iter()
            .map(|hook| AssertUnwindSafe(hook).catch_unwind());
        for result in join_all(guarded).await {
            if result.is_err() {
                tracing::warn!("an after-ack hook panicked");
            }
        }
    }

    /// Drops the hooks of messages that were not acknowledged (retried, dead-lettered,
    /// or an ack that failed at shutdown).
    pub(crate) fn forget<'a>(&self, receipts: impl IntoIterator<Item = &'a Receipt>) {
        drop(self.take(receipts));
    }
}
