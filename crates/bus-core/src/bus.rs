//! The client: send commands, publish events, schedule messages.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use crate::envelope::{encode_json_message, now_ms};
use crate::host::metrics::sent;
use crate::transport::{validate_name, Destination, Outgoing, WireFormat};
use crate::{
    Command, Envelope, Error, Event, Format, Headers, IntoShared, Message, MessageId, Result,
    Transport,
};

/// Default largest encoded envelope a bus accepts (1 MiB).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 1024 * 1024;

/// Headers that follow-up messages inherit from the message being handled: W3C trace
/// context, and BabelQueue's `trace_id` (as bus-babelqueue carries it), so a Rust hop in
/// a BabelQueue fleet keeps the trace.
const PROPAGATED: [&str; 3] = ["traceparent", "tracestate", "bq-trace-id"];

/// A cheap-to-clone handle for sending messages over one shared transport.
///
/// Every call is a single atomic operation on the transport: a batch is stored all or
/// none. Every call is bounded by the transport's command timeout; a call without an
/// answer in time fails with [`Error::OutcomeUnknown`]: the messages may or may not be
/// stored. Dropping a call's future does not withdraw it: the transport may already have
/// queued it, and then it runs when the connection allows (docs/operations.md, "Outages").
#[derive(Debug, Clone)]
pub struct Bus {
    /// What every clone shares: one reference count per clone (a handler's context gets
    /// one per message).
    shared: Arc<Shared>,
    /// Headers copied onto every message sent through this handle.
    inherited: Option<Arc<Headers>>,
}

#[derive(Debug)]
struct Shared {
    transport: Arc<dyn Transport>,
    config: BusConfig,
    /// Events published to topics without subscriptions, over all clones.
    unrouted: AtomicU64,
}

/// Bus-wide message settings.
#[derive(Debug, Clone)]
pub struct BusConfig {
    format: Format,
    max_message_size: usize,
}

impl Default for BusConfig {
    fn default() -> Self {
        BusConfig {
            format: Format::Json,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
        }
    }
}

impl BusConfig {
    /// The format of messages that do not declare one.
    pub fn format(mut self, format: Format) -> Self {
        self.format = format;
        self
    }
    /// The largest encoded envelope accepted at send.
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }
}

impl Bus {
    /// A bus over a transport (by value, or shared: `Arc<dyn Transport>`).
    pub fn new(transport: impl IntoShared<dyn Transport>, config: BusConfig) -> Self {
        Bus {
            shared: Arc::new(Shared {
                transport: transport.into_shared(),
                config,
                unrouted: AtomicU64::new(0),
            }),
            inherited: None,
        }
    }

    /// How many events were published to topics that had no subscriptions (so nobody
    /// received them), through this bus and its clones.
    pub fn unrouted_events(&self) -> u64 {
        self.shared.unrouted.load(Ordering::Relaxed)
    }

    /// The transport under this bus.
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.shared.transport
    }

    /// Sends a command to its queue.
    pub async fn send<C: Command>(&self, command: &C) -> Result<MessageId> {
        let one = std::slice::from_ref(command);
        let (ids, _) = self
            .produce("send", one, |name, batch| {
                self.shared.transport.send(name, batch)
            })
            .await?;
        Ok(ids[0].clone())
    }

    /// Sends many commands in one atomic round trip.
    pub async fn send_batch<C: Command>(&self, commands: &[C]) -> Result<Vec<MessageId>> {
        let (ids, _) = self
            .produce("send", commands, |name, batch| {
                self.shared.transport.send(name, batch)
            })
            .await?;
        Ok(ids)
    }

    /// Sends a command with a partition key: on a queue partitioned over several shards
    /// (the Redis transport's `RedisConfig::partitions`), every command with the same key
    /// goes to the same shard, so they keep their order; without partitions it is
    /// [`Bus::send`].
    pub async fn send_keyed<C: Command>(&self, command: &C, key: &str) -> Result<MessageId> {
        let ids = self
            .send_batch_keyed(std::slice::from_ref(command), key)
            .await?;
        Ok(ids[0].clone())
    }

    /// Sends many commands with one partition key in one atomic round trip (all to the
    /// key's shard).
    pub async fn send_batch_keyed<C: Command>(
        &self,
        commands: &[C],
        key: &str,
    ) -> Result<Vec<MessageId>> {
        let (ids, _) = self
            .produce("send", commands, |name, batch| {
                self.shared.transport.send_keyed(name, key, batch)
            })
            .await?;
        Ok(ids)
    }

    /// Sends a command that becomes ready after `delay`.
    pub async fn send_delayed<C: Command>(
        &self,
        command: &C,
        delay: Duration,
    ) -> Result<MessageId> {
        self.send_at(command, SystemTime::now() + delay).await
    }

    /// Sends a command that becomes ready at `at`.
    pub async fn send_at<C: Command>(&self, command: &C, at: SystemTime) -> Result<MessageId> {
        let one = std::slice::from_ref(command);
        let (ids, _) = self
            .produce("send", one, |name, batch| {
                self.shared.transport.send_at(name, batch, at)
            })
            .await?;
        Ok(ids[0].clone())
    }

    /// Publishes an event: every subscription of its topic gets a copy.
    pub async fn publish<E: Event>(&self, event: &E) -> Result<MessageId> {
        let ids = self.publish_batch(std::slice::from_ref(event)).await?;
        Ok(ids[0].clone())
    }

    /// Publishes many events in one atomic round trip.
    pub async fn publish_batch<E: Event>(&self, events: &[E]) -> Result<Vec<MessageId>> {
        let (ids, reached) = self
            .produce("publish", events, |name, batch| {
                self.shared.transport.publish(name, batch)
            })
            .await?;
        if reached == Some(0) {
            let count = ids.len() as u64;
            let total = self.shared.unrouted.fetch_add(count, Ordering::Relaxed) + count;
            tracing::info!(
                topic = E::NAME,
                events = count,
                total,
                "published to a topic without subscriptions: no one receives these events \
                 (a subscription receives the events published after its consumer first started)"
            );
        }
        Ok(ids)
    }

    /// Encodes `messages` and hands them to `call` (one transport call), inside the
    /// producer span (feature `opentelemetry`) whose context the messages carry, and
    /// recorded as a send or publish (feature `metrics`). An empty batch makes no call.
    async fn produce<M: Message, T, F>(
        &self,
        operation: &'static str,
        messages: &[M],
        call: impl FnOnce(&'static str, Vec<Outgoing>) -> F,
    ) -> Result<(Vec<MessageId>, Option<T>)>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let span = producer_span(operation, M::NAME);
        let destination = match M::KIND {
            crate::MessageKind::Event => Destination::Topic(M::NAME),
            _ => Destination::Queue(M::NAME),
        };
        let wire = self.shared.transport.outgoing_wire_format(destination);
        let batch = span.in_scope(|| self.encode(messages, wire.as_deref()))?;
        let ids: Vec<MessageId> = batch.iter().map(|m| m.id.clone()).collect();
        if batch.is_empty() {
            return Ok((ids, None));
        }
        let name = checked::<M>()?;
        #[cfg(feature = "opentelemetry")]
        crate::otel::record_ids(&span, &ids);
        let sending = sent(operation, name, ids.len(), call(name, batch));
        let out = tracing::Instrument::instrument(sending, span).await?;
        Ok((ids, Some(out)))
    }

    /// The headers of this handle's messages: the trace context of the current span
    /// (with the `opentelemetry` feature), else the one inherited from the message being
    /// handled.
    fn outgoing_headers(&self) -> std::borrow::Cow<'_, Headers> {
        static NONE: Headers = Headers::new();
        let inherited = self.inherited.as_deref().unwrap_or(&NONE);
        #[cfg(feature = "opentelemetry")]
        {
            let mut headers = inherited.clone();
            if crate::otel::inject_current(&mut headers) {
                return std::borrow::Cow::Owned(headers);
            }
        }
        std::borrow::Cow::Borrowed(inherited)
    }

    /// A handle whose messages carry the trace context of `headers`.
    pub(crate) fn inheriting(&self, headers: &Headers) -> Bus {
        if headers.is_empty() {
            return self.clone();
        }
        let inherited: Headers = PROPAGATED
            .iter()
            .filter_map(|k| headers.get(*k).map(|v| ((*k).to_owned(), v.clone())))
            .collect();
        Bus {
            inherited: (!inherited.is_empty()).then(|| Arc::new(inherited)),
            shared: Arc::clone(&self.shared),
        }
    }

    /// Encodes messages in the native envelope, or in `wire` when the destination has
    /// another wire format.
    fn encode<M: Message>(
        &self,
        messages: &[M],
        wire: Option<&dyn WireFormat>,
    ) -> Result<Vec<Outgoing>> {
        let config = &self.shared.config;
        let format = M::FORMAT.unwrap_or(config.format);
        let headers = self.outgoing_headers();
        let headers = &*headers;
        // One clock read per batch; ids come from one process-wide monotonic generator,
        // so they sort in the order sent, across calls too.
        let sent_at_ms = now_ms();
        let ids = monotonic_ids(messages.len());
        let mut batch = Vec::with_capacity(messages.len());
        for (message, id) in messages.iter().zip(ids) {
            let payload = match (format, wire) {
                (Format::Json, None) => {
                    encode_json_message(&id, M::TYPE, headers, sent_at_ms, message)?
                }
                _ => {
                    let mut envelope =
                        Envelope::new(M::TYPE, format, format.encode(M::TYPE, message)?);
                    envelope.id = MessageId::from(id.clone());
                    envelope.sent_at_ms = sent_at_ms;
                    envelope.headers.clone_from(headers);
                    match wire {
                        None => envelope.encode()?,
                        Some(wire) => wire.encode(&envelope)?,
                    }
                }
            };
            if payload.len() > config.max_message_size {
                return Err(Error::MessageTooLarge {
                    size: payload.len(),
                    max: config.max_message_size,
                });
            }
            batch.push(Outgoing {
                id: MessageId::from(id),
                payload: Bytes::from(payload),
            });
        }
        Ok(batch)
    }
}

/// `n` new message ids, increasing across every call in this process (ULIDs: a clock
/// part, then a random part counted up within one millisecond).
fn monotonic_ids(n: usize) -> Vec<String> {
    static GENERATOR: std::sync::Mutex<ulid::Generator> =
        std::sync::Mutex::new(ulid::Generator::new());
    let mut generator = GENERATOR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    (0..n)
        .map(|_| {
            // Fails only when the random part overflows within one millisecond.
            generator
                .generate()
                .unwrap_or_else(|_| ulid::Ulid::new())
                .to_string()
        })
        .collect()
}

/// The span a send or publish runs in: a producer span with the `opentelemetry` feature,
/// none without (no cost, and logs unchanged).
fn producer_span(operation: &'static str, destination: &'static str) -> tracing::Span {
    #[cfg(feature = "opentelemetry")]
    return crate::otel::producer_span(operation, destination);
    #[cfg(not(feature = "opentelemetry"))]
    {
        let _ = (operation, destination);
        tracing::Span::none()
    }
}

/// The message's wire name, checked (hand-written impls skip the derive's check).
fn checked<M: Message>() -> Result<&'static str> {
    let what = match M::KIND {
        crate::MessageKind::Event => "topic",
        _ => "queue",
    };
    validate_name(what, M::NAME)?;
    Ok(M::NAME)
}
