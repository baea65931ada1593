//! A handler's cancellation, made only when something asks for it.
//!
//! Every held message can be cancelled (its lock lost, the host stopping), but most
//! handlers never look: a [`CancellationToken`] per message would cost an allocation and
//! a locked reference count at each clone and drop. A fetched batch instead shares one
//! allocation of flags, and a message's token is made the first time its context is asked
//! for it (cancelled at once if its flag was set before).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

#[derive(Debug, Default)]
struct Slot {
    cancelled: AtomicBool,
    /// Its handler is done and its ack on the way.
    finished: AtomicBool,
    token: OnceLock<CancellationToken>,
}

/// One message's cancellation: a slot of its batch's shared flags.
#[derive(Debug, Clone)]
pub(crate) struct Cancel {
    batch: Arc<[Slot]>,
    index: usize,
}

impl Cancel {
    /// The cancellations of a batch of `n` messages, sharing one allocation.
    pub(crate) fn batch(n: usize) -> Vec<Cancel> {
        let batch: Arc<[Slot]> = (0..n).map(|_| Slot::default()).collect();
        (0..n)
            .map(|index| Cancel {
                batch: Arc::clone(&batch),
                index,
            })
            .collect()
    }

    /// A cancellation of its own.
    #[cfg(test)]
    pub(crate) fn single() -> Cancel {
        Cancel::batch(1).remove(0)
    }

    fn slot(&self) -> &Slot {
        &self.batch[self.index]
    }

    /// The token, made on first use. The flag is set before the token is looked at, and
    /// the token made before the flag is looked at, so a cancel and a first use that race
    /// leave the token cancelled either way.
    pub(crate) fn token(&self) -> &CancellationToken {
        let slot = self.slot();
        let token = slot.token.get_or_init(CancellationToken::new);
        if slot.cancelled.load(Ordering::SeqCst) {
            token.cancel();
        }
        token
    }

    /// Its handler is done (its ack on the way): a lock found lost now most likely
    /// crossed the ack, and there is no handler left to cancel.
    pub(crate) fn finish(&self) {
        self.slot().finished.store(true, Ordering::SeqCst);
    }

    /// Cancels a handler whose lock was lost; false if its handler is done or it was
    /// cancelled already, so that a loss is reported once, and only where a handler lost
    /// its lock.
    pub(crate) fn lost(&self) -> bool {
        !self.slot().finished.load(Ordering::SeqCst) && self.cancel()
    }

    /// Cancels; false if it was cancelled already.
    pub(crate) fn cancel(&self) -> bool {
        let slot = self.slot();
        if slot.cancelled.swap(true, Ordering::SeqCst) {
            return false;
        }
        if let Some(token) = slot.token.get() {
            token.cancel();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_before_or_after_the_first_use_cancels_the_token() {
        let batch = Cancel::batch(3);
        assert!(batch[0].cancel());
        assert!(!batch[0].cancel(), "once");
        assert!(batch[0].token().is_cancelled(), "made after the cancel");
        let token = batch[1].token().clone();
        assert!(!token.is_cancelled());
        assert!(batch[1].cancel());
        assert!(token.is_cancelled(), "made before the cancel");
        assert!(!batch[2].token().is_cancelled(), "its own flag");
        batch[2].finish();
        assert!(!batch[2].lost(), "a finished handler is not cancelled");
        assert!(!batch[2].token().is_cancelled());
    }
}
