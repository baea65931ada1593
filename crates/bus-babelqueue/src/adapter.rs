//! The bus adapter: a [`bus_core::Transport`] over BabelQueue queues, so a bus host can
//! work a queue that BabelQueue SDK workers also work.
//!
//! Its elements are BabelQueue's, read and written by [`BabelFormat`] (the host's wire
//! format for these queues): `send` stores what the format wrote; `receive` reads each
//! element once, for its attempts and to catch poison, and hands the host that reading
//! with the element ([`Delivery::decoded`]), so the host decodes nothing again. Poison
//! never reaches the host: it is dead-lettered as BabelQueue writes it on its first
//! delivery.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bus_core::records::ErrorRecord;
use bus_core::transport::{
    Capabilities, Consumer, ConsumerExtras, ConsumerOptions, DeadLetterReason, Delivery,
    Destination, Held, OnUnknownType, Outgoing, Placement, Receipt, Received, Source,
    TransportExtras, UnknownTypes, Want, WireFormat,
};
use bus_core::Transport;
use bus_redis::RedisConfig;
use tokio_util::sync::CancellationToken;

use crate::consumer::{delivery_count, Content, Handle, QueueConsumer, Reserved};
use crate::dead_letter::{DeadLetterBlock, Reason};
use crate::format::BabelFormat;
use crate::keys::Layout;
use crate::{BabelQueue, Envelope, Error, Options, OverLimit, Poison, Result, UnknownUrn};

/// What a lease adds to the host's lock timeout: the whole second a deadline's score can
/// lose to `floor(now)`.
const LEASE_ROUNDING: Duration = Duration::from_secs(1);
/// The longest `receive` waits before returning empty.
const RECEIVE_BOUND: Duration = Duration::from_secs(1);
/// Idle polling of the legacy layout (it has no wake-up list): from 2 ms up to 250 ms.
const POLL_MIN_MS: u64 = 2;
const POLL_MAX_MS: u64 = 250;

/// A [`bus_core::Transport`] over BabelQueue's Redis layouts (commands only: BabelQueue
/// has no topics, so `publish` is refused; see [`Transport::capabilities`]).
#[derive(Debug, Clone)]
pub struct BabelTransport {
    bq: BabelQueue,
}

impl BabelTransport {
    /// Connects with the given layout.
    pub async fn connect(config: &RedisConfig, options: Options) -> Result<Self> {
        Ok(BabelTransport::new(
            BabelQueue::connect(config, options).await?,
        ))
    }

    /// Over a client.
    pub fn new(bq: BabelQueue) -> Self {
        BabelTransport { bq }
    }

    /// The BabelQueue client underneath.
    pub fn babel_queue(&self) -> &BabelQueue {
        &self.bq
    }

    /// The wire format of `queue`'s elements.
    pub fn format(&self, queue: &str) -> BabelFormat {
        BabelFormat::new(&self.bq.options().layout, queue)
    }

    fn legacy(&self) -> bool {
        matches!(self.bq.options().layout, Layout::Legacy)
    }
}

#[async_trait]
impl Transport for BabelTransport {
    /// Stores the elements as [`BabelFormat`] wrote them (see
    /// [`Transport::outgoing_wire_format`]). BabelQueue has no keys: a key changes
    /// nothing, and a due time is rounded up to whole seconds (never before it).
    async fn send(
        &self,
        queue: &str,
        placement: Placement<'_>,
        messages: Vec<Outgoing>,
    ) -> bus_core::Result<()> {
        let elements = messages.into_iter().map(|m| m.payload).collect();
        let Some(due) = placement.due else {
            return Ok(self.bq.push(queue, elements).await?);
        };
        let due = due.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = due.as_secs() + u64::from(due.subsec_nanos() > 0);
        Ok(self
            .bq
            .push_at(queue, elements, i64::try_from(secs).unwrap_or(i64::MAX))
            .await?)
    }

    async fn publish(
        &self,
        _topic: &str,
        _due: Option<SystemTime>,
        _messages: Vec<Outgoing>,
    ) -> bus_core::Result<usize> {
        Err(Error::Unsupported {
            layout: self.bq.options().layout.name(),
            what: "events (BabelQueue has queues only)",
        }
        .into())
    }

    async fn consumer(
        &self,
        source: &Source,
        options: ConsumerOptions,
    ) -> bus_core::Result<Box<dyn Consumer>> {
        let Source::Queue(queue) = source else {
            return Err(Error::Unsupported {
                layout: self.bq.options().layout.name(),
                what: "subscriptions (BabelQueue has queues only)",
            }
            .into());
        };
        let mut opts = self.bq.options().clone();
        if opts.retry_after_secs().is_some() {
            // A deadline is `floor(now) + retry_after` whole seconds, so a lease lasts
            // between `retry_after - 1` and `retry_after` seconds: one second more keeps
            // every lease at least the lock timeout between two renewals (a 300 ms lock
            // renewed every 100 ms otherwise lapsed at the next whole second).
            opts = opts.retry_after(Some(options.lock_timeout + LEASE_ROUNDING));
        }
        let bq = BabelQueue::with_client(self.bq.client().clone(), opts);
        let inner = bq.consumer(queue).await?;
        Ok(Box::new(BabelConsumer {
            format: self.format(queue),
            laravel: matches!(bq.options().layout, Layout::Laravel { .. }),
            unknown_urn: bq.options().unknown_urn,
            over_limit: bq.options().over_limit,
            inner,
            options,
            pause_ms: AtomicU64::new(POLL_MIN_MS),
        }))
    }

    fn wire_format(&self, source: &Source) -> Option<Arc<dyn WireFormat>> {
        match source {
            Source::Queue(queue) => Some(Arc::new(self.format(queue))),
            // Refused by `consumer`.
            Source::Subscription { .. } => None,
        }
    }

    fn outgoing_wire_format(&self, destination: Destination<'_>) -> Option<Arc<dyn WireFormat>> {
        match destination {
            Destination::Queue(queue) => Some(Arc::new(self.format(queue))),
            // Refused by `publish`.
            _ => None,
        }
    }

    /// No topics; no error history in a dead letter (BabelQueue's `dead_letter` block
    /// holds the last error); delays in whole seconds on Laravel, and none on the legacy
    /// layout (no delayed set: a delayed send is refused, a retry is ready at once, as in
    /// BabelQueue).
    fn capabilities(&self) -> Capabilities {
        let seconds = (!self.legacy()).then_some(Duration::from_secs(1));
        Capabilities::ALL
            .topics(false)
            .delayed_sends(seconds)
            .retry_delays(seconds)
            .error_history(false)
    }

    /// None: BabelQueue has queues and delays only.
    fn extras(&self) -> TransportExtras<'_> {
        TransportExtras::default()
    }
}

/// Whether a reserved delivery reaches the host.
enum Admit {
    /// It runs, with this delivery count.
    Run(u32),
    /// Laravel, [`OverLimit::RunOnce`]: its last run, with this delivery count, once it is
    /// recorded; unless it is a recorded last run that came back (it is then refused).
    Last(u32),
    /// It is dead-lettered without running.
    Refuse,
}

/// The bus consumer of one BabelQueue queue.
#[derive(Debug)]
struct BabelConsumer {
    inner: QueueConsumer,
    format: BabelFormat,
    options: ConsumerOptions,
    laravel: bool,
    unknown_urn: UnknownUrn,
    over_limit: OverLimit,
    pause_ms: AtomicU64,
}

fn handle_of(receipt: &Receipt) -> Result<Handle> {
    match &receipt.held {
        Held::Stored { key, .. } => Handle::from_bytes(key.clone()).ok_or(Error::Receipt),
        Held::Leased { .. } => Err(Error::Receipt),
    }
}

fn handles(receipts: &[Receipt]) -> Result<Vec<Handle>> {
    receipts.iter().map(handle_of).collect()
}

impl BabelConsumer {
    /// A batch of reserved elements as the host gets them: each read once, the reading
    /// handed over with it. Poison, and a delivery past the limit, are dead-lettered here
    /// instead (both rare: the element is then read again, the owned way, to write the
    /// record). The Laravel last runs of the batch are recorded in one script call.
    async fn deliver(&self, batch: Vec<Handle>) -> Result<Vec<Delivery>> {
        let mut admitted = Vec::with_capacity(batch.len());
        let mut last = Vec::new();
        for handle in batch {
            let admit = match self.format.read(&handle.stored()) {
                Ok(read) if !handle.uncountable() => {
                    let admit = self.admit(&handle, read.attempts);
                    if let Admit::Last(_) = admit {
                        last.push(handle.clone());
                    }
                    Some((read, admit))
                }
                _ => None,
            };
            admitted.push((handle, admit));
        }
        let mut ran = self.inner.over_limit_runs(&last).await?.into_iter();
        let mut out = Vec::with_capacity(admitted.len());
        for (handle, admit) in admitted {
            let (read, count, came_back) = match admit {
                Some((read, Admit::Run(count))) => (read, count, false),
                Some((read, Admit::Last(count))) => (read, count, !ran.next().unwrap_or(false)),
                Some((_, Admit::Refuse)) | None => {
                    self.bury(handle, false).await?;
                    continue;
                }
            };
            if came_back {
                self.bury(handle, true).await?;
                continue;
            }
            out.push(Delivery {
                receipt: Receipt::stored(handle.to_bytes(), count),
                delivery_count: count,
                payload: handle.stored(),
                decoded: Some(Box::new(read.envelope)),
            });
        }
        Ok(out)
    }

    /// Dead-letters a reserved element that does not run: poison, or past the limit.
    async fn bury(&self, handle: Handle, came_back: bool) -> Result<()> {
        let reserved = Reserved::from_handle(handle);
        match reserved.content() {
            Content::Poison(poison) => self.bury_poison(&reserved, poison).await,
            Content::Envelope(env) => {
                self.refuse(&reserved, env, reserved.delivery_count(), came_back)
                    .await
            }
        }
    }

    /// After a settle: forgets the records of the Laravel last runs among `receipts`
    /// (recorded when they were reserved, see [`Admit::Last`]). A failure is only logged:
    /// the record expires by itself.
    async fn forget_last_runs(&self, receipts: &[Receipt]) {
        if !self.laravel || self.over_limit != OverLimit::RunOnce {
            return;
        }
        let limit = self.options.delivery_limit;
        let last: Vec<Handle> = receipts
            .iter()
            .filter(|r| matches!(r.held, Held::Stored { delivery, .. } if delivery == limit))
            .filter_map(|r| handle_of(r).ok())
            .collect();
        if let Err(e) = self.inner.forget_last_runs(&last).await {
            tracing::warn!(queue = %self.inner.keys().queue, error = %e, "could not forget settled last runs; their records expire by themselves");
        }
    }

    /// Whether a delivery runs, and the delivery count the host gets: the element's
    /// `attempts` plus (legacy) its recoveries, plus one. Under [`OverLimit::RunOnce`]
    /// stored attempts at or past the limit count as `limit - 1`, so the message runs
    /// once more as BabelQueue's SDK workers run it, and a failure dead-letters it; the
    /// adapter's own recoveries still count. On Laravel a recovery counts in `attempts`
    /// itself, so every last run (count = limit) is recorded before it runs
    /// ([`Admit::Last`]), and a job that is a recorded member came back from a run that
    /// stopped mid-message: refused.
    fn admit(&self, handle: &Handle, stored: i64) -> Admit {
        let limit = self.options.delivery_limit;
        let recoveries = i64::from(handle.recoveries());
        let stored = match self.over_limit {
            OverLimit::RunOnce => stored.min(i64::from(limit) - 1),
            _ => stored,
        };
        let count = delivery_count(stored.saturating_add(recoveries));
        if count > limit {
            Admit::Refuse
        } else if count == limit && self.laravel && self.over_limit == OverLimit::RunOnce {
            Admit::Last(count)
        } else {
            Admit::Run(count)
        }
    }

    /// The bare queue name a dead letter names: `meta.queue`, else this queue.
    fn original_queue(&self, env: &Envelope) -> String {
        env.meta()
            .queue
            .clone()
            .filter(|q| !q.is_empty())
            .unwrap_or_else(|| self.inner.keys().queue.clone())
    }

    /// Dead-letters a message whose delivery count is past the limit without running
    /// it (native queues do this when they recover it), saying where the count came from:
    /// the `attempts` it arrived with, on legacy its crash recoveries, on Laravel a last
    /// run that came back (`came_back`).
    async fn refuse(
        &self,
        reserved: &Reserved,
        env: &Envelope,
        count: u32,
        came_back: bool,
    ) -> Result<()> {
        let limit = self.options.delivery_limit;
        let (attempts, recoveries) = (env.attempts(), reserved.recoveries());
        let how = match recoveries {
            _ if came_back => format!(
                "it arrived with attempts {attempts}, recovered after its last run stopped \
                 mid-message (a crash?)"
            ),
            0 => format!("it arrived with attempts {attempts}"),
            n => format!(
                "it arrived with attempts {attempts} and was recovered {n} times after its \
                 consumer stopped mid-message (a crash?)"
            ),
        };
        let error = format!(
            "delivery {count} is past the limit of {limit}: {how}; dead-lettered without running"
        );
        tracing::warn!(queue = %self.inner.keys().queue, id = ?env.meta().id, %error, "dead-lettering a message past its delivery limit");
        let block = DeadLetterBlock::new(
            Reason::Failed,
            &self.original_queue(env),
            reserved.attempts(),
            Some(error),
            Some("DeliveryLimit".to_owned()),
        );
        self.inner.dead_letter(reserved, &block).await?;
        Ok(())
    }

    /// An unknown URN under [`UnknownUrn::Retry`]: a failed attempt, retried until the
    /// limit, then dead-lettered with attempts = the limit. `true`: retried.
    async fn retry_unknown(&self, reserved: &Reserved) -> Result<bool> {
        let attempts = reserved.attempts().saturating_add(1);
        if attempts >= i64::from(self.options.delivery_limit) {
            return Ok(false);
        }
        if !self.inner.retry(reserved, Duration::ZERO).await? {
            tracing::warn!(queue = %self.inner.keys().queue, "the reservation lapsed before the retry; it was recovered and will be delivered again");
        }
        Ok(true)
    }

    /// Dead-letters a poison body as BabelQueue does: reason `poison`, attempts 0.
    async fn bury_poison(&self, reserved: &Reserved, poison: &Poison) -> Result<()> {
        tracing::warn!(queue = %self.inner.keys().queue, %poison, "dead-lettering a poison message");
        let block = DeadLetterBlock::new(
            Reason::Poison,
            &self.inner.keys().queue,
            0,
            Some(format!("Undecodable BabelQueue body: {poison}")),
            Some("BabelQueueError".to_owned()),
        );
        self.inner.dead_letter(reserved, &block).await?;
        Ok(())
    }

    /// How long to wait when nothing is ready.
    fn idle_wait(&self, due: Option<i64>, remaining: Duration) -> Duration {
        if self.laravel {
            let until_due = due.map(|secs| {
                let due_ms = u64::try_from(secs).unwrap_or(0).saturating_mul(1000);
                let now_ms = bus_core::transport::now_ms();
                Duration::from_millis(due_ms.saturating_sub(now_ms).max(1))
            });
            return until_due.map_or(remaining, |d| d.min(remaining));
        }
        let pause = self.pause_ms.load(Ordering::Relaxed);
        self.pause_ms
            .store((pause * 2).min(POLL_MAX_MS), Ordering::Relaxed);
        Duration::from_millis(pause).min(remaining)
    }
}

#[async_trait]
impl Consumer for BabelConsumer {
    async fn receive(&self, want: Want, stop: &CancellationToken) -> bus_core::Result<Received> {
        // BabelQueue's layouts have no flow control and no crash isolation: nothing holds
        // a queue back, and a recovered message is delivered like any other.
        if want.max == 0 || want.alone {
            return Ok(Received::default());
        }
        let started = Instant::now();
        loop {
            let (batch, due) = self.inner.reserve_handles(want.max).await?;
            let had_any = !batch.is_empty();
            let out = self.deliver(batch).await?;
            if had_any {
                self.pause_ms.store(POLL_MIN_MS, Ordering::Relaxed);
            }
            if !out.is_empty() {
                return Ok(out.into());
            }
            let remaining = RECEIVE_BOUND.saturating_sub(started.elapsed());
            if stop.is_cancelled() || remaining.is_zero() {
                return Ok(out.into());
            }
            if had_any {
                continue; // only poison or refused messages came: look again at once
            }
            let wait = self.idle_wait(due, remaining);
            tokio::select! {
                () = stop.cancelled() => return Ok(Received::default()),
                waited = self.inner.wait(wait) => waited?,
            }
        }
    }

    async fn ack(&self, receipts: &[Receipt]) -> bus_core::Result<()> {
        let acked = self.inner.ack(&handles(receipts)?).await?;
        if acked < receipts.len() {
            tracing::warn!(queue = %self.inner.keys().queue, lapsed = receipts.len() - acked, "acked after the reservation lapsed; those messages will be delivered again");
        }
        self.forget_last_runs(receipts).await;
        Ok(())
    }

    async fn renew(&self, receipts: &[Receipt]) -> bus_core::Result<Vec<bool>> {
        Ok(self.inner.renew(&handles(receipts)?).await?)
    }

    async fn retry(
        &self,
        receipt: &Receipt,
        delay: Duration,
        _error: &ErrorRecord,
    ) -> bus_core::Result<()> {
        // BabelQueue's envelope has no error history: the error is only logged here.
        let reserved = Reserved::from_handle(handle_of(receipt)?);
        if let Content::Poison(poison) = reserved.content() {
            return Ok(self.bury_poison(&reserved, poison).await?);
        }
        if !self.inner.retry(&reserved, delay).await? {
            tracing::warn!(queue = %self.inner.keys().queue, "the reservation lapsed before the retry; it was recovered and will be delivered again");
        }
        Ok(())
    }

    async fn dead_letter(
        &self,
        receipt: &Receipt,
        reason: DeadLetterReason,
        error: Option<&ErrorRecord>,
    ) -> bus_core::Result<()> {
        let reserved = Reserved::from_handle(handle_of(receipt)?);
        let env = match reserved.content() {
            Content::Poison(poison) => return Ok(self.bury_poison(&reserved, poison).await?),
            Content::Envelope(env) => env,
        };
        // Deliveries past the limit never reach the host (`receive` refuses them), so the
        // handler ran this delivery unless the URN is unknown.
        let attempts = reserved.attempts();
        let (reason, attempts, exception) = match reason {
            DeadLetterReason::UnknownType => match self.unknown_urn {
                UnknownUrn::Acknowledge => {
                    tracing::warn!(queue = %self.inner.keys().queue, urn = env.urn(), id = ?env.meta().id, "acknowledging (dropping) a message of an unknown URN");
                    self.inner.ack(&[reserved.handle().clone()]).await?;
                    return Ok(());
                }
                UnknownUrn::Retry if self.retry_unknown(&reserved).await? => return Ok(()),
                UnknownUrn::Retry => (Reason::UnknownUrn, attempts + 1, "UnknownUrnError"),
                _ => (Reason::UnknownUrn, attempts, "UnknownUrnError"),
            },
            DeadLetterReason::Rejected => (Reason::Failed, attempts + 1, "Rejected"),
            DeadLetterReason::Undecodable => (Reason::Failed, attempts + 1, "UndecodableData"),
            _ => (Reason::Failed, attempts + 1, "HandlerError"),
        };
        let block = DeadLetterBlock::new(
            reason,
            &self.original_queue(env),
            attempts,
            error.map(|e| e.message.clone()),
            Some(exception.to_owned()),
        );
        if !self.inner.dead_letter(&reserved, &block).await? {
            tracing::warn!(queue = %self.inner.keys().queue, "the reservation lapsed before the dead letter; nothing written");
        }
        self.forget_last_runs(std::slice::from_ref(receipt)).await;
        Ok(())
    }

    async fn release(&self, receipts: &[Receipt]) -> bus_core::Result<()> {
        self.inner.release(&handles(receipts)?).await?;
        self.forget_last_runs(receipts).await;
        Ok(())
    }

    /// Lapsed reservations (and, on Laravel, due delayed messages) moved back to ready;
    /// the host logs the count and sweeps again while it is not zero.
    async fn recover(&self) -> bus_core::Result<usize> {
        let moved = self.inner.recover().await?;
        Ok(usize::try_from(moved).unwrap_or(0))
    }

    async fn close(&self) -> bus_core::Result<()> {
        Ok(self.inner.close().await?)
    }

    fn extras(&self) -> ConsumerExtras<'_> {
        // No error history (BabelQueue's envelope keeps none), no fleet breaker.
        ConsumerExtras::default().unknown_types(self)
    }
}

impl UnknownTypes for BabelConsumer {
    /// The unknown-URN policy, as the host's outcome: under [`UnknownUrn::Retry`] every
    /// delivery before the limit is a retry (`attempts + 1`, back to the queue at once),
    /// the one at the limit a dead letter.
    fn on_unknown_type(&self, delivery_count: u32) -> OnUnknownType {
        match self.unknown_urn {
            UnknownUrn::Retry if delivery_count < self.options.delivery_limit => {
                OnUnknownType::Retry(Duration::ZERO)
            }
            UnknownUrn::Acknowledge => OnUnknownType::Acknowledge,
            _ => OnUnknownType::DeadLetter,
        }
    }
}
