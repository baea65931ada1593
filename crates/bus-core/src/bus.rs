//! The client: send commands, publish events, schedule messages.

use crate::defaults;
use crate::headers;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use crate::envelope::{encode_json_message, epoch_ms};
use crate::host::metrics::sent;
use crate::names::QueueNames;
use crate::send::{OutgoingMessage, SendMiddleware, SendOptions, Sent};
use crate::transport::{Destination, Outgoing, Placement, WireFormat};
use crate::{
    Command, Envelope, Error, Event, Format, Headers, IntoShared, Message, MessageId, Result,
    Transport,
};

/// Headers that follow-up messages inherit from the message being handled: W3C trace
/// context, and BabelQueue's `trace_id` (as bus-babelqueue carries it), so a Rust hop in
/// a BabelQueue fleet keeps the trace.
const PROPAGATED: [&str; 3] = ["traceparent", "tracestate", headers::TRACE_ID];

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
    /// Requests waiting for replies, and the inbox they come to ([`Bus::request`]).
    requests: crate::request::Requests,
}

/// Bus-wide message settings.
#[derive(Debug, Clone)]
pub struct BusConfig {
    format: Format,
    max_message_size: usize,
    send_middleware: Vec<Arc<dyn SendMiddleware>>,
    names: QueueNames,
    /// Default deadlines per message type (few: looked up in order).
    time_to_live: Vec<(std::any::TypeId, Duration)>,
}

impl Default for BusConfig {
    fn default() -> Self {
        BusConfig {
            format: Format::Json,
            max_message_size: defaults::MAX_MESSAGE_SIZE,
            send_middleware: Vec::new(),
            names: QueueNames::default(),
            time_to_live: Vec::new(),
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

    /// Adds a layer that runs on every send and publish, after those added before.
    pub fn send_middleware(mut self, middleware: impl SendMiddleware) -> Self {
        self.send_middleware.push(Arc::new(middleware));
        self
    }

    /// Sends message type `M` to `name` instead of its declared queue or topic
    /// (docs/concepts.md, "Queue names at run time").
    pub fn queue_for<M: Message>(mut self, name: impl Into<String>) -> Self {
        self.names = self.names.queue_for::<M>(name);
        self
    }

    /// Names every queue and topic not named by [`BusConfig::queue_for`] by `convention`
    /// applied to its declared name, e.g. `|name| format!("staging-{name}")`.
    pub fn queue_names(
        mut self,
        convention: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Self {
        self.names = self.names.convention(convention);
        self
    }

    /// Every message of type `M` sent or published through this bus expires
    /// `time_to_live` after its send unless the send sets its own deadline
    /// ([`SendOptions::expires_in`]; docs/concepts.md, "Expiry").
    pub fn time_to_live<M: Message>(mut self, time_to_live: Duration) -> Self {
        let id = std::any::TypeId::of::<M>();
        self.time_to_live.retain(|(t, _)| *t != id);
        self.time_to_live.push((id, time_to_live));
        self
    }

    /// The default time to live of `M`, if one was set.
    fn time_to_live_of<M: Message>(&self) -> Option<Duration> {
        if self.time_to_live.is_empty() {
            return None;
        }
        let id = std::any::TypeId::of::<M>();
        self.time_to_live
            .iter()
            .find_map(|(t, ttl)| (*t == id).then_some(*ttl))
    }

    /// The run-time names (the host consumes with the same).
    pub(crate) fn names(&self) -> &QueueNames {
        &self.names
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
                requests: crate::request::Requests::default(),
            }),
            inherited: None,
        }
    }

    /// How many events were published to topics that had no subscriptions (so nobody
    /// received them), through this bus and its clones.
    pub fn unrouted_events(&self) -> u64 {
        self.shared.unrouted.load(Ordering::Relaxed)
    }

    /// This bus's requests and their inbox, over all clones.
    pub(crate) fn requests(&self) -> &crate::request::Requests {
        &self.shared.requests
    }

    /// The transport under this bus.
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.shared.transport
    }

    /// Sends a command to its queue.
    pub async fn send<C: Command>(&self, command: &C) -> Result<MessageId> {
        let one = std::slice::from_ref(command);
        let produced = self
            .produce("send", one, None, |name, batch| {
                self.shared.transport.send(name, Placement::now(), batch)
            })
            .await?;
        Ok(produced.first_id())
    }

    /// Sends a command with options (headers, trace id, due time, partition key), and
    /// says what was stored.
    pub async fn send_with<C: Command>(&self, command: &C, options: &SendOptions) -> Result<Sent> {
        if let Some(key) = options.dedup_key.as_deref() {
            return self.send_deduplicated(command, options, key).await;
        }
        let one = std::slice::from_ref(command);
        let placement = Placement::now()
            .key(options.key.as_deref())
            .due(options.due);
        let produced = self
            .produce("send", one, Some(options), |name, batch| {
                self.shared.transport.send(name, placement, batch)
            })
            .await?;
        Ok(produced.sent())
    }

    /// Encodes `message` as [`Bus::send_with`] or [`Bus::publish_with`] would store it,
    /// without storing it: the run-time destination name, this handle's headers, the
    /// options' headers and deadline, the send middleware, the destination's wire format
    /// and the size check, with a fresh id. For a store that hands the message to the
    /// transport later, such as a transactional outbox; the options that are not part of
    /// the envelope (due time, partition key, deduplication key) are the caller's to
    /// honour when it sends. Records no send metric: nothing was sent.
    pub async fn prepare<M: Message>(
        &self,
        message: &M,
        options: &SendOptions,
    ) -> Result<crate::send::Prepared> {
        let name = self.destination_name::<M>()?;
        let destination = match M::KIND {
            crate::MessageKind::Event => Destination::Topic(name),
            _ => Destination::Queue(name),
        };
        let wire = self.shared.transport.outgoing_wire_format(destination);
        let (ids, sent_at_ms) = monotonic_ids(1);
        let own = self
            .own_headers::<M>(&ids, destination, Some(options), wire.is_some())
            .await?;
        let trace_id = own.first().and_then(|h| h.get(headers::TRACE_ID).cloned());
        let mut batch = self.encode(
            std::slice::from_ref(message),
            (&ids, sent_at_ms),
            Some(&own),
            wire.as_deref(),
        )?;
        let message = batch
            .pop()
            .ok_or_else(|| Error::Config(format!("encoding {}: no message", M::NAME)))?;
        Ok(crate::send::Prepared {
            destination,
            message,
            trace_id,
        })
    }

    /// Sends many commands in one atomic round trip.
    pub async fn send_batch<C: Command>(&self, commands: &[C]) -> Result<Vec<MessageId>> {
        let produced = self
            .produce("send", commands, None, |name, batch| {
                self.shared.transport.send(name, Placement::now(), batch)
            })
            .await?;
        Ok(produced.ids.into_vec())
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
        let produced = self
            .produce("send", commands, None, |name, batch| {
                let placement = Placement::now().key(Some(key));
                self.shared.transport.send(name, placement, batch)
            })
            .await?;
        Ok(produced.ids.into_vec())
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
        let produced = self
            .produce("send", one, None, |name, batch| {
                let placement = Placement::now().due(Some(at));
                self.shared.transport.send(name, placement, batch)
            })
            .await?;
        Ok(produced.first_id())
    }

    /// Publishes an event: every subscription of its topic gets a copy.
    pub async fn publish<E: Event>(&self, event: &E) -> Result<MessageId> {
        let ids = self.publish_batch(std::slice::from_ref(event)).await?;
        Ok(ids[0].clone())
    }

    /// Publishes an event with options (headers, trace id, deadline, due time), and says
    /// what was stored. With a due time, every subscription's copy becomes ready then. A
    /// partition key or a deduplication key is refused: events are neither partitioned
    /// nor deduplicated.
    pub async fn publish_with<E: Event>(&self, event: &E, options: &SendOptions) -> Result<Sent> {
        if options.key.is_some() || options.dedup_key.is_some() {
            return Err(Error::Config(format!(
                "publishing {}: events take headers, a trace id, a deadline and a due time, not a partition key or a deduplication key",
                E::NAME
            )));
        }
        let one = std::slice::from_ref(event);
        let produced = self
            .produce("publish", one, Some(options), |name, batch| {
                self.shared.transport.publish(name, options.due, batch)
            })
            .await?;
        self.count_unrouted::<E>(&produced);
        let copies = produced.out;
        let mut sent = produced.sent();
        sent.copies = copies;
        Ok(sent)
    }

    /// Publishes many events in one atomic round trip.
    pub async fn publish_batch<E: Event>(&self, events: &[E]) -> Result<Vec<MessageId>> {
        let produced = self
            .produce("publish", events, None, |name, batch| {
                self.shared.transport.publish(name, None, batch)
            })
            .await?;
        self.count_unrouted::<E>(&produced);
        Ok(produced.ids.into_vec())
    }

    /// The queue or topic a message type is sent to: its declared name, or the one
    /// mapped at start-up ([`BusConfig::queue_for`], [`BusConfig::queue_names`]), checked
    /// (hand-written impls skip the derive's check). Every send and publish goes through
    /// here, and the host resolves its consumers' names with the same mapping.
    pub(crate) fn destination_name<M: Message>(&self) -> Result<&'static str> {
        self.shared.config.names.resolve(&M::descriptor())
    }

    /// Counts and logs events that reached no subscription.
    fn count_unrouted<E: Event>(&self, produced: &Produced<usize>) {
        if produced.out == Some(0) {
            let count = produced.ids.len() as u64;
            let total = self.shared.unrouted.fetch_add(count, Ordering::Relaxed) + count;
            tracing::info!(
                topic = self.destination_name::<E>().unwrap_or(E::NAME),
                events = count,
                total,
                "published to a topic without subscriptions: no one receives these events \
                 (a subscription receives the events published after its consumer first started)"
            );
        }
    }

    /// Encodes `messages` and hands them to `call` (one transport call), inside the
    /// producer span (feature `opentelemetry`) whose context the messages carry, and
    /// recorded as a send or publish (feature `metrics`). An empty batch makes no call.
    /// With options or send middleware each message gets headers of its own; without,
    /// they share this handle's.
    pub(crate) async fn produce<M: Message, T, F>(
        &self,
        operation: &'static str,
        messages: &[M],
        options: Option<&SendOptions>,
        call: impl FnOnce(&'static str, Vec<Outgoing>) -> F,
    ) -> Result<Produced<T>>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let name = self.destination_name::<M>()?;
        let span = producer_span(operation, name);
        let destination = match M::KIND {
            crate::MessageKind::Event => Destination::Topic(name),
            _ => Destination::Queue(name),
        };
        let wire = self.shared.transport.outgoing_wire_format(destination);
        let (ids, sent_at_ms) = monotonic_ids(messages.len());
        let own = if options.is_some()
            || self.shared.config.time_to_live_of::<M>().is_some()
            || !self.shared.config.send_middleware.is_empty()
        {
            // (Boxed: a send with none of these keeps a small future.)
            let own = Box::pin(self.own_headers::<M>(&ids, destination, options, wire.is_some()));
            Some(tracing::Instrument::instrument(own, span.clone()).await?)
        } else {
            None
        };
        let batch = span.in_scope(|| {
            self.encode(
                messages,
                (&ids, sent_at_ms),
                own.as_deref(),
                wire.as_deref(),
            )
        })?;
        // Only the calls with options report it, and they always have headers of their own.
        let trace_id = own
            .as_ref()
            .and_then(|own| own.first()?.get(headers::TRACE_ID).cloned());
        if batch.is_empty() {
            return Ok(Produced {
                ids,
                out: None,
                trace_id,
            });
        }
        #[cfg(feature = "opentelemetry")]
        crate::otel::record_ids(&span, &ids);
        let sending = sent(operation, name, ids.len(), call(name, batch));
        let out = tracing::Instrument::instrument(sending, span).await?;
        Ok(Produced {
            ids,
            out: Some(out),
            trace_id,
        })
    }

    /// Each message's headers: this handle's, then the options', then what the send
    /// middleware makes of them. A destination in a foreign wire format gets a trace id
    /// here when none is set, so that the sender learns the one stored.
    async fn own_headers<M: Message>(
        &self,
        ids: &[MessageId],
        destination: Destination<'_>,
        options: Option<&SendOptions>,
        foreign: bool,
    ) -> Result<Vec<Headers>> {
        let base = self.outgoing_headers();
        let mut all = Vec::with_capacity(ids.len());
        for id in ids {
            let mut headers = base.clone().into_owned();
            if let Some(options) = options {
                headers.extend(options.headers.clone());
            }
            let deadline = options.and_then(|o| o.expires_at).or_else(|| {
                let ttl = self.shared.config.time_to_live_of::<M>()?;
                Some(std::time::SystemTime::now() + ttl)
            });
            if let Some(deadline) = deadline {
                headers.insert(
                    crate::headers::EXPIRES_AT.to_owned(),
                    crate::host::deadline_header(deadline),
                );
            }
            if foreign && !headers.contains_key(headers::TRACE_ID) {
                let trace_id = crate::new_trace_id(&headers);
                headers.insert(headers::TRACE_ID.to_owned(), trace_id);
            }
            let id = id.clone();
            for layer in &self.shared.config.send_middleware {
                let mut message = OutgoingMessage {
                    destination,
                    message_type: M::TYPE,
                    id: &id,
                    headers: &mut headers,
                };
                layer.before_send(&mut message).await?;
            }
            all.push(headers);
        }
        Ok(all)
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
    /// another wire format; each with its own headers when given (`own`), else this
    /// handle's.
    fn encode<M: Message>(
        &self,
        messages: &[M],
        (ids, sent_at_ms): (&[MessageId], u64),
        own: Option<&[Headers]>,
        wire: Option<&dyn WireFormat>,
    ) -> Result<Vec<Outgoing>> {
        let config = &self.shared.config;
        let format = M::FORMAT.unwrap_or(config.format);
        let shared = self.outgoing_headers();
        let mut batch = Vec::with_capacity(messages.len());
        for (n, (message, id)) in messages.iter().zip(ids).enumerate() {
            let headers = own.map_or(&*shared, |own| &own[n]);
            let payload = match (format, wire) {
                (Format::Json, None) => {
                    encode_json_message(id, M::TYPE, headers, sent_at_ms, message)?
                }
                _ => {
                    let mut envelope =
                        Envelope::new(M::TYPE, format, format.encode(M::TYPE, message)?);
                    envelope.id = id.clone();
                    envelope.sent_at_ms = sent_at_ms;
                    envelope.headers.clone_from(headers);
                    Bytes::from(match wire {
                        None => envelope.encode()?,
                        Some(wire) => wire.encode(&envelope)?,
                    })
                }
            };
            if payload.len() > config.max_message_size {
                return Err(Error::MessageTooLarge {
                    size: payload.len(),
                    max: config.max_message_size,
                });
            }
            batch.push(Outgoing {
                id: id.clone(),
                payload,
            });
        }
        Ok(batch)
    }
}

/// What one transport call stored: the ids, the call's answer (`None`: no call, the batch
/// was empty), and the first message's trace id.
pub(crate) struct Produced<T> {
    pub(crate) ids: Ids,
    pub(crate) out: Option<T>,
    pub(crate) trace_id: Option<String>,
}

impl<T> Produced<T> {
    pub(crate) fn first_id(&self) -> MessageId {
        self.ids[0].clone()
    }

    pub(crate) fn sent(self) -> Sent {
        Sent {
            id: self.first_id(),
            trace_id: self.trace_id,
            duplicate: false,
            copies: None,
        }
    }
}

/// A call's message ids: a single send's inline (no allocation), a batch's in a `Vec`.
pub(crate) enum Ids {
    One([MessageId; 1]),
    Many(Vec<MessageId>),
}

impl std::ops::Deref for Ids {
    type Target = [MessageId];

    fn deref(&self) -> &[MessageId] {
        match self {
            Ids::One(one) => one,
            Ids::Many(many) => many,
        }
    }
}

impl Ids {
    pub(crate) fn into_vec(self) -> Vec<MessageId> {
        match self {
            Ids::One(one) => one.into(),
            Ids::Many(many) => many,
        }
    }
}

/// `n` new message ids, increasing across every call in this process (ULIDs: a clock
/// part, then a random part counted up within one millisecond), and the time they were
/// made in ms since the epoch, the messages' sent time: one clock read for a batch.
fn monotonic_ids(n: usize) -> (Ids, u64) {
    static GENERATOR: std::sync::Mutex<ulid::Generator> =
        std::sync::Mutex::new(ulid::Generator::new());
    let now = std::time::SystemTime::now();
    let mut generator = GENERATOR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut next = || {
        // (A clock behind the last id's counts up from it. Fails only when the random
        // part overflows within one millisecond.)
        let id = generator.generate_from_datetime(now);
        MessageId::from_ulid(id.unwrap_or_else(|_| ulid::Ulid::new()))
    };
    let ids = match n {
        1 => Ids::One([next()]),
        n => Ids::Many((0..n).map(|_| next()).collect()),
    };
    (ids, epoch_ms(now))
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
