//! Singleton processors (KnightBus's `ISingletonProcessor`): a queue consumed by one
//! host at a time across the fleet. The host's consumer for such a queue is wrapped in a
//! [`Gate`] that reserves only while this host holds the queue's lease in the transport;
//! a keeper task takes the lease, renews it every third of its ttl, and gives it up at
//! shutdown. The worker is unchanged: while the lease is elsewhere, `receive` returns
//! nothing after the usual idle wait.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::outcome::error_chain;
use super::routes::Routes;
use crate::records::ErrorRecord;
use crate::transport::{
    Consumer, ConsumerExtras, DeadLetterReason, Receipt, Received, SingletonLease, Source, Want,
};
use crate::{Error, MessageId, Result, Transport};

/// Longest a `receive` waits for the lease before returning empty, as an idle transport
/// does.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// A singleton queue's lease, made when the host is built.
pub(super) struct Singleton {
    queue: String,
    lease: Arc<dyn SingletonLease>,
    ttl: Duration,
}

impl fmt::Debug for Singleton {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Singleton")
            .field("queue", &self.queue)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// For each group of routes, in order, its lease if one of its processors is a
/// singleton. A singleton on a subscription, or on a transport without leases, is a
/// configuration error.
pub(super) fn leases(
    routes: &[Routes],
    transport: &dyn Transport,
) -> Result<Vec<Option<Singleton>>> {
    // One token per host: its leases tell its processes apart.
    let holder = format!("{}:{}", std::process::id(), MessageId::generate().as_str());
    routes
        .iter()
        .map(|group| {
            let Some(first) = group.registrations.iter().find(|r| r.settings.singleton) else {
                return Ok(None);
            };
            let Source::Queue(queue) = &first.source else {
                return Err(Error::Config(format!(
                    "{}: {} is a singleton processor, which only a command queue can have",
                    first.source, first.processor
                )));
            };
            let ttl = first.settings.singleton_ttl;
            let leases = transport.extras().leases.ok_or_else(|| {
                Error::Config(format!(
                    "{queue}: a singleton processor needs a transport with leases; this one has none"
                ))
            })?;
            let lease = leases.singleton_lease(queue, &holder, ttl)?;
            Ok(Some(Singleton {
                queue: queue.clone(),
                lease,
                ttl,
            }))
        })
        .collect()
}

impl Singleton {
    /// Wraps the queue's consumer in a gate and starts keeping the lease.
    pub(super) fn gate(self, inner: Box<dyn Consumer>) -> Arc<dyn Consumer> {
        let (held_tx, held) = watch::channel(None);
        let stop = CancellationToken::new();
        let keeper = tokio::spawn(keep(
            self.lease,
            self.ttl,
            self.queue.clone(),
            held_tx,
            stop.clone(),
        ));
        Arc::new(Gate {
            inner,
            queue: self.queue,
            held,
            keeper: Mutex::new(Some(keeper)),
            _stop_on_drop: stop.clone().drop_guard(),
            stop,
        })
    }
}

/// Takes the lease, renews it every third of `ttl`, and publishes until when it is
/// surely held (`None`: not held); gives it up when stopped.
async fn keep(
    lease: Arc<dyn SingletonLease>,
    ttl: Duration,
    queue: String,
    held: watch::Sender<Option<Instant>>,
    stop: CancellationToken,
) {
    let interval = ttl / 3;
    let mut until: Option<Instant> = None;
    loop {
        // Counted from before the call: the transport's ttl starts later, never earlier.
        let asked = Instant::now();
        let call = if until.is_some() {
            lease.renew()
        } else {
            lease.acquire()
        };
        let answer = tokio::time::timeout(interval, call)
            .await
            .unwrap_or_else(|_| {
                Err(Error::Transport(
                    "no answer within a third of the lease's ttl".into(),
                ))
            });
        match answer {
            Ok(true) => {
                if until.is_none() {
                    tracing::info!(%queue, "singleton lease taken: this host consumes the queue");
                }
                until = Some(asked + ttl);
            }
            Ok(false) => {
                if until.take().is_some() {
                    tracing::warn!(%queue, "singleton lease lost to another host: this host stops reserving");
                }
            }
            Err(e) => {
                tracing::warn!(%queue, error = %error_chain(&e), "singleton lease: the transport failed");
                if until.is_some_and(|u| Instant::now() >= u) {
                    until = None;
                    tracing::warn!(%queue, "singleton lease not renewed in time: this host stops reserving");
                }
            }
        }
        held.send_replace(until);
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(interval) => {}
        }
    }
    held.send_replace(None);
    if until.is_some() {
        if let Err(e) = lease.release().await {
            tracing::debug!(%queue, error = %error_chain(&e), "singleton lease not given up; it expires");
        }
    }
}

/// A singleton queue's consumer: the transport's, reserving only while the lease is held.
struct Gate {
    inner: Box<dyn Consumer>,
    queue: String,
    held: watch::Receiver<Option<Instant>>,
    keeper: Mutex<Option<JoinHandle<()>>>,
    stop: CancellationToken,
    /// Stops the keeper when the gate is dropped without `close`.
    _stop_on_drop: DropGuard,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("queue", &self.queue)
            .field("held", &*self.held.borrow())
            .finish_non_exhaustive()
    }
}

impl Gate {
    fn holds(&self) -> bool {
        self.held.borrow().is_some_and(|u| Instant::now() < u)
    }

    /// Waits until the lease is held (`true`), or `stop` fires or [`IDLE_WAIT`] passes.
    async fn until_held(&self, stop: &CancellationToken) -> bool {
        let mut held = self.held.clone();
        let deadline = Instant::now() + IDLE_WAIT;
        loop {
            if held.borrow_and_update().is_some_and(|u| Instant::now() < u) {
                return true;
            }
            tokio::select! {
                biased;
                () = stop.cancelled() => return false,
                () = tokio::time::sleep_until(deadline) => return false,
                changed = held.changed() => if changed.is_err() {
                    // The keeper is gone (closing): wait out the bound, never spin.
                    tokio::time::sleep_until(deadline).await;
                    return false;
                },
            }
        }
    }
}

#[async_trait]
impl Consumer for Gate {
    async fn receive(&self, want: Want, stop: &CancellationToken) -> Result<Received> {
        let held = if want.max == 0 {
            self.holds()
        } else {
            self.until_held(stop).await
        };
        if !held {
            return Ok(Received::default());
        }
        let received = self.inner.receive(want, stop).await?;
        if received.deliveries.is_empty() || self.holds() {
            return Ok(received);
        }
        // The lease was lost while the call waited: what it reserved goes back unrun.
        let receipts: Vec<Receipt> = received.deliveries.into_iter().map(|d| d.receipt).collect();
        self.inner.release(&receipts).await?;
        Ok(Received::new(Vec::new(), received.hold))
    }
    async fn ack(&self, receipts: &[Receipt]) -> Result<()> {
        self.inner.ack(receipts).await
    }
    async fn renew(&self, receipts: &[Receipt]) -> Result<Vec<bool>> {
        self.inner.renew(receipts).await
    }
    async fn retry(&self, receipt: &Receipt, delay: Duration, error: &ErrorRecord) -> Result<()> {
        self.inner.retry(receipt, delay, error).await
    }
    async fn dead_letter(
        &self,
        receipt: &Receipt,
        reason: DeadLetterReason,
        error: Option<&ErrorRecord>,
    ) -> Result<()> {
        self.inner.dead_letter(receipt, reason, error).await
    }
    async fn release(&self, receipts: &[Receipt]) -> Result<()> {
        self.inner.release(receipts).await
    }
    async fn recover(&self) -> Result<usize> {
        self.inner.recover().await
    }
    fn extras(&self) -> ConsumerExtras<'_> {
        self.inner.extras()
    }
    /// Gives the lease up (after the worker settled everything it held), then closes
    /// the transport's consumer.
    async fn close(&self) -> Result<()> {
        let keeper = self
            .keeper
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(keeper) = keeper {
            self.stop.cancel();
            let _ = keeper.await;
        }
        self.inner.close().await
    }
}
