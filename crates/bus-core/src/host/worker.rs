//! One worker per registered processor: fetch, dispatch, renew, recover, ack.
//!
//! Capacity follows KnightBus: at most `max_concurrent_calls` handlers run, and at most
//! `prefetch_count` more messages wait reserved in a local buffer. A fetch slot is held
//! from reservation until the handler's outcome is applied (an ack queued, a retry or
//! dead letter done), so the worker never holds more than `max_concurrent_calls +
//! prefetch_count` messages it has not settled.
//!
//! Costs are paid per fetched batch where the semantics allow: one lock of the held map
//! per batch, one task per chunk of up to [`CHUNK`] handlers (each handler still has its
//! own panic guard, span and cancellation token), acks queued per group of handlers that
//! finish together.
//!
//! Messages recovered from a crashed consumer are run alone (the transport says when
//! they wait): the worker stops fetching, settles all it holds, then takes them one at
//! a time, so a message that kills its process is charged only its own deliveries.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::future::{BoxFuture, OptionFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::instrument::WithSubscriber;
use tracing::Instrument;

use super::dispatch::Dispatch;
use super::handle::delivery_span;
use super::held::Held;
use super::metrics::{Op, WorkerMetrics};
use super::outcome::{error_chain, panic_message, Outcome};
use super::Registration;
use crate::cancel::Cancel;
use crate::records::ErrorRecord;
use crate::transport::{Consumer, Delivery, Hold, Receipt, Want};

/// Pauses after failed fetches: doubling from the first to the last, so an outage is
/// neither a busy loop nor a long silence after Redis returns.
const ERROR_PAUSE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));
/// Most acks sent in one call.
const ACK_BATCH: usize = 512;
/// How long shutdown may spend settling with the transport after the grace period
/// (returning messages, flushing acks, closing): what it cannot settle in that time,
/// lock expiry recovers.
pub(crate) const SETTLE_BOUND: Duration = Duration::from_secs(2);

pub(super) struct Worker {
    /// The source's first processor: its source and settings drive the consumer.
    pub(super) registration: Registration,
    /// One message's path: decode, route, run, decide.
    pub(super) dispatch: Dispatch,
    pub(super) consumer: Arc<dyn Consumer>,
    pub(super) recovery_interval: Duration,
    pub(super) shutdown_grace: Duration,
    pub(super) metrics: WorkerMetrics,
    /// Where handlers run: threads of their own (see `handler_runtime`).
    pub(super) handler_runtime: Arc<super::handler_runtime::HandlerRuntime>,
    /// Its `max_concurrent_calls` handler slots.
    pub(super) slots: HandlerSlots,
    /// Whether what it reserved may start (its consumer's layers may stop it too).
    pub(super) starts: Starts,
}

/// A worker's handler slots: one is taken for each handler from its start until its
/// outcome is applied, so those in use are the handlers running (the heartbeat's
/// in-flight figure).
#[derive(Debug, Clone)]
pub(super) struct HandlerSlots {
    free: Arc<Semaphore>,
    size: usize,
}

impl HandlerSlots {
    pub(super) fn new(size: usize) -> Self {
        HandlerSlots {
            free: Arc::new(Semaphore::new(size)),
            size,
        }
    }

    /// The handlers running now.
    pub(super) fn in_use(&self) -> usize {
        self.size.saturating_sub(self.free.available_permits())
    }
}

/// One fetched batch waiting for handler slots: each message with its handler's cancellation,
/// the batch's fetch slots (one per message), and the epoch of [`Starts`] when its reserve
/// was asked for.
struct Fetched {
    deliveries: std::vec::IntoIter<(Delivery, Cancel)>,
    slots: OwnedSemaphorePermit,
    epoch: u64,
}

/// Whether the messages a worker reserved so far may still start. A hold in the answer to
/// a reserve or a look stops them, and so may a layer around its consumer, at the moment
/// it decides; the worker's dispatcher then sends back what it reserved and has not
/// started. Shared, so that a layer needs no more of the worker than this.
#[derive(Debug, Clone, Default)]
pub(crate) struct Starts(Arc<StartsInner>);

#[derive(Debug, Default)]
struct StartsInner {
    /// How many times starts were stopped: a batch that came in before the last time
    /// never starts.
    epoch: AtomicU64,
    /// Starts were stopped: the dispatcher releases what waits.
    stopped: Notify,
}

impl Starts {
    /// No message reserved so far may start: they go back.
    pub(crate) fn stop(&self) {
        self.0.epoch.fetch_add(1, Ordering::SeqCst);
        self.0.stopped.notify_one();
    }

    /// The current epoch: batches from now on may start.
    fn epoch(&self) -> u64 {
        self.0.epoch.load(Ordering::SeqCst)
    }

    /// Completes at the next stop (or at once for one no waiter saw yet).
    fn stopped(&self) -> tokio::sync::futures::Notified<'_> {
        self.0.stopped.notified()
    }
}

/// What the fetcher and the dispatcher share: the handler slots, how many reserved messages
/// wait unstarted, and whether they may start.
struct Buffer {
    /// Free handler slots (`max_concurrent_calls` in all).
    running: Arc<Semaphore>,
    /// Reserved messages not started yet.
    waiting: AtomicUsize,
    starts: Starts,
}

impl Buffer {
    fn new(handlers: &HandlerSlots, starts: Starts) -> Self {
        Buffer {
            running: Arc::clone(&handlers.free),
            waiting: AtomicUsize::new(0),
            starts,
        }
    }

    fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    fn add(&self, n: usize) {
        self.waiting.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` left the buffer (started, or released).
    fn started(&self, n: usize) {
        self.waiting.fetch_sub(n, Ordering::Relaxed);
    }

    /// How many more messages could start at once: the free handler slots that no
    /// waiting message will take.
    fn startable(&self) -> usize {
        self.running
            .available_permits()
            .saturating_sub(self.waiting())
    }
}

/// How often the fetcher looks at what holds its source back while reserved messages wait
/// unstarted: the longest such a message can start after its source stopped starts (a
/// pause) is this plus one round trip.
const HOLD_LOOK: Duration = Duration::from_millis(250);

/// Most messages one handler task runs (concurrently, each isolated from the others'
/// panics): enough to spread the cost of a task, and of handing it to a handler thread,
/// over many messages (256 ran 4-8% less client CPU per message than 64 at 1,000
/// concurrent, docs/performance.md), few enough that a fetched batch of up to 1,000 still
/// spreads over the runtime's threads.
const CHUNK: usize = 256;

impl Worker {
    pub(super) async fn run(self, stop: CancellationToken) {
        let this = Arc::new(self);
        let settings = &this.registration.settings;
        let capacity = settings.max_concurrent_calls + settings.prefetch_count;
        let held = Arc::new(Held::default());
        let background = CancellationToken::new();
        let (buffer_tx, buffer_rx) = mpsc::unbounded_channel();
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();
        let buffer = Arc::new(Buffer::new(&this.slots, this.starts.clone()));

        let fetcher = tokio::spawn(Arc::clone(&this).fetch(
            capacity,
            Arc::clone(&held),
            (buffer_tx, Arc::clone(&buffer)),
            stop.clone(),
        ));
        let acker = tokio::spawn(Arc::clone(&this).ack_loop(ack_rx, Arc::clone(&held)));
        let renewer =
            tokio::spawn(Arc::clone(&this).renew_loop(Arc::clone(&held), background.clone()));
        let recoverer = tokio::spawn(Arc::clone(&this).recover_loop(background.clone()));

        let (mut handlers, stopped) = Arc::clone(&this)
            .dispatch(
                (buffer_rx, buffer),
                Arc::clone(&held),
                ack_tx,
                &stop,
                fetcher,
            )
            .await;

        // Shutdown: tell running handlers (their context's token), let them finish within
        // the grace period, then give up on them. Both count from the stop, so stopping
        // the fetcher and releasing prefetched messages (running beside the handlers) do
        // not lengthen them; everything after the grace period is bounded too, whatever
        // the transport does: the whole shutdown ends within grace + SETTLE_BOUND.
        held.cancel_all();
        let grace_end = stopped + this.shutdown_grace;
        let settle_end = grace_end + SETTLE_BOUND;
        loop {
            tokio::select! {
                next = handlers.join_next() => if next.is_none() { break },
                () = tokio::time::sleep_until(grace_end) => {
                    tracing::warn!(source = %this.registration.source, handler_tasks = handlers.len(),
                        "grace period over: abandoning handlers still running");
                    handlers.abort_all();
                    // A handler blocking its thread cannot be aborted: wait a bounded time.
                    let joined = async { while handlers.join_next().await.is_some() {} };
                    if tokio::time::timeout(SETTLE_BOUND, joined).await.is_err() {
                        tracing::warn!(source = %this.registration.source,
                            "handlers still block their threads after being abandoned; not waiting for them");
                    }
                    break;
                }
            }
        }
        // The ack channel closes when the last handler's sender is dropped.
        this.bounded("flushing acks", settle_end, acker).await;
        // Whatever is still held was abandoned mid-handler: a failed delivery.
        let abandoned = held.drain();
        if !abandoned.is_empty() {
            let error = ErrorRecord::now("the host shut down before the handler finished");
            let consumer = Arc::clone(&this.consumer);
            let returning = tokio::spawn(async move {
                for receipt in &abandoned {
                    if let Err(e) = consumer.retry(receipt, Duration::ZERO, &error).await {
                        tracing::warn!(error = %error_chain(&e), "could not return an abandoned message; its lock will expire");
                    }
                }
            });
            this.bounded("returning abandoned messages", settle_end, returning)
                .await;
        }
        background.cancel();
        this.bounded("stopping lock renewal", settle_end, renewer)
            .await;
        this.bounded("stopping recovery", settle_end, recoverer)
            .await;
        let consumer = Arc::clone(&this.consumer);
        let closing = tokio::spawn(async move {
            if let Err(e) = consumer.close().await {
                tracing::debug!(error = %error_chain(&e), "closing the consumer failed");
            }
        });
        this.bounded("closing the consumer", settle_end, closing)
            .await;
    }

    /// Waits for a shutdown step until `deadline`, then abandons it.
    async fn bounded(&self, what: &str, deadline: Instant, task: JoinHandle<()>) {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            abort.abort();
            tracing::warn!(source = %self.registration.source, "shutdown: gave up {what}: the transport did not answer in time; unsettled messages return when their locks expire");
        }
    }

    /// Reserves messages whenever a slot is free, waiting on the transport when idle.
    /// While reserved messages wait unstarted, it also looks at what holds the source back
    /// every [`HOLD_LOOK`], so that they go back unstarted as soon as no message may start
    /// (a pause, say), however long the running handlers take.
    async fn fetch(
        self: Arc<Self>,
        capacity: usize,
        held: Arc<Held>,
        (channel, buffer): (mpsc::UnboundedSender<Fetched>, Arc<Buffer>),
        stop: CancellationToken,
    ) {
        let slots = Arc::new(Semaphore::new(capacity));
        let mut outage = Outage::default();
        let mut alone = false;
        loop {
            let mut permit = tokio::select! {
                biased;
                () = stop.cancelled() => break,
                p = Arc::clone(&slots).acquire_owned() => match p { Ok(p) => p, Err(_) => break },
                () = tokio::time::sleep(HOLD_LOOK), if buffer.waiting() > 0 => {
                    let look = self.consumer.receive(Want::peek(), &stop);
                    if let Some(Ok(received)) = finish(&stop, look).await {
                        self.metrics.hold(received.hold);
                        if received.hold.stops_starts() {
                            buffer.starts.stop();
                        }
                    }
                    continue;
                }
            };
            let want = if alone {
                // Recovered messages run alone: first settle everything held.
                tokio::select! {
                    biased;
                    () = stop.cancelled() => break,
                    () = held.until_empty() => {}
                }
                Want::alone()
            } else {
                let more = slots.available_permits();
                if more > 0 {
                    if let Ok(p) = Arc::clone(&slots).try_acquire_many_owned(more as u32) {
                        permit.merge(p);
                    }
                }
                Want::new(permit.num_permits()).now(buffer.startable())
            };
            // Read before the reserve: a stop of starts while it is on its way (by a layer
            // around the consumer, as a handler's outcome is settled) makes what it takes
            // stale, so it goes back unstarted.
            let epoch = buffer.starts.epoch();
            let Some(received) = finish(&stop, self.consumer.receive(want, &stop)).await else {
                break;
            };
            match received {
                Ok(received) => {
                    let mut deliveries = received.deliveries;
                    self.metrics.hold(received.hold);
                    self.metrics.consumed(deliveries.len());
                    outage.ended(&self);
                    if received.hold.stops_starts() {
                        buffer.starts.stop();
                    }
                    // Alone until no recovered message is left to take.
                    alone =
                        received.hold == Hold::Isolation || (want.alone && !deliveries.is_empty());
                    // More than asked for is never held (its lock expires).
                    deliveries.truncate(permit.num_permits());
                    let Some(slots) = permit.split(deliveries.len()) else {
                        continue;
                    };
                    if deliveries.is_empty() {
                        continue;
                    }
                    let cancels = held.insert_all(deliveries.iter().map(|d| &d.receipt));
                    for _ in 0..deliveries.len() {
                        self.metrics.buffered();
                    }
                    buffer.add(deliveries.len());
                    let deliveries: Vec<_> = deliveries.into_iter().zip(cancels).collect();
                    // The dispatcher outlives the fetcher, so the send cannot fail.
                    let _ = channel.send(Fetched {
                        deliveries: deliveries.into_iter(),
                        slots,
                        epoch,
                    });
                }
                Err(e) => {
                    let pause = outage.failed(&self, &e);
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
    }

    /// Starts buffered messages as handler slots free up, in tasks of up to [`CHUNK`]
    /// messages; at shutdown, releases the buffered ones that never started and returns
    /// the running handlers.
    async fn dispatch(
        self: Arc<Self>,
        (mut channel, buffer): (mpsc::UnboundedReceiver<Fetched>, Arc<Buffer>),
        held: Arc<Held>,
        ack_tx: mpsc::UnboundedSender<Vec<Receipt>>,
        stop: &CancellationToken,
        fetcher: JoinHandle<()>,
    ) -> (JoinSet<()>, Instant) {
        let running = Arc::clone(&buffer.running);
        let mut handlers = JoinSet::new();
        let mut current: Option<Fetched> = None;
        loop {
            let fetched = match current.as_mut() {
                // A batch that came in before starts were stopped goes back unstarted.
                Some(fetched) if fetched.epoch < buffer.starts.epoch() => {
                    let stale = self.unstarted(current.take(), &buffer);
                    self.release(stale, &held, Instant::now() + SETTLE_BOUND)
                        .await;
                    continue;
                }
                Some(fetched) if fetched.deliveries.len() > 0 => fetched,
                _ => {
                    let next = tokio::select! {
                        biased;
                        () = stop.cancelled() => None,
                        () = buffer.starts.stopped() => continue,
                        Some(_) = handlers.join_next(), if !handlers.is_empty() => continue,
                        next = channel.recv() => next,
                    };
                    let Some(next) = next else { break };
                    // (Looked at above first: it may predate a stop of starts too.)
                    current = Some(next);
                    continue;
                }
            };
            let permit = tokio::select! {
                biased;
                () = stop.cancelled() => break,
                // Starts were stopped: the batch is looked at again (above).
                () = buffer.starts.stopped() => continue,
                Some(_) = handlers.join_next(), if !handlers.is_empty() => continue,
                p = Arc::clone(&running).acquire_owned() => p,
            };
            let Ok(mut permit) = permit else { break };
            // Every free handler slot, up to a chunk: handlers release theirs in groups
            // (see `run_chunk`), so a chunk is rarely small.
            let more = (fetched.deliveries.len().min(CHUNK) - 1).min(running.available_permits());
            if more > 0 {
                if let Ok(p) = Arc::clone(&running).try_acquire_many_owned(more as u32) {
                    permit.merge(p);
                }
            }
            let n = permit.num_permits();
            let Some(slots) = fetched.slots.split(n) else {
                break;
            };
            let chunk: Vec<_> = fetched.deliveries.by_ref().take(n).collect();
            buffer.started(n);
            for _ in 0..n {
                self.metrics.unbuffered();
            }
            let run = Arc::clone(&self).run_chunk(
                chunk,
                permit,
                slots,
                Arc::clone(&held),
                ack_tx.clone(),
            );
            // The handler threads log to the subscriber in effect here (a thread-local
            // default one too, as tests set).
            handlers.spawn_on(run.with_current_subscriber(), self.handler_runtime.handle());
        }
        // Stop fetching, then hand back everything reserved that never started, within
        // the shutdown's bound (grace + SETTLE_BOUND from the stop).
        let stopped = Instant::now();
        let settle_end = stopped + self.shutdown_grace + SETTLE_BOUND;
        let _ = fetcher.await;
        channel.close();
        let rest = std::iter::from_fn(|| channel.try_recv().ok());
        let unstarted = self.unstarted(current.into_iter().chain(rest), &buffer);
        self.release(
            unstarted,
            &held,
            (Instant::now() + SETTLE_BOUND).min(settle_end),
        )
        .await;
        (handlers, stopped)
    }

    /// The receipts of the messages of these batches that did not start; their fetch
    /// slots are given back.
    fn unstarted(
        &self,
        batches: impl IntoIterator<Item = Fetched>,
        buffer: &Buffer,
    ) -> Vec<Receipt> {
        let mut unstarted = Vec::new();
        for fetched in batches {
            for (delivery, _) in fetched.deliveries {
                self.metrics.unbuffered();
                unstarted.push(delivery.receipt);
            }
        }
        buffer.started(unstarted.len());
        unstarted
    }

    /// Hands reserved messages that never started back to the transport (their delivery
    /// count taken back), waiting for it until `deadline`; they are no longer held either
    /// way (what the transport did not take back returns when its lock expires).
    async fn release(&self, unstarted: Vec<Receipt>, held: &Held, deadline: Instant) {
        if unstarted.is_empty() {
            return;
        }
        self.metrics.released(unstarted.len());
        let consumer = Arc::clone(&self.consumer);
        let releasing = {
            let unstarted = unstarted.clone();
            tokio::spawn(async move {
                if let Err(e) = consumer.release(&unstarted).await {
                    tracing::warn!(error = %error_chain(&e), count = unstarted.len(), "could not release prefetched messages; their locks will expire");
                }
            })
        };
        self.bounded("releasing prefetched messages", deadline, releasing)
            .await;
        held.remove(&unstarted);
    }

    /// Runs a chunk of messages concurrently in one task, each in its own span, its own
    /// panic guard and with its own token. Handler and fetch slots are given back, and
    /// acks queued, for each group of handlers that finish together.
    ///
    /// Each message's future is polled once as it is made, in a box the chunk reuses:
    /// only one that is not done by then gets a box of its own and a place in the set
    /// polled as they wake. Most handlers finish in their first poll, and a set's entry
    /// per message was a tenth of the host's instructions per message.
    async fn run_chunk(
        self: Arc<Self>,
        chunk: Vec<(Delivery, Cancel)>,
        mut running: OwnedSemaphorePermit,
        mut slots: OwnedSemaphorePermit,
        held: Arc<Held>,
        ack_tx: mpsc::UnboundedSender<Vec<Receipt>>,
    ) {
        let this = &*self;
        let held = &*held;
        let start = |(mut delivery, cancel): (Delivery, Cancel)| {
            let span = delivery_span(&this.registration.source, &delivery);
            async move {
                let handled = outcome_of(this.dispatch.handle(&mut delivery, cancel.clone()));
                let outcome = this.metrics.process(handled).await;
                this.dispatch.observe_failure(&delivery.payload, &outcome);
                this.settle(delivery.receipt, outcome, &cancel, held).await
            }
            .instrument(span)
        };
        // Gives back the slots of `done` finished handlers and queues their acks.
        let mut finished = |done: usize, acks: &mut Vec<Receipt>| {
            drop((running.split(done), slots.split(done)));
            if !acks.is_empty() {
                if let Err(unsent) = ack_tx.send(std::mem::take(acks)) {
                    held.remove(&unsent.0);
                }
            }
        };
        let (mut done, mut acks) = (0, Vec::new());
        let mut handling = FuturesUnordered::new();
        let mut slot = Box::pin(OptionFuture::from(None));
        for message in chunk {
            slot.set(Some(start(message)).into());
            match std::future::poll_fn(|cx| Poll::Ready(slot.as_mut().poll(cx))).await {
                Poll::Ready(ack) => {
                    done += 1;
                    acks.extend(ack.flatten());
                }
                Poll::Pending => {
                    handling.push(std::mem::replace(&mut slot, Box::pin(None.into())));
                }
            }
        }
        drop(slot);
        finished(done, &mut acks);
        while let Some(first) = handling.next().await {
            let mut done = 1;
            acks.extend(first.flatten());
            while let Some(Some(next)) = handling.next().now_or_never() {
                done += 1;
                acks.extend(next.flatten());
            }
            finished(done, &mut acks);
        }
    }

    /// Applies a handler's outcome (inside the delivery's span). An ack is returned, to
    /// be queued for the batching acker, which lets go of the message once it is flushed.
    /// A retry or dead letter that the transport does not answer is tried again, the
    /// message still held (its lock renewed), until it is done, its lock is lost or the
    /// host stops (`lost`, the handler's token): a passing outage does not deliver it
    /// again.
    async fn settle(
        &self,
        receipt: Receipt,
        outcome: Outcome,
        lost: &Cancel,
        held: &Held,
    ) -> Option<Receipt> {
        if let Outcome::Ack = outcome {
            tracing::trace!("handled");
            lost.finish();
            return Some(receipt);
        }
        self.settle_failed(&receipt, outcome, lost).await;
        held.remove([&receipt]);
        None
    }

    /// Retries or dead-letters a message, as [`Worker::settle`] says. Boxed: failures
    /// are rare, and their future inline (the calls, the pauses) would make every
    /// message's future too big for the allocator's per-thread cache.
    fn settle_failed<'a>(
        &'a self,
        receipt: &'a Receipt,
        outcome: Outcome,
        lost: &'a Cancel,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.dispatch.scope.after_ack.forget([receipt]);
            match outcome {
                // (Settled by `settle`.)
                Outcome::Ack => {}
                Outcome::Retry(delay, error) => {
                    tracing::info!(?delay, error = %error.message, "handler failed; retrying after the delay");
                    self.until_settled(lost, || {
                        let retry = self.consumer.retry(receipt, delay, &error);
                        self.metrics.call(Op::Retry, retry)
                    })
                    .await;
                }
                Outcome::DeadLetter(reason, error) => {
                    tracing::warn!(%reason, error = %error.message, "dead-lettering the message");
                    self.until_settled(lost, || {
                        let dead_letter = self.consumer.dead_letter(receipt, reason, Some(&error));
                        self.metrics.call(Op::DeadLetter, dead_letter)
                    })
                    .await;
                }
            }
        })
    }

    /// Makes a settling call until the transport answers, pausing in between, or until
    /// `lost` fires (lock lost, host stopping).
    async fn until_settled<F, Fut>(&self, lost: &Cancel, mut call: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = crate::Result<()>>,
    {
        let mut pause = Pause::default();
        while let Err(e) = call().await {
            if pause.failures() == 0 {
                tracing::warn!(error = %error_chain(&e), "could not settle the message; trying again while its lock holds");
            }
            tokio::select! {
                () = lost.token().cancelled() => {
                    tracing::warn!(error = %error_chain(&e), "could not settle the message before its lock was lost or the host stopped; it will be delivered again");
                    return;
                }
                () = tokio::time::sleep(pause.next()) => {}
            }
        }
    }

    /// Sends acks in batches: whatever accumulated while the previous batch was in flight.
    /// Acks the transport does not answer stay held (their locks renewed) and go again
    /// with the next batch, after a pause, so that a passing outage delivers nothing twice.
    async fn ack_loop(
        self: Arc<Self>,
        mut acks: mpsc::UnboundedReceiver<Vec<Receipt>>,
        held: Arc<Held>,
    ) {
        let mut groups = Vec::new();
        let mut batch = Vec::with_capacity(ACK_BATCH);
        let mut failed: Vec<Receipt> = Vec::new();
        let mut pause = Pause::default();
        let mut open = true;
        while open || !failed.is_empty() {
            if failed.is_empty() {
                open = acks.recv_many(&mut groups, ACK_BATCH).await > 0;
            } else if open {
                // Retry after the pause; acks that arrive meanwhile go with them.
                tokio::select! {
                    received = acks.recv_many(&mut groups, ACK_BATCH) => open = received > 0,
                    () = tokio::time::sleep(pause.next()) => {}
                }
            }
            let last_try = !open;
            batch.append(&mut failed);
            batch.extend(groups.drain(..).flatten());
            for part in batch.chunks(ACK_BATCH) {
                match self.metrics.call(Op::Ack, self.consumer.ack(part)).await {
                    Ok(()) => {
                        held.remove(part);
                        self.dispatch.scope.after_ack.acked(part).await;
                    }
                    Err(e) if last_try => {
                        self.dispatch.scope.after_ack.forget(part);
                        // Shutdown: what stays held is returned as abandoned.
                        tracing::warn!(source = %self.registration.source, error = %error_chain(&e), count = part.len(), "ack failed at shutdown; these messages will be delivered again");
                    }
                    Err(e) => {
                        if pause.failures() == 0 {
                            tracing::warn!(source = %self.registration.source, error = %error_chain(&e), count = part.len(), "ack failed; trying again while the locks hold");
                        }
                        failed.extend_from_slice(part);
                    }
                }
            }
            if failed.is_empty() {
                pause = Pause::default();
            }
            batch.clear();
            if last_try {
                break;
            }
        }
    }

    /// Extends the locks of everything held, three times per lock timeout.
    async fn renew_loop(self: Arc<Self>, held: Arc<Held>, done: CancellationToken) {
        let period = self.registration.settings.message_lock_timeout / 3;
        let mut starved_warned = false;
        loop {
            let due = Instant::now() + period;
            tokio::select! {
                () = done.cancelled() => return,
                () = tokio::time::sleep_until(due) => {}
            }
            // A timer that fires far too late means something blocks the runtime's threads
            // (not handlers: they have threads of their own), and locks will be lost: say
            // so once, with the way out.
            let late = Instant::now().saturating_duration_since(due);
            if late > period / 2 && !starved_warned {
                starved_warned = true;
                tracing::warn!(source = %self.registration.source, ?late,
                    "lock renewal ran late: something is blocking the async runtime; run blocking \
                     work with tokio::task::spawn_blocking, or locks expire and messages run twice");
            }
            let receipts = held.receipts();
            if receipts.is_empty() {
                continue;
            }
            match self
                .metrics
                .call(Op::Renew, self.consumer.renew(&receipts))
                .await
            {
                Ok(kept) => {
                    self.metrics.renewed(&kept);
                    let lost: Vec<Receipt> = receipts
                        .into_iter()
                        .zip(kept)
                        .filter(|(receipt, kept)| !kept && held.cancel(receipt))
                        .map(|(receipt, _)| receipt)
                        .collect();
                    if !lost.is_empty() {
                        // Another delivery may have the message now: its ack is not ours.
                        self.dispatch.scope.after_ack.forget(&lost);
                        tracing::warn!(source = %self.registration.source, lost = lost.len(),
                            "locks lost while this host was alive (renewals came too late: a stalled \
                             link or a blocked runtime); their handlers are cancelled, and the messages \
                             are delivered again");
                    }
                }
                Err(e) => {
                    tracing::warn!(source = %self.registration.source, error = %error_chain(&e), "lock renewal failed; will try again");
                }
            }
        }
    }

    /// Returns messages of crashed consumers to the queue, at start and then
    /// periodically; sweeps again at once while a sweep finds some, so a big crashed
    /// host is recovered within one lock timeout plus one interval.
    async fn recover_loop(self: Arc<Self>, done: CancellationToken) {
        loop {
            match self
                .metrics
                .call(Op::Recover, self.consumer.recover())
                .await
            {
                Ok(recovered) if recovered > 0 => {
                    self.metrics.recovered(recovered);
                    tracing::info!(source = %self.registration.source, recovered, "recovered messages whose lock expired");
                    if !done.is_cancelled() {
                        continue;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(source = %self.registration.source, error = %error_chain(&e), "recovery sweep failed; will try again");
                }
            }
            tokio::select! {
                () = done.cancelled() => return,
                () = tokio::time::sleep(self.recovery_interval) => {}
            }
        }
    }
}

/// Awaits a transport call; once `stop` fires it gets [`SETTLE_BOUND`] more to finish
/// (what it reserved is then released like any prefetched message), after which it is
/// abandoned (`None`): what it reserved, if anything, returns when its lock expires.
async fn finish<T>(
    stop: &CancellationToken,
    call: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::pin!(call);
    tokio::select! {
        biased;
        out = &mut call => Some(out),
        () = stop.cancelled() => tokio::time::timeout(SETTLE_BOUND, call).await.ok(),
    }
}

/// Pauses between attempts at a call the transport does not answer: doubling from the
/// first to the last of [`ERROR_PAUSE`].
#[derive(Default)]
struct Pause {
    failures: u32,
}

impl Pause {
    /// The pause before the next attempt.
    fn next(&mut self) -> Duration {
        self.failures += 1;
        let (first, last) = ERROR_PAUSE;
        first
            .saturating_mul(1 << self.failures.saturating_sub(1).min(16))
            .min(last)
    }

    /// Attempts that failed so far.
    fn failures(&self) -> u32 {
        self.failures
    }
}

/// A fetch outage: logged once when it starts and once when it ends, with pauses that
/// grow in between.
#[derive(Default)]
struct Outage {
    pause: Pause,
    since: Option<Instant>,
}

impl Outage {
    fn failed(&mut self, worker: &Worker, error: &crate::Error) -> Duration {
        if self.since.is_none() {
            self.since = Some(Instant::now());
            tracing::warn!(source = %worker.registration.source, error = %error_chain(error),
                "receiving failed; retrying with backoff until the transport answers again");
        } else {
            tracing::debug!(source = %worker.registration.source, error = %error_chain(error), failures = self.pause.failures(), "receiving still fails");
        }
        self.pause.next()
    }

    fn ended(&mut self, worker: &Worker) {
        if let Some(since) = self.since.take() {
            tracing::info!(source = %worker.registration.source, failures = self.pause.failures(),
                after = ?since.elapsed(), "receiving works again");
            self.pause = Pause::default();
        }
    }
}

/// Awaits a message's handling and turns a panic that escaped it into a retry, so that
/// no panic on a message's path leaves the message unsettled.
fn outcome_of(
    handling: impl std::future::Future<Output = Outcome>,
) -> impl std::future::Future<Output = Outcome> {
    // A combinator, not an `async fn`, so that the handler's future is stored once.
    std::panic::AssertUnwindSafe(handling)
        .catch_unwind()
        .map(|caught| match caught {
            Ok(outcome) => outcome,
            Err(panic) => Outcome::Retry(
                Duration::ZERO,
                ErrorRecord::now(format!("panicked: {}", panic_message(&*panic))),
            ),
        })
}
