//! The circuit breaker as a layer: a consumer whose reserves the breaker admits and whose
//! settles it observes, around the transport's; the worker knows nothing of it.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Admit, Breaker};
use crate::fast_hash::FastSet;
use crate::host::outcome::error_chain;
use crate::host::worker::Starts;
use crate::records::ErrorRecord;
use crate::transport::{Consumer, ConsumerExtras, DeadLetterReason, Receipt, Received, Want};
use crate::BreakerState;
use crate::Result;

/// Longest a receive waits out an open breaker before it returns empty (the worker asks
/// again, so a stop is never kept waiting longer).
const OPEN_WAIT: Duration = Duration::from_secs(1);

/// A consumer guarded by a circuit breaker.
///
/// - A receive asks the breaker first (host scope): open, it waits out the cool-down and
///   reserves nothing; when the cool-down ends, it waits until every message it handed
///   out is settled, then reserves one, the probe. Fleet scope: the transport holds every
///   host back and hands out the probe; what its receives saw is shown by the breaker.
/// - A probe sent back unstarted is no longer running: the next receive reserves another.
/// - An ack counts as a handler that succeeded, a retry or dead letter as one that failed;
///   at the fleet scope, a window that trips stores the trip in the transport.
/// - The outcome that opens the breaker stops the worker's starts at once (its settle
///   comes before its handler slot is free): what the worker reserved and has not started
///   goes back, and so does what a reserve on its way then brings; no waiting message
///   takes that slot.
pub(crate) struct Guarded {
    inner: Arc<dyn Consumer>,
    breaker: Arc<Breaker>,
    /// What this consumer handed out and was not settled yet: a probe waits for none.
    out: Mutex<FastSet<Receipt>>,
    settled: Notify,
    /// The probe this consumer handed out and that is not settled yet (host scope).
    probe: Mutex<Option<Receipt>>,
    /// The worker's starts, stopped when this host's outcomes open the breaker.
    starts: Starts,
}

impl fmt::Debug for Guarded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guarded")
            .field("inner", &self.inner)
            .field("state", &self.breaker.state())
            .finish_non_exhaustive()
    }
}

impl Guarded {
    pub(crate) fn new(inner: Arc<dyn Consumer>, breaker: Arc<Breaker>, starts: Starts) -> Self {
        Guarded {
            inner,
            breaker,
            out: Mutex::default(),
            settled: Notify::new(),
            probe: Mutex::default(),
            starts,
        }
    }

    /// The probe left this consumer's hands: settled (`used`), or sent back unstarted.
    fn probe_gone<'a>(&self, receipts: impl IntoIterator<Item = &'a Receipt>, used: bool) {
        let mut probe = self.probe.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(held) = probe.as_ref() else { return };
        if receipts.into_iter().any(|r| r == held) {
            *probe = None;
            if !used {
                self.breaker.probe_unused();
            }
        }
    }

    fn out(&self) -> MutexGuard<'_, FastSet<Receipt>> {
        // A poisoned lock only means a panic elsewhere mid-update: the set is still valid.
        self.out.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// These left this consumer's hands (settled, released, or their lock lost).
    fn gone<'a>(&self, receipts: impl IntoIterator<Item = &'a Receipt>) {
        let mut out = self.out();
        for receipt in receipts {
            out.remove(receipt);
        }
        if out.is_empty() {
            self.settled.notify_waiters();
        }
    }

    /// Returns once nothing handed out is unsettled, or `stop` fires (`false`).
    async fn all_settled(&self, stop: &CancellationToken) -> bool {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            // Register before looking, so that a settle in between is not missed.
            settled.as_mut().enable();
            if self.out().is_empty() {
                return true;
            }
            tokio::select! {
                () = stop.cancelled() => return false,
                () = settled => {}
            }
        }
    }

    /// Whether the breaker lets this receive through, and as a probe (`Some(true)`);
    /// `None`: reserve nothing this time (the cool-down runs, a probe runs, or `stop`).
    async fn admit(&self, stop: &CancellationToken) -> Option<bool> {
        let mut changes = self.breaker.watch();
        changes.mark_unchanged();
        match self.breaker.admit() {
            Admit::Go => Some(false),
            Admit::Wait(until) => {
                let until = until.map_or(OPEN_WAIT, |u| {
                    u.saturating_duration_since(std::time::Instant::now())
                        .min(OPEN_WAIT)
                });
                tokio::select! {
                    () = stop.cancelled() => {}
                    _ = changes.changed() => {}
                    () = tokio::time::sleep(until) => {}
                }
                None
            }
            Admit::Probe => {
                // Everything handed out before is settled first, so that the probe's
                // outcome is the only one the breaker then sees.
                if !self.all_settled(stop).await {
                    return None;
                }
                self.breaker.begin_probe();
                Some(true)
            }
        }
    }

    /// A settle the transport took: counted by the breaker, a trip stored.
    async fn judge(&self, receipt: &Receipt, succeeded: bool) {
        let was_open = self.breaker.state() == BreakerState::Open;
        let fleet_trip = self.breaker.judge(receipt, succeeded);
        if !was_open && self.breaker.state() == BreakerState::Open {
            self.starts.stop();
        }
        if let Some(cool_down) = fleet_trip {
            self.trip(cool_down).await;
        }
    }

    /// Stores a fleet trip in the transport. A failure is logged: the other hosts go on
    /// running until a later trip is stored.
    async fn trip(&self, cool_down: Duration) {
        let tripped = match self.inner.extras().fleet_breaker {
            Some(fleet) => fleet.trip(cool_down).await,
            None => Err(crate::Error::Config(
                "this transport has no fleet-wide circuit breaker (use the host scope)".into(),
            )),
        };
        if let Err(e) = tripped {
            tracing::warn!(source = %self.breaker.source, error = %error_chain(&e),
                "could not store the fleet circuit breaker's trip in the transport");
        }
    }
}

#[async_trait]
impl Consumer for Guarded {
    async fn receive(&self, want: Want, stop: &CancellationToken) -> Result<Received> {
        if want.max == 0 {
            return self.inner.receive(want, stop).await;
        }
        let probe = if self.breaker.fleet() {
            false
        } else {
            match self.admit(stop).await {
                Some(probe) => probe,
                None => return Ok(Received::default()),
            }
        };
        // A probe is one message.
        let want = if probe && !want.alone {
            Want::new(1)
        } else {
            want
        };
        // Before the reserve: an answer that predates this host's own trip is stale.
        let epoch = self.breaker.epoch();
        let received = self.inner.receive(want, stop).await;
        match &received {
            Ok(received) => {
                if probe {
                    match received.deliveries.first() {
                        Some(first) => {
                            *self.probe.lock().unwrap_or_else(PoisonError::into_inner) =
                                Some(first.receipt.clone())
                        }
                        None => self.breaker.probe_unused(),
                    }
                }
                self.out()
                    .extend(received.deliveries.iter().map(|d| d.receipt.clone()));
                self.breaker
                    .seen(received.hold, &received.deliveries, epoch);
            }
            Err(_) if probe => self.breaker.probe_unused(),
            Err(_) => {}
        }
        received
    }

    async fn ack(&self, receipts: &[Receipt]) -> Result<()> {
        self.inner.ack(receipts).await?;
        self.gone(receipts);
        self.probe_gone(receipts, true);
        for receipt in receipts {
            self.judge(receipt, true).await;
        }
        Ok(())
    }

    async fn renew(&self, receipts: &[Receipt]) -> Result<Vec<bool>> {
        let kept = self.inner.renew(receipts).await?;
        let lost = receipts.iter().zip(&kept).filter(|(_, kept)| !**kept);
        self.gone(lost.map(|(receipt, _)| receipt));
        Ok(kept)
    }

    async fn retry(&self, receipt: &Receipt, delay: Duration, error: &ErrorRecord) -> Result<()> {
        self.inner.retry(receipt, delay, error).await?;
        self.gone([receipt]);
        self.probe_gone([receipt], true);
        self.judge(receipt, false).await;
        Ok(())
    }

    async fn dead_letter(
        &self,
        receipt: &Receipt,
        reason: DeadLetterReason,
        error: Option<&ErrorRecord>,
    ) -> Result<()> {
        self.inner.dead_letter(receipt, reason, error).await?;
        self.gone([receipt]);
        self.probe_gone([receipt], true);
        self.judge(receipt, false).await;
        Ok(())
    }

    async fn release(&self, receipts: &[Receipt]) -> Result<()> {
        self.inner.release(receipts).await?;
        self.gone(receipts);
        self.probe_gone(receipts, false);
        Ok(())
    }

    async fn recover(&self) -> Result<usize> {
        self.inner.recover().await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }

    fn extras(&self) -> ConsumerExtras<'_> {
        self.inner.extras()
    }
}
