//! The bus adapter: a [`bus_core::Transport`] over BabelQueue queues, so a bus host can
//! work a queue that BabelQueue SDK workers also work.
//!
//! `receive` turns each BabelQueue envelope into a native bus envelope (type = the URN,
//! id = `meta.id`, body = `data`, sent = `meta.created_at`, headers = the frame's plus
//! [`TRACE_ID_HEADER`]); `send` does the reverse. Poison never reaches the host: it is
//! dead-lettered as BabelQueue writes it on its first delivery.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bus_core::records::ErrorRecord;
use bus_core::transport::{
    Consumer, ConsumerOptions, DeadLetterReason, Delivery, Held, Outgoing, Receipt, Source,
};
use bus_core::{Format, MessageId, Transport};
use bus_redis::RedisConfig;
use bytes::Bytes;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::consumer::{Content, Handle, QueueConsumer, Reserved};
use crate::dead_letter::{DeadLetterBlock, Reason};
use crate::frame::Headers;
use crate::keys::Layout;
use crate::{BabelQueue, Envelope, Error, Options, Poison, Result, UnknownUrn};

/// The bus header that carries BabelQueue's `trace_id` (kept across hops: a message sent
/// with it keeps that `trace_id`).
pub const TRACE_ID_HEADER: &str = "bq-trace-id";

/// The longest `receive` waits before returning empty.
const RECEIVE_BOUND: Duration = Duration::from_secs(1);
/// Idle polling of the legacy layout (it has no wake-up list): from 2 ms up to 250 ms.
const POLL_MIN_MS: u64 = 2;
const POLL_MAX_MS: u64 = 250;

/// A [`bus_core::Transport`] over BabelQueue's Redis layouts (commands only: BabelQueue
/// has no topics, so `publish` is refused).
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

    fn to_babel(&self, queue: &str, outgoing: &Outgoing) -> Result<(Vec<u8>, Headers)> {
        let native = bus_core::Envelope::decode(&outgoing.payload)
            .map_err(|e| Error::Envelope(format!("not a bus envelope: {e}")))?;
        if native.format != Format::Json {
            return Err(Error::Envelope(format!(
                "{}: BabelQueue carries JSON bodies only, not {:?}",
                native.message_type, native.format
            )));
        }
        let text = std::str::from_utf8(&native.body)
            .map_err(|_| Error::Envelope("the body is not UTF-8".into()))?;
        let data: &RawValue = serde_json::from_str(text)
            .map_err(|e| Error::Envelope(format!("the body is not JSON: {e}")))?;
        let mut headers = native.headers;
        let trace_id = headers.remove(TRACE_ID_HEADER);
        let envelope = Envelope::build(
            &native.message_type,
            data,
            queue,
            Some(native.id.to_string()),
            trace_id,
            i64::try_from(native.sent_at_ms).ok(),
        )?;
        Ok((envelope.encode(), headers))
    }
}

#[async_trait]
impl Transport for BabelTransport {
    async fn send(&self, queue: &str, messages: Vec<Outgoing>) -> bus_core::Result<()> {
        let items = messages
            .iter()
            .map(|m| self.to_babel(queue, m))
            .collect::<Result<Vec<_>>>()?;
        Ok(self.bq.publish_encoded(queue, items).await?)
    }

    async fn send_at(
        &self,
        queue: &str,
        messages: Vec<Outgoing>,
        due: SystemTime,
    ) -> bus_core::Result<()> {
        let bodies = messages
            .iter()
            .map(|m| self.to_babel(queue, m).map(|(body, _headers)| body))
            .collect::<Result<Vec<_>>>()?;
        let due = due.duration_since(UNIX_EPOCH).unwrap_or_default();
        // Whole seconds, rounded up: never before the due time.
        let secs = due.as_secs() + u64::from(due.subsec_nanos() > 0);
        Ok(self
            .bq
            .publish_encoded_at(queue, bodies, i64::try_from(secs).unwrap_or(i64::MAX))
            .await?)
    }

    async fn publish(&self, _topic: &str, _messages: Vec<Outgoing>) -> bus_core::Result<usize> {
        Err(Error::Unsupported {
            layout: self.bq.options().layout_ref().name(),
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
                layout: self.bq.options().layout_ref().name(),
                what: "subscriptions (BabelQueue has queues only)",
            }
            .into());
        };
        let mut opts = self.bq.options().clone();
        if opts.retry_after_secs().is_some() {
            opts = opts.retry_after(Some(options.lock_timeout));
        }
        let bq = BabelQueue::with_client(self.bq.client().clone(), opts);
        let inner = bq.consumer(queue).await?;
        Ok(Box::new(BabelConsumer {
            laravel: matches!(bq.options().layout_ref(), Layout::Laravel { .. }),
            unknown_urn: bq.options().unknown_urn(),
            inner,
            options,
            pause_ms: AtomicU64::new(POLL_MIN_MS),
        }))
    }
}

/// The bus consumer of one BabelQueue queue.
#[derive(Debug)]
struct BabelConsumer {
    inner: QueueConsumer,
    options: ConsumerOptions,
    laravel: bool,
    unknown_urn: UnknownUrn,
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

/// The native bus envelope of a BabelQueue envelope.
fn to_native(reserved: &Reserved, env: &Envelope) -> Result<Bytes> {
    let data = env.data().get().as_bytes().to_vec();
    let mut native = bus_core::Envelope::new(env.urn(), Format::Json, data);
    native.id = match env.meta().id.as_deref() {
        Some(id) if !id.is_empty() => MessageId::from(id.to_owned()),
        _ => MessageId::generate(),
    };
    native.sent_at_ms = env
        .meta()
        .created_at
        .and_then(|ms| u64::try_from(ms).ok())
        .unwrap_or(0);
    native.headers = reserved.headers().clone();
    if let Some(trace_id) = env.trace_id() {
        native
            .headers
            .insert(TRACE_ID_HEADER.to_owned(), trace_id.to_owned());
    }
    let bytes = native
        .encode()
        .map_err(|e| Error::Envelope(format!("cannot build the bus envelope: {e}")))?;
    Ok(bytes.into())
}

impl BabelConsumer {
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
    /// the `attempts` it arrived with, and on legacy its crash recoveries.
    async fn refuse(&self, reserved: &Reserved, env: &Envelope, count: u32) -> Result<()> {
        let limit = self.options.delivery_limit;
        let (attempts, recoveries) = (env.attempts(), reserved.recoveries());
        let how = match recoveries {
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
    async fn receive(
        &self,
        max: usize,
        stop: &CancellationToken,
    ) -> bus_core::Result<Vec<Delivery>> {
        let started = Instant::now();
        loop {
            let (batch, due) = self.inner.reserve_with_hint(max).await?;
            let had_any = !batch.is_empty();
            let mut out = Vec::with_capacity(batch.len());
            for reserved in batch {
                match reserved.content() {
                    Content::Poison(poison) => self.bury_poison(&reserved, poison).await?,
                    Content::Envelope(env) => {
                        let count = reserved.delivery_count();
                        if count > self.options.delivery_limit {
                            self.refuse(&reserved, env, count).await?;
                            continue;
                        }
                        out.push(Delivery {
                            receipt: Receipt::stored(reserved.handle().to_bytes(), count),
                            delivery_count: count,
                            payload: to_native(&reserved, env)?,
                        });
                    }
                }
            }
            if had_any {
                self.pause_ms.store(POLL_MIN_MS, Ordering::Relaxed);
            }
            if !out.is_empty() {
                return Ok(out);
            }
            let remaining = RECEIVE_BOUND.saturating_sub(started.elapsed());
            if stop.is_cancelled() || remaining.is_zero() {
                return Ok(out);
            }
            if had_any {
                continue; // only poison or refused messages came: look again at once
            }
            let wait = self.idle_wait(due, remaining);
            tokio::select! {
                () = stop.cancelled() => return Ok(Vec::new()),
                waited = self.inner.wait(wait) => waited?,
            }
        }
    }

    async fn ack(&self, receipts: &[Receipt]) -> bus_core::Result<()> {
        let acked = self.inner.ack(&handles(receipts)?).await?;
        if acked < receipts.len() {
            tracing::warn!(queue = %self.inner.keys().queue, lapsed = receipts.len() - acked, "acked after the reservation lapsed; those messages will be delivered again");
        }
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
        Ok(())
    }

    async fn release(&self, receipts: &[Receipt]) -> bus_core::Result<()> {
        self.inner.release(&handles(receipts)?).await?;
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
}
