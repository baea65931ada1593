//! One worker per registered processor: fetch, dispatch, renew, recover, ack.
//!
//! Capacity follows KnightBus: at most `max_concurrent_calls` handlers run, and at most
//! `prefetch_count` more messages wait reserved in a local buffer. A fetch slot is held
//! from reservation until the message's final transition, so the worker never holds more
//! than `max_concurrent_calls + prefetch_count` messages.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Registration;
use crate::middleware::Next;
use crate::{
    Bus, Consumer, Context, DeadLetterReason, Delivery, Disposition, Envelope, ErrorRecord,
    Middleware, Receipt,
};

/// Pause after a transport error before the next fetch, so an outage is not a busy loop.
const ERROR_PAUSE: Duration = Duration::from_millis(500);
/// Most acks sent in one call.
const ACK_BATCH: usize = 512;

pub(super) struct Worker {
    pub(super) registration: Registration,
    pub(super) consumer: Arc<dyn Consumer>,
    pub(super) middleware: Arc<[Arc<dyn Middleware>]>,
    pub(super) bus: Bus,
    pub(super) recovery_interval: Duration,
    pub(super) shutdown_grace: Duration,
}

/// Messages this worker holds (reserved and not yet settled), with the token that
/// cancels a running handler when its lock is lost.
type Held = Arc<Mutex<HashMap<Receipt, CancellationToken>>>;

fn lock(held: &Held) -> std::sync::MutexGuard<'_, HashMap<Receipt, CancellationToken>> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What happens to a message after its handler ran (or could not run).
enum Outcome {
    Ack,
    Retry(Duration, ErrorRecord),
    DeadLetter(DeadLetterReason, ErrorRecord),
}

impl Worker {
    pub(super) async fn run(self, stop: CancellationToken) {
        let this = Arc::new(self);
        let settings = &this.registration.settings;
        let capacity = settings.max_concurrent() + settings.prefetch();
        let held: Held = Arc::default();
        let background = CancellationToken::new();
        let (buffer_tx, buffer_rx) = mpsc::unbounded_channel();
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();

        let fetcher = tokio::spawn(Arc::clone(&this).fetch(
            capacity,
            Arc::clone(&held),
            buffer_tx,
            stop.clone(),
        ));
        let acker = tokio::spawn(Arc::clone(&this).ack_loop(ack_rx));
        let renewer =
            tokio::spawn(Arc::clone(&this).renew_loop(Arc::clone(&held), background.clone()));
        let recoverer = tokio::spawn(Arc::clone(&this).recover_loop(background.clone()));

        let mut handlers = Arc::clone(&this)
            .dispatch(buffer_rx, Arc::clone(&held), ack_tx, &stop, fetcher)
            .await;

        // Shutdown: tell running handlers (their context's token), let them finish within
        // the grace period, then give up on them.
        for token in lock(&held).values() {
            token.cancel();
        }
        let grace = tokio::time::sleep(this.shutdown_grace);
        tokio::pin!(grace);
        loop {
            tokio::select! {
                next = handlers.join_next() => if next.is_none() { break },
                () = &mut grace => {
                    tracing::warn!(source = %this.registration.source, running = handlers.len(),
                        "grace period over: abandoning handlers still running");
                    handlers.abort_all();
                    while handlers.join_next().await.is_some() {}
                    break;
                }
            }
        }
        // Whatever is still held was abandoned mid-handler: a failed delivery.
        let abandoned: Vec<Receipt> = lock(&held).drain().map(|(r, _)| r).collect();
        let error = ErrorRecord::now("the host shut down before the handler finished");
        for receipt in &abandoned {
            if let Err(e) = this.consumer.retry(receipt, Duration::ZERO, &error).await {
                tracing::warn!(error = %e, "could not return an abandoned message; its lock will expire");
            }
        }
        // The ack channel closes when the last handler's sender is dropped.
        let _ = acker.await;
        background.cancel();
        let _ = renewer.await;
        let _ = recoverer.await;
        if let Err(e) = this.consumer.close().await {
            tracing::debug!(error = %e, "closing the consumer failed");
        }
    }

    /// Reserves messages whenever a slot is free, waiting on the transport when idle.
    async fn fetch(
        self: Arc<Self>,
        capacity: usize,
        held: Held,
        buffer: mpsc::UnboundedSender<(Delivery, OwnedSemaphorePermit)>,
        stop: CancellationToken,
    ) {
        let slots = Arc::new(Semaphore::new(capacity));
        loop {
            let mut permit = tokio::select! {
                biased;
                () = stop.cancelled() => break,
                p = Arc::clone(&slots).acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            };
            let more = slots.available_permits();
            if more > 0 {
                if let Ok(p) = Arc::clone(&slots).try_acquire_many_owned(more as u32) {
                    permit.merge(p);
                }
            }
            match self.consumer.receive(permit.num_permits(), &stop).await {
                Ok(deliveries) => {
                    let mut held = lock(&held);
                    for delivery in deliveries {
                        let Some(slot) = permit.split(1) else { break };
                        held.insert(delivery.receipt.clone(), CancellationToken::new());
                        // The dispatcher outlives the fetcher, so the send cannot fail.
                        let _ = buffer.send((delivery, slot));
                    }
                }
                Err(e) => {
                    tracing::warn!(source = %self.registration.source, error = %e, "receive failed; retrying");
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(ERROR_PAUSE) => {}
                    }
                }
            }
        }
    }

    /// Starts buffered messages as handler slots free up; at shutdown, releases the
    /// buffered ones that never started and returns the running handlers.
    async fn dispatch(
        self: Arc<Self>,
        mut buffer: mpsc::UnboundedReceiver<(Delivery, OwnedSemaphorePermit)>,
        held: Held,
        ack_tx: mpsc::UnboundedSender<Receipt>,
        stop: &CancellationToken,
        fetcher: tokio::task::JoinHandle<()>,
    ) -> JoinSet<()> {
        let running = Arc::new(Semaphore::new(self.registration.settings.max_concurrent()));
        let mut handlers = JoinSet::new();
        loop {
            let next = tokio::select! {
                biased;
                () = stop.cancelled() => None,
                Some(_) = handlers.join_next(), if !handlers.is_empty() => continue,
                next = buffer.recv() => next,
            };
            let Some((delivery, slot)) = next else { break };
            let permit = tokio::select! {
                biased;
                () = stop.cancelled() => {
                    self.release(&held, vec![delivery.receipt]).await;
                    break;
                }
                p = Arc::clone(&running).acquire_owned() => p,
            };
            let Ok(permit) = permit else { break };
            let token = lock(&held)
                .get(&delivery.receipt)
                .cloned()
                .unwrap_or_default();
            let this = Arc::clone(&self);
            let (held, ack_tx) = (Arc::clone(&held), ack_tx.clone());
            handlers.spawn(async move {
                let receipt = delivery.receipt.clone();
                let outcome = this.handle(delivery, token).await;
                this.settle(&receipt, outcome, &ack_tx).await;
                lock(&held).remove(&receipt);
                drop((permit, slot));
            });
        }
        // Stop fetching, then hand back everything reserved that never started.
        let _ = fetcher.await;
        buffer.close();
        let mut unstarted = Vec::new();
        while let Ok((delivery, _slot)) = buffer.try_recv() {
            unstarted.push(delivery.receipt);
        }
        self.release(&held, unstarted).await;
        handlers
    }

    async fn release(&self, held: &Held, receipts: Vec<Receipt>) {
        if receipts.is_empty() {
            return;
        }
        if let Err(e) = self.consumer.release(&receipts).await {
            tracing::warn!(error = %e, count = receipts.len(), "could not release prefetched messages; their locks will expire");
        }
        let mut held = lock(held);
        for receipt in &receipts {
            held.remove(receipt);
        }
    }

    /// Decodes, checks and runs one message through the middleware and its handler.
    async fn handle(&self, delivery: Delivery, cancellation: CancellationToken) -> Outcome {
        let registration = &self.registration;
        let envelope = match Envelope::decode(&delivery.payload) {
            Ok(envelope) => envelope,
            Err(e) => {
                return Outcome::DeadLetter(
                    DeadLetterReason::Undecodable,
                    ErrorRecord::now(e.to_string()),
                )
            }
        };
        if envelope.message_type != registration.message.name() {
            let error = format!(
                "no processor for message type `{}` on {}",
                envelope.message_type, registration.source
            );
            return Outcome::DeadLetter(DeadLetterReason::UnknownType, ErrorRecord::now(error));
        }
        let limit = registration.settings.delivery_limit();
        if delivery.delivery_count > limit {
            let error = format!(
                "delivered {} times; the limit is {limit}",
                delivery.delivery_count
            );
            return Outcome::DeadLetter(DeadLetterReason::DeliveryLimit, ErrorRecord::now(error));
        }
        let span = tracing::info_span!(
            "bus.handle",
            message_id = %envelope.id,
            message_type = %envelope.message_type,
            delivery_count = delivery.delivery_count,
            traceparent = envelope.headers.get("traceparent").map(String::as_str),
        );
        #[cfg(feature = "opentelemetry")]
        crate::otel::continue_trace(&span, &envelope.headers);
        let ctx = Context {
            bus: self.bus.inheriting(&envelope.headers),
            message_id: envelope.id,
            message_type: envelope.message_type,
            delivery_count: delivery.delivery_count,
            headers: envelope.headers,
            sent_at_ms: envelope.sent_at_ms,
            cancellation,
        };
        let handler = match (registration.invoke)(envelope.body, envelope.format, ctx.clone()) {
            Ok(handler) => handler,
            Err(e) => {
                return Outcome::DeadLetter(
                    DeadLetterReason::Undecodable,
                    ErrorRecord::now(e.to_string()),
                )
            }
        };
        let result = AssertUnwindSafe(Next::new(&self.middleware, handler).run(&ctx))
            .catch_unwind()
            .instrument(span)
            .await;
        let (disposition, error) = match result {
            Ok(Ok(())) => return Outcome::Ack,
            Ok(Err(e)) => (e.disposition(), error_chain(e.source())),
            Err(panic) => (
                Disposition::Retry,
                format!("handler panicked: {}", panic_message(&*panic)),
            ),
        };
        let error = ErrorRecord::now(error);
        let delay = match disposition {
            Disposition::DeadLetter => {
                return Outcome::DeadLetter(DeadLetterReason::Rejected, error)
            }
            Disposition::RetryAfter(delay) => delay,
            _ => registration
                .settings
                .backoff()
                .delay(delivery.delivery_count),
        };
        if delivery.delivery_count >= limit {
            Outcome::DeadLetter(DeadLetterReason::DeliveryLimit, error)
        } else {
            Outcome::Retry(delay, error)
        }
    }

    async fn settle(
        &self,
        receipt: &Receipt,
        outcome: Outcome,
        ack_tx: &mpsc::UnboundedSender<Receipt>,
    ) {
        let result = match outcome {
            Outcome::Ack => {
                let _ = ack_tx.send(receipt.clone());
                return;
            }
            Outcome::Retry(delay, error) => self.consumer.retry(receipt, delay, &error).await,
            Outcome::DeadLetter(reason, error) => {
                tracing::warn!(source = %self.registration.source, %reason, error = %error.message, "dead-lettering a message");
                self.consumer
                    .dead_letter(receipt, reason, Some(&error))
                    .await
            }
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "could not settle a message; its lock will expire and it will be retried");
        }
    }

    /// Sends acks in batches: whatever accumulated while the previous batch was in flight.
    async fn ack_loop(self: Arc<Self>, mut acks: mpsc::UnboundedReceiver<Receipt>) {
        let mut batch = Vec::with_capacity(ACK_BATCH);
        while acks.recv_many(&mut batch, ACK_BATCH).await > 0 {
            if let Err(e) = self.consumer.ack(&batch).await {
                tracing::warn!(error = %e, count = batch.len(), "ack failed; these messages will be redelivered");
            }
            batch.clear();
        }
    }

    /// Extends the locks of everything held, three times per lock timeout.
    async fn renew_loop(self: Arc<Self>, held: Held, done: CancellationToken) {
        let period = self.registration.settings.lock_timeout() / 3;
        loop {
            tokio::select! {
                () = done.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            let receipts: Vec<Receipt> = lock(&held).keys().cloned().collect();
            if receipts.is_empty() {
                continue;
            }
            match self.consumer.renew(&receipts).await {
                Ok(kept) => {
                    let held = lock(&held);
                    for (receipt, kept) in receipts.iter().zip(kept) {
                        if !kept {
                            if let Some(token) = held.get(receipt) {
                                tracing::warn!(source = %self.registration.source, "lock lost; cancelling the handler");
                                token.cancel();
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "lock renewal failed; will try again"),
            }
        }
    }

    /// Returns messages of crashed consumers to the queue, at start and then periodically.
    async fn recover_loop(self: Arc<Self>, done: CancellationToken) {
        loop {
            if let Err(e) = self.consumer.recover().await {
                tracing::warn!(error = %e, "recovery sweep failed; will try again");
            }
            tokio::select! {
                () = done.cancelled() => return,
                () = tokio::time::sleep(self.recovery_interval) => {}
            }
        }
    }
}

/// An error and its sources, as one line.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
