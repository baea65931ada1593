//! [`Relay`]: sends what workflows staged, and finishes what a crash left half done.
//!
//! - A batch that fired: its callbacks are sent, each stored once in its queue (a
//!   deduplicated send keyed by the batch and the kind, held for [`DEDUP_WINDOW`]), then
//!   recorded as sent; a child batch then hands its end to its parent's member.
//! - A parked run whose time (or signal) came: its resumed message is sent the same way,
//!   keyed by its token, then forgotten.
//! - The sweep, every few seconds: fired batches whose callbacks are not recorded as sent,
//!   child batches that did not hand off, and member settles whose confirmation did not
//!   come (resolved by asking the transport where the member is).
//!
//! Every step is safe to repeat, so any number of relays (one per host) run at once.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bus_core::transport::{now_ms, unsupported, Deduplicated, Deduplication, Outgoing};
use bus_core::{Capability, Transport};
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::ids::BatchId;
use crate::store::{Callback, Fired, Handoff, Presence, Settle, StaleMark};
use crate::{Result, Workflows};

/// How long the deduplication key of a relayed send holds (7 days): a relay that sends
/// again within it (after a crash between the send and its record) stores nothing.
pub const DEDUP_WINDOW: Duration = bus_core::defaults::ONCE_KEEP;

/// Batches looked at per sweep, and parked runs taken per call.
const SWEEP_BATCH: usize = 50;
const TAKE: usize = 100;

/// Sends staged callbacks and resumed runs, and sweeps: a host with
/// [`Workflows::transport`] runs one while its consumers run; run one yourself with
/// [`Workflows::relay`] in a process that is no host.
#[derive(Debug, Clone)]
pub struct Relay {
    workflows: Workflows,
    transport: Arc<dyn Transport>,
}

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Swept {
    /// Batches looked at.
    pub batches: usize,
    /// Callbacks sent again.
    pub callbacks: usize,
    /// Member settles resolved.
    pub settles: usize,
}

impl Relay {
    pub(crate) fn new(workflows: Workflows, transport: Arc<dyn Transport>) -> Self {
        Relay {
            workflows,
            transport,
        }
    }

    /// Runs until `stop`: sends parked runs as they come due, and sweeps every
    /// [`RelaySettings::sweep_every`](crate::RelaySettings).
    pub async fn run(self, stop: CancellationToken) {
        let settings = self.workflows.inner.settings;
        let mut next_sweep = tokio::time::Instant::now();
        while !stop.is_cancelled() {
            if let Err(error) = self.send_due().await {
                tracing::warn!(%error, "sending due workflow runs failed; trying again");
            }
            if tokio::time::Instant::now() >= next_sweep {
                if let Err(error) = self.sweep().await {
                    tracing::warn!(%error, "the workflow sweep failed; trying again");
                }
                next_sweep = tokio::time::Instant::now() + settings.sweep_every;
            }
            let until_due = match self.workflows.inner.store.next_due().await {
                Ok(Some(due)) => Duration::from_millis(due.saturating_sub(now_ms())),
                _ => settings.poll,
            };
            let wait = until_due
                .min(settings.poll)
                .min(next_sweep.saturating_duration_since(tokio::time::Instant::now()))
                .max(Duration::from_millis(1));
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// [`Relay::run`] on a task of its own; cancel the token to stop it.
    pub fn spawn(self) -> (CancellationToken, tokio::task::JoinHandle<()>) {
        let stop = CancellationToken::new();
        let task = tokio::spawn(self.run(stop.clone()));
        (stop, task)
    }

    /// Sends every parked run that is due now; how many.
    pub async fn send_due(&self) -> Result<usize> {
        let store = &self.workflows.inner.store;
        let claim = self.workflows.inner.settings.claim;
        let mut sent = 0;
        loop {
            let due = store.take_due(TAKE, claim).await?;
            let mut relayed = Vec::with_capacity(due.len());
            for run in &due {
                let message = Outgoing {
                    id: run.message_id.clone(),
                    payload: run.envelope.clone(),
                };
                let dedup = Deduplication::new(&run.token, DEDUP_WINDOW);
                let sent = match self.dedup() {
                    Ok(sends) => sends.send_deduplicated(&run.queue, message, dedup).await,
                    Err(error) => Err(error),
                };
                match sent {
                    Ok(_) => relayed.push(run.token.clone()),
                    Err(error) => tracing::warn!(token = %run.token, queue = %run.queue, %error,
                        "could not send a resumed run; it is taken again after its claim"),
                }
            }
            store.relayed(&relayed).await?;
            sent += relayed.len();
            if due.len() < TAKE {
                return Ok(sent);
            }
        }
    }

    /// Applies settles to a batch and sends what fires.
    pub(crate) async fn settle(&self, batch: &BatchId, settles: &[Settle]) -> Result<()> {
        let fired = self.workflows.inner.store.settle(batch, settles).await?;
        self.deliver(batch, fired).await
    }

    /// Sends what a batch fired, records it, and hands a finished child batch's end to
    /// its parent.
    pub(crate) fn deliver<'a>(
        &'a self,
        batch: &'a BatchId,
        fired: Fired,
    ) -> BoxFuture<'a, Result<()>> {
        async move {
            if fired.callbacks.is_empty() && !fired.finished {
                return Ok(());
            }
            for callback in &fired.callbacks {
                self.send(batch, callback).await?;
            }
            let kinds: Vec<_> = fired.callbacks.iter().map(|c| c.kind).collect();
            let handoff = self.workflows.inner.store.sent(batch, &kinds).await?;
            self.hand_off(batch, handoff).await
        }
        .boxed()
    }

    async fn hand_off(&self, batch: &BatchId, handoff: Handoff) -> Result<()> {
        let Handoff::Parent { member, failed } = handoff else {
            return Ok(());
        };
        let store = &self.workflows.inner.store;
        let settle = [Settle::Child {
            index: member.index,
            failed,
        }];
        let fired = store.settle(&member.batch, &settle).await?;
        store.done(batch).await?;
        self.deliver(&member.batch, fired).await
    }

    async fn send(&self, batch: &BatchId, callback: &Callback) -> Result<()> {
        let key = format!("wf.{batch}.{}", callback.kind);
        let message = Outgoing {
            id: callback.id.clone(),
            payload: callback.envelope.clone(),
        };
        self.dedup()?
            .send_deduplicated(
                &callback.queue,
                message,
                Deduplication::new(&key, DEDUP_WINDOW),
            )
            .await?;
        Ok(())
    }

    /// The transport's deduplicated sends: a callback or a resumed run is stored once
    /// however many relays send it.
    fn dedup(&self) -> bus_core::Result<&dyn Deduplicated> {
        self.transport
            .extras()
            .dedup
            .ok_or_else(|| unsupported(Capability::Deduplication))
    }

    /// One sweep of the open batches that are due for one.
    pub async fn sweep(&self) -> Result<Swept> {
        let store = &self.workflows.inner.store;
        let settings = self.workflows.inner.settings;
        let mut swept = Swept::default();
        for batch in store
            .due_for_sweep(SWEEP_BATCH, settings.sweep_every)
            .await?
        {
            swept.batches += 1;
            let Some(found) = store.inspect(&batch, settings.stale_after).await? else {
                store.unlist(&batch).await?;
                continue;
            };
            if !found.unsent.is_empty() || found.state == crate::BatchState::Fired {
                swept.callbacks += found.unsent.len();
                let fired = Fired {
                    callbacks: found.unsent,
                    finished: true,
                };
                self.deliver(&batch, fired).await?;
            } else if matches!(found.handoff, Handoff::Parent { .. }) {
                self.hand_off(&batch, found.handoff).await?;
            } else if found.handoff == Handoff::Done {
                store.unlist(&batch).await?;
            }
            swept.settles += self.resolve(&batch, &found.stale).await?;
        }
        Ok(swept)
    }

    /// Resolves marks whose confirmation did not come, by where their member is now.
    async fn resolve(&self, batch: &BatchId, stale: &[StaleMark]) -> Result<usize> {
        let Some(presence) = self.workflows.inner.store.presence() else {
            return Ok(0);
        };
        let mut settles = Vec::new();
        for mark in stale {
            // Each settle names the delivery the mark was written for: a newer delivery
            // may have written its own mark since, which only its own settle may count.
            let (index, receipt) = (mark.index, mark.receipt.clone());
            let settle = match presence.presence(&mark.source, &mark.receipt).await? {
                // Its settle may still come, or its lock expire (then it is stored again).
                Presence::Held => continue,
                // Back in its queue: its settle did not happen; it settles again.
                Presence::Stored => Settle::Drop { index, receipt },
                Presence::Dead if !mark.dead => Settle::Drop { index, receipt },
                // Acknowledged (or, for a dead mark, dead-lettered, and perhaps deleted).
                _ => Settle::Confirm {
                    index,
                    receipt: Some(receipt),
                },
            };
            settles.push(settle);
        }
        if settles.is_empty() {
            return Ok(0);
        }
        tracing::info!(%batch, settles = settles.len(), "resolved member settles left unconfirmed");
        self.settle(batch, &settles).await?;
        Ok(settles.len())
    }
}

/// The relay's task, running while any consumer of this transport is open.
#[derive(Debug, Default)]
pub(crate) struct RelayRun {
    state: Mutex<(usize, Option<CancellationToken>)>,
}

impl RelayRun {
    pub(crate) fn start(&self, relay: Relay) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 += 1;
        if state.1.is_none() {
            let stop = CancellationToken::new();
            tokio::spawn(relay.run(stop.clone()));
            state.1 = Some(stop);
        }
    }

    pub(crate) fn stop(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 = state.0.saturating_sub(1);
        if state.0 == 0 {
            if let Some(stop) = state.1.take() {
                stop.cancel();
            }
        }
    }
}
