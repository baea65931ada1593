//! The contract between the host and a transport (in-memory here, Redis in `bus-redis`).
//!
//! The host owns the processing policy (concurrency, retries, dead-letter decisions,
//! middleware, lock renewal schedule); a transport owns storage and the atomic state
//! transitions of a message: send, reserve, ack, renew, retry, dead-letter, release.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

pub use crate::address::Source;
pub use crate::depth::{too_deep, MAX_NESTING};
pub use crate::envelope::{now_ms, ENVELOPE_VERSION};
pub use crate::message::{validate_name, MAX_NAME_LEN};
use crate::records::ErrorRecord;
pub use crate::records::{DeadLetterReason, ERROR_HISTORY};
pub use crate::singleton::SingletonLease;
use crate::{Envelope, MessageId, Result};

/// An encoded envelope ready to be stored.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The message id (not necessarily its storage key: that is the transport's choice).
    pub id: MessageId,
    /// The encoded envelope.
    pub payload: Bytes,
}

/// Identifies one reservation of one message, as the transport that handed it out made
/// it: which partition of the queue, and what the message is stored as. Transitions with a
/// stale receipt (the message was recovered or reserved again since) are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Receipt {
    /// The partition of its queue that handed it out (0 on a queue of one partition).
    pub shard: u16,
    /// What the message is held as.
    pub held: Held,
}

/// What a reserved message is stored as, in its transport's terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Held {
    /// A message stored under a key of its own (the memory transport's; Redis's stored
    /// messages; a BabelQueue element), reserved at delivery count `delivery`: a later
    /// reservation has a higher count, so an older receipt is recognised as stale.
    Stored {
        /// Its storage key.
        key: Bytes,
        /// The delivery count at reservation.
        delivery: u32,
    },
    /// Message `index` of several stored together under one key (Redis: the lease of the
    /// messages of one send).
    Leased {
        /// The lease's key (its token).
        lease: Bytes,
        /// The message's position in the lease.
        index: u32,
    },
}

impl Receipt {
    /// The receipt of a message stored under `key`, reserved at delivery count `delivery`,
    /// on an unpartitioned queue.
    pub fn stored(key: Bytes, delivery: u32) -> Self {
        Receipt {
            shard: 0,
            held: Held::Stored { key, delivery },
        }
    }

    /// The receipt of message `index` of the lease `lease`, on an unpartitioned queue.
    pub fn leased(lease: Bytes, index: u32) -> Self {
        Receipt {
            shard: 0,
            held: Held::Leased { lease, index },
        }
    }

    /// The storage key: the message's own, or its lease's.
    pub fn key(&self) -> &Bytes {
        match &self.held {
            Held::Stored { key, .. } => key,
            Held::Leased { lease, .. } => lease,
        }
    }
}

/// A reserved message.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// What to pass back to ack, retry, dead-letter or release it.
    pub receipt: Receipt,
    /// Deliveries so far, this one included.
    pub delivery_count: u32,
    /// The stored element: normally an encoded envelope; whatever was stored otherwise.
    pub payload: Bytes,
    /// The element already decoded, when the transport had to parse it anyway (a foreign
    /// wire format whose attempts or poison it reads on reserve): the host then uses it
    /// instead of decoding `payload` again. `None` (the native transports): the host
    /// decodes `payload` with the source's [`WireFormat`]. Boxed, so that a delivery
    /// without one stays small.
    pub decoded: Option<Box<Envelope>>,
}

/// What a source does with a message of a type that no processor of it handles, when the
/// host has no `on_unknown_type` hook ([`UnknownTypes`]). The host settles the message so,
/// and reports and counts that outcome (a retry as a retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnUnknownType {
    /// Dead-letter it with reason `unknown_type` (the default).
    #[default]
    DeadLetter,
    /// Retry it after the delay, a failed delivery: a consumer that knows the type may
    /// take it meanwhile (a rolling deploy).
    Retry(Duration),
    /// Acknowledge it unhandled (it is dropped), with a warning in the log.
    Acknowledge,
}

/// What a consumer is asked to honour.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConsumerOptions {
    /// Lock duration of a reservation (renewed by the host while handlers run).
    pub lock_timeout: Duration,
    /// Recovery dead-letters an expired message that already had this many deliveries.
    pub delivery_limit: u32,
    /// How often the host calls [`Consumer::recover`] (1 s unless set): a transport that
    /// tells a live holder of an expired lock from a gone one counts a consumer silent for
    /// a few of these as gone.
    pub recovery_interval: Duration,
}

impl ConsumerOptions {
    /// Options for a consumer, recovered every second.
    pub fn new(lock_timeout: Duration, delivery_limit: u32) -> Self {
        ConsumerOptions {
            lock_timeout,
            delivery_limit,
            recovery_interval: Duration::from_secs(1),
        }
    }

    /// How often the host calls [`Consumer::recover`].
    pub fn recovery_interval(mut self, interval: Duration) -> Self {
        self.recovery_interval = interval;
        self
    }
}

/// How a transport's stored elements carry messages: the bus's own envelope by default
/// ([`NativeFormat`], docs/wire-format.md), or another one that a transport brings for
/// some or all of its queues (a foreign system's envelope, say). The host routes what
/// [`WireFormat::decode`] returns by [`Envelope::message_type`], so one queue can carry
/// several message types.
pub trait WireFormat: Send + Sync + fmt::Debug + 'static {
    /// Reads one stored element: its id, type, headers, send time, body and the body's
    /// [`Format`](crate::Format). An error dead-letters the element as `undecodable`,
    /// unchanged; it must never panic.
    fn decode(&self, element: &Bytes) -> Result<Envelope>;
    /// Writes a message as the element to store.
    fn encode(&self, envelope: &Envelope) -> Result<Vec<u8>>;
}

/// The bus's own envelope (JSON or MessagePack, docs/wire-format.md): what every
/// transport uses unless it says otherwise. The host decodes it inline, without a call
/// through this trait.
#[derive(Debug, Clone, Copy, Default)]
pub struct NativeFormat;

impl WireFormat for NativeFormat {
    fn decode(&self, element: &Bytes) -> Result<Envelope> {
        Envelope::decode_shared(element)
    }
    fn encode(&self, envelope: &Envelope) -> Result<Vec<u8>> {
        envelope.encode()
    }
}

/// What a transport can do, for the conformance suite (feature `conformance`) and for
/// anyone who must know before trying: a transport that cannot do all of it says so by
/// overriding [`Transport::capabilities`], and the suite skips or scales exactly what is
/// declared, naming the capability.
///
/// A method on [`Transport`] with a default rather than a value handed to every check:
/// no check's signature changes, a transport that can do everything declares nothing,
/// and one that cannot says so once, beside its implementation, where a host can read
/// it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Topics and subscriptions: [`Transport::publish`] and subscription consumers.
    pub topics: bool,
    /// [`Transport::send`] with a due time ([`Placement::due`]): `None` when there are no delayed sends, else the step of
    /// due times (a due time is rounded to it: `Duration::ZERO` is exact).
    pub delayed_sends: Option<Duration>,
    /// [`Consumer::retry`]'s delay: `None` when it is not honoured (the message is ready
    /// again at once), else the step it is rounded to.
    pub retry_delays: Option<Duration>,
    /// Whether a dead letter keeps every error of its deliveries (else only the last).
    pub error_history: bool,
}

impl Capabilities {
    /// Everything, to the millisecond: the in-memory and Redis transports.
    pub const ALL: Capabilities = Capabilities {
        topics: true,
        delayed_sends: Some(Duration::ZERO),
        retry_delays: Some(Duration::ZERO),
        error_history: true,
    };

    /// Whether topics and subscriptions exist.
    pub fn topics(mut self, topics: bool) -> Self {
        self.topics = topics;
        self
    }
    /// Delayed sends and their step (`None`: none).
    pub fn delayed_sends(mut self, step: Option<Duration>) -> Self {
        self.delayed_sends = step;
        self
    }
    /// Retry delays and their step (`None`: not honoured).
    pub fn retry_delays(mut self, step: Option<Duration>) -> Self {
        self.retry_delays = step;
        self
    }
    /// Whether dead letters keep every error.
    pub fn error_history(mut self, kept: bool) -> Self {
        self.error_history = kept;
        self
    }
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities::ALL
    }
}

/// Where a message is sent: a command queue, or a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Destination<'a> {
    /// A command queue.
    Queue(&'a str),
    /// An event topic.
    Topic(&'a str),
}

/// A send with a deduplication key, as a transport is asked to store it
/// ([`Deduplicated::send_deduplicated`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Deduplication<'a> {
    /// The key: one message per key per queue within the window.
    pub key: &'a str,
    /// How long the key holds after the send that stored the message.
    pub window: Duration,
    /// When the message becomes ready (`None`: at once).
    pub due: Option<SystemTime>,
    /// The partition key, if any: on a partitioned queue it picks the partition (else
    /// the deduplication key does), and the key holds within that partition. On a queue
    /// ordered per key the message joins that key's order, as a keyed send would.
    pub partition: Option<&'a str>,
}

impl<'a> Deduplication<'a> {
    /// Deduplication by `key` for `window`, ready now, with no partition key: for
    /// callers outside this crate that hand encoded messages to
    /// [`Deduplicated::send_deduplicated`] (an outbox relay).
    pub fn new(key: &'a str, window: Duration) -> Self {
        Deduplication {
            key,
            window,
            due: None,
            partition: None,
        }
    }
    /// Ready at `due` (`None`: at once).
    pub fn due(mut self, due: Option<SystemTime>) -> Self {
        self.due = due;
        self
    }
    /// With the partition key `partition` (`None`: none).
    pub fn partition(mut self, partition: Option<&'a str>) -> Self {
        self.partition = partition;
        self
    }
}

/// Where and when a send's messages go: ready now or at a due time, with a key or none.
/// With a key, a transport that spreads a queue over partitions puts every message of the
/// key on the same one (so they keep their order), and a queue ordered per key
/// ([`crate::flow::PerKey`]) runs them in their key's order; elsewhere the key changes
/// nothing. A due time makes the messages ready then (delayed sends:
/// [`Capabilities::delayed_sends`]); a keyed one joins its key's order at that time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Placement<'a> {
    /// The partition and ordering key, if any.
    pub key: Option<&'a str>,
    /// When the messages become ready (`None`: at once).
    pub due: Option<SystemTime>,
}

impl<'a> Placement<'a> {
    /// Ready at once, with no key.
    pub fn now() -> Self {
        Placement::default()
    }

    /// With the key `key` (`None`: none).
    pub fn key(mut self, key: Option<&'a str>) -> Self {
        self.key = key;
        self
    }

    /// Ready at `due` (`None`: at once).
    pub fn due(mut self, due: Option<SystemTime>) -> Self {
        self.due = due;
        self
    }
}

/// The producer side of a transport, and a factory of consumers.
///
/// The core of the contract; what only some transports can do is reached through
/// [`Transport::extras`], `None` when absent, so that a transport wrapping another forwards
/// these methods and cannot miss one.
#[async_trait]
pub trait Transport: Send + Sync + fmt::Debug + 'static {
    /// Stores messages for `queue`, all or none, placed as `placement` says.
    async fn send(
        &self,
        queue: &str,
        placement: Placement<'_>,
        messages: Vec<Outgoing>,
    ) -> Result<()>;
    /// Writes a copy of each message to every subscription of `topic`, all or none, ready
    /// now or at `due`. Returns the number of subscriptions reached.
    async fn publish(
        &self,
        topic: &str,
        due: Option<SystemTime>,
        messages: Vec<Outgoing>,
    ) -> Result<usize>;
    /// Opens a consumer; for a subscription this registers it, so that it receives
    /// events published from now on.
    async fn consumer(
        &self,
        source: &Source,
        options: ConsumerOptions,
    ) -> Result<Box<dyn Consumer>>;
    /// The wire format of the elements of `source`, asked once per consumer when the host
    /// starts; `None` (the default) is the native envelope.
    fn wire_format(&self, source: &Source) -> Option<Arc<dyn WireFormat>> {
        let _ = source;
        None
    }
    /// The wire format in which messages for `destination` are to be encoded, asked on
    /// every send and publish; `None` (the default) is the native envelope. It should
    /// agree with [`Transport::wire_format`] of the sources the messages reach.
    fn outgoing_wire_format(&self, destination: Destination<'_>) -> Option<Arc<dyn WireFormat>> {
        let _ = destination;
        None
    }
    /// How faithfully it keeps the core's promises: everything ([`Capabilities::ALL`])
    /// by default.
    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }
    /// What this transport can do beyond the core.
    fn extras(&self) -> TransportExtras<'_>;
}

/// What a transport can do beyond the core contract, each `None` when it cannot. A caller
/// that needs one it lacks fails with [`crate::Error::Unsupported`] naming the
/// [`Capability`](crate::Capability).
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct TransportExtras<'a> {
    /// Deduplicated sends.
    pub dedup: Option<&'a dyn Deduplicated>,
    /// Delayed messages read back, cancelled, rescheduled.
    pub scheduling: Option<&'a dyn Scheduling>,
    /// The ticks of recurring schedules.
    pub ticks: Option<&'a dyn Ticks>,
    /// Request/reply inboxes.
    pub replies: Option<&'a dyn Replies>,
    /// Step marks ([`Context::once`](crate::Context::once)).
    pub marks: Option<&'a dyn StepMarks>,
    /// Singleton processors' leases.
    pub leases: Option<&'a dyn Leases>,
    /// Flow control of its queues ([`crate::flow`]).
    pub flow: Option<&'a dyn crate::flow::FlowControl>,
    /// Where hosts send their heartbeats ([`crate::heartbeat`]).
    pub host_reporter: Option<Arc<dyn crate::heartbeat::HostReporter>>,
    /// Where hosts send their per-type timing ([`crate::timing`]).
    pub timing_reporter: Option<Arc<dyn crate::timing::TimingReporter>>,
}

impl fmt::Debug for TransportExtras<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportExtras")
            .field("dedup", &self.dedup.is_some())
            .field("scheduling", &self.scheduling.is_some())
            .field("ticks", &self.ticks.is_some())
            .field("replies", &self.replies.is_some())
            .field("marks", &self.marks.is_some())
            .field("leases", &self.leases.is_some())
            .field("flow", &self.flow.is_some())
            .field("host_reporter", &self.host_reporter.is_some())
            .field("timing_reporter", &self.timing_reporter.is_some())
            .finish()
    }
}

impl<'a> TransportExtras<'a> {
    /// With deduplicated sends.
    pub fn dedup(mut self, dedup: &'a dyn Deduplicated) -> Self {
        self.dedup = Some(dedup);
        self
    }
    /// With delayed messages read back, cancelled, rescheduled.
    pub fn scheduling(mut self, scheduling: &'a dyn Scheduling) -> Self {
        self.scheduling = Some(scheduling);
        self
    }
    /// With recurring ticks.
    pub fn ticks(mut self, ticks: &'a dyn Ticks) -> Self {
        self.ticks = Some(ticks);
        self
    }
    /// With request/reply.
    pub fn replies(mut self, replies: &'a dyn Replies) -> Self {
        self.replies = Some(replies);
        self
    }
    /// With step marks.
    pub fn marks(mut self, marks: &'a dyn StepMarks) -> Self {
        self.marks = Some(marks);
        self
    }
    /// With singleton leases.
    pub fn leases(mut self, leases: &'a dyn Leases) -> Self {
        self.leases = Some(leases);
        self
    }
    /// With flow control.
    pub fn flow(mut self, flow: &'a dyn crate::flow::FlowControl) -> Self {
        self.flow = Some(flow);
        self
    }
    /// With host heartbeats.
    pub fn host_reporter(mut self, reporter: Arc<dyn crate::heartbeat::HostReporter>) -> Self {
        self.host_reporter = Some(reporter);
        self
    }
    /// With per-type timing.
    pub fn timing_reporter(mut self, reporter: Arc<dyn crate::timing::TimingReporter>) -> Self {
        self.timing_reporter = Some(reporter);
        self
    }
}

/// The refusal of a transport that lacks `capability`.
pub fn unsupported(capability: crate::Capability) -> crate::Error {
    crate::operator::unsupported("this transport's", capability)
}

/// Deduplicated sends: a message stored unless one with the same key was stored within
/// the window, the check, the key and the store one atomic step.
#[async_trait]
pub trait Deduplicated: Send + Sync + fmt::Debug {
    /// Stores `message` (ready now, or at `dedup.due`) unless a message with the
    /// deduplication key `dedup.key` was stored in `queue` within its window: then
    /// stores nothing and returns that first message's id.
    async fn send_deduplicated(
        &self,
        queue: &str,
        message: Outgoing,
        dedup: Deduplication<'_>,
    ) -> Result<Option<MessageId>>;
    /// Many [`Deduplicated::send_deduplicated`] calls in one: for each message, in order,
    /// its answer. Each message is atomic with its key, and a key taken by an earlier
    /// message of the batch holds for the later ones; the batch as a whole is not. The
    /// default sends them one by one.
    async fn send_deduplicated_batch(
        &self,
        queue: &str,
        messages: Vec<(Outgoing, Deduplication<'_>)>,
    ) -> Result<Vec<Option<MessageId>>> {
        let mut firsts = Vec::with_capacity(messages.len());
        for (message, dedup) in messages {
            firsts.push(self.send_deduplicated(queue, message, dedup).await?);
        }
        Ok(firsts)
    }
}

/// Delayed messages read back, cancelled and rescheduled by id.
#[async_trait]
pub trait Scheduling: Send + Sync + fmt::Debug {
    /// The delayed message `id` of `queue` (a delayed send's message id, or the storage
    /// id a retry waits under): its due time and stored element, or `None` when no
    /// message waits under that id (it became ready, or never was).
    async fn scheduled(&self, queue: &str, id: &MessageId) -> Result<Option<(SystemTime, Bytes)>>;
    /// Removes the delayed message `id` of `queue` before it becomes ready, in one step;
    /// `false` when no message waits under that id (too late: it became ready).
    async fn cancel(&self, queue: &str, id: &MessageId) -> Result<bool>;
    /// Moves the due time of the delayed message `id` of `queue` to `due`, in one step;
    /// `false` when no message waits under that id.
    async fn reschedule(&self, queue: &str, id: &MessageId, due: SystemTime) -> Result<bool>;
}

/// The ticks of recurring schedules, stored once per tick across hosts.
#[async_trait]
pub trait Ticks: Send + Sync + fmt::Debug {
    /// Stores `message` (ready now) for `tick` of a recurring schedule sending to
    /// `queue`, only if this tick is newer than the last one stored for the schedule
    /// (and, for a catch-up, only if one was stored before): then records it as the
    /// last. The check, the record and the store are one atomic step, so hosts racing
    /// with the same tick store it once (docs/concepts.md, "Recurring messages").
    /// `true` when stored.
    async fn send_tick(&self, queue: &str, tick: Tick<'_>, message: Outgoing) -> Result<bool>;
    /// The last tick stored for `schedule` on `queue` (ms since the Unix epoch), `None`
    /// before the first.
    async fn last_tick(&self, queue: &str, schedule: &str) -> Result<Option<u64>>;
    /// Records a host's recurring schedule for operators' listings (`bus schedules`);
    /// asked when the host starts.
    async fn record_schedule(&self, schedule: &ScheduleRecord) -> Result<()>;
}

/// Request/reply ([`Bus::request`](crate::Bus::request)).
#[async_trait]
pub trait Replies: Send + Sync + fmt::Debug {
    /// Opens the reply inbox `name` (a fresh, valid name), with what it needs to wait on
    /// its own.
    async fn reply_inbox(&self, name: &str) -> Result<Box<dyn crate::ReplyInbox>>;
    /// Pushes the encoded reply `element` onto the inbox named `inbox`, which then expires
    /// `keep` after this push unless read; one atomic step.
    async fn reply(&self, inbox: &str, element: Bytes, keep: Duration) -> Result<()>;
}

/// Step marks ([`Context::once`](crate::Context::once)).
#[async_trait]
pub trait StepMarks: Send + Sync + fmt::Debug {
    /// The mark of step `step` of message `id` from `source`: the result the step stored,
    /// or `None` when no delivery completed it.
    async fn step_mark(&self, source: &Source, id: &MessageId, step: &str)
        -> Result<Option<Bytes>>;
    /// Marks step `step` of message `id` from `source` as done with `result`, kept for
    /// `keep`, unless it is marked already: then changes nothing and returns the stored
    /// result. One atomic step, stored before it returns.
    async fn mark_step(
        &self,
        source: &Source,
        id: &MessageId,
        step: &str,
        result: Bytes,
        keep: Duration,
    ) -> Result<Option<Bytes>>;
}

/// Singleton processors' leases.
pub trait Leases: Send + Sync + fmt::Debug {
    /// The lease of a singleton processor's `queue`, held under the token `holder` for
    /// `ttl` per acquisition or renewal ([`SingletonLease`]). Asked when the host is
    /// built, so it must do no I/O.
    fn singleton_lease(
        &self,
        queue: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Arc<dyn SingletonLease>>;
}

pub use crate::recurring::{ScheduleRecord, Tick};

/// What a worker asks of [`Consumer::receive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Want {
    /// At most this many messages: the caller's free slots (handlers and prefetch). 0 asks
    /// only what holds the source back, without waiting ([`Want::peek`]).
    pub max: usize,
    /// How many of them the caller would start at once (its free handler slots). A source
    /// whose limits are counted at handler start (a rate limit) takes no more than this,
    /// so that none of them waits in a prefetch buffer and starts after its window.
    pub now: usize,
    /// Only a message recovered from a crash ([`Hold::Isolation`]), to run alone: the
    /// caller holds nothing else.
    pub alone: bool,
}

impl Want {
    /// Up to `max`, all of which could start at once.
    pub fn new(max: usize) -> Self {
        Want {
            max,
            now: max,
            alone: false,
        }
    }

    /// How many could start at once (at most `max`).
    pub fn now(mut self, now: usize) -> Self {
        self.now = now.min(self.max);
        self
    }

    /// One message recovered from a crash, to run alone.
    pub fn alone() -> Self {
        Want {
            max: 1,
            now: 1,
            alone: true,
        }
    }

    /// Nothing: only what holds the source back, at once.
    pub fn peek() -> Self {
        Want::new(0)
    }
}

/// What a receive saw: the messages it reserved, and what holds the source back.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Received {
    /// The messages reserved (none when held back, or when nothing was ready in time).
    pub deliveries: Vec<Delivery>,
    /// What held the source back, if anything.
    pub hold: Hold,
}

impl Received {
    /// What a receive saw.
    pub fn new(deliveries: Vec<Delivery>, hold: Hold) -> Self {
        Received { deliveries, hold }
    }
}

impl From<Vec<Delivery>> for Received {
    fn from(deliveries: Vec<Delivery>) -> Self {
        Received::new(deliveries, Hold::None)
    }
}

/// What held a source back at a receive, as its transport saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hold {
    /// Nothing.
    #[default]
    None,
    /// Messages recovered from a crashed consumer wait to run alone: the caller settles
    /// everything it holds, then receives them with [`Want::alone`], one at a time, so
    /// that a message that kills its process is charged only its own deliveries.
    Isolation,
    /// Paused ([`crate::flow`]): no message may start.
    Paused,
    /// At its concurrency limit: nothing more until a slot frees.
    Full,
    /// At its rate limit: nothing more until the window frees a start.
    RateLimited,
    /// A fleet-wide circuit breaker is open until `until_ms` (ms since the Unix epoch,
    /// the transport's clock), or another consumer's probe runs: no message may start.
    BreakerOpen {
        /// When a consumer may take the next probe.
        until_ms: u64,
    },
    /// The fleet-wide circuit breaker's cool-down was over: the delivery (one per
    /// partition) is its probe, and the transport judges it by how it is settled (an
    /// ack closes the breaker for every consumer, a retry or dead letter opens it again).
    Probe,
}

impl Hold {
    /// Whether no message may start now (paused, a fleet breaker open): what the caller
    /// reserved and has not started goes back ([`Consumer::release`]).
    pub fn stops_starts(self) -> bool {
        matches!(self, Hold::Paused | Hold::BreakerOpen { .. })
    }
}

/// One consumer of one [`Source`]. Every method is one atomic transition per message.
///
/// The core of the contract; what only some consumers can do is reached through
/// [`Consumer::extras`], `None` when absent, so that a consumer wrapping another (the
/// singleton gate, the circuit breaker) forwards these methods and cannot miss one.
#[async_trait]
pub trait Consumer: Send + Sync + fmt::Debug {
    /// Reserves up to `want.max` ready messages (promoting due delayed ones first), each
    /// with a lock and an incremented delivery count, and says what held the source back.
    /// When none is ready it waits, without polling, until one is, `stop` fires, or a
    /// transport-chosen bound (about a second) passes; so it may return none. With
    /// `want.max` 0 it only looks, and never waits.
    async fn receive(&self, want: Want, stop: &CancellationToken) -> Result<Received>;
    /// Removes handled messages.
    async fn ack(&self, receipts: &[Receipt]) -> Result<()>;
    /// Extends the locks of held messages; `false` where the lock was already lost. A
    /// message whose lock was lost while this consumer was alive (its renewals came too
    /// late: a stalled link, a blocked runtime) is no crash suspect: the transport returns
    /// it to the queue as an ordinary message if recovery had set it aside to run alone.
    async fn renew(&self, receipts: &[Receipt]) -> Result<Vec<bool>>;
    /// Records the error and makes the message ready again after `delay`.
    async fn retry(&self, receipt: &Receipt, delay: Duration, error: &ErrorRecord) -> Result<()>;
    /// Moves the message to the dead-letter list, unchanged, with the reason.
    async fn dead_letter(
        &self,
        receipt: &Receipt,
        reason: DeadLetterReason,
        error: Option<&ErrorRecord>,
    ) -> Result<()>;
    /// Returns reserved messages that never started to the head of the ready list and
    /// takes back their delivery count (at shutdown, or when their source stops starts).
    async fn release(&self, receipts: &[Receipt]) -> Result<()>;
    /// Recovers messages whose lock expired (bounded per call) and returns how many.
    /// The lost delivery stays counted. A message that was held with others by a consumer
    /// that is gone is then delivered alone ([`Hold::Isolation`]); one that was already
    /// alone and reached the delivery limit is dead-lettered. Safe when several consumers
    /// run it at once.
    async fn recover(&self) -> Result<usize>;
    /// Closes the consumer's own connections, if any (called once, after its last use).
    async fn close(&self) -> Result<()>;
    /// What this consumer can do beyond the core.
    fn extras(&self) -> ConsumerExtras<'_>;
}

/// What a consumer can do beyond the core contract, each `None` when it cannot.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct ConsumerExtras<'a> {
    /// The source's fleet-wide circuit breaker ([`BreakerScope::Fleet`](crate::BreakerScope::Fleet)).
    pub fleet_breaker: Option<&'a dyn FleetBreaker>,
    /// The error history of a held message.
    pub error_history: Option<&'a dyn ErrorHistory>,
    /// The source's policy for unknown types (none: they are dead-lettered).
    pub unknown_types: Option<&'a dyn UnknownTypes>,
}

impl<'a> ConsumerExtras<'a> {
    /// With a fleet-wide circuit breaker.
    pub fn fleet_breaker(mut self, breaker: &'a dyn FleetBreaker) -> Self {
        self.fleet_breaker = Some(breaker);
        self
    }

    /// With the error history of held messages.
    pub fn error_history(mut self, history: &'a dyn ErrorHistory) -> Self {
        self.error_history = Some(history);
        self
    }

    /// With a policy for unknown types.
    pub fn unknown_types(mut self, policy: &'a dyn UnknownTypes) -> Self {
        self.unknown_types = Some(policy);
        self
    }

    /// What to do with the `delivery_count`-th delivery of a message of an unknown type:
    /// the source's policy, else a dead letter.
    pub fn on_unknown_type(&self, delivery_count: u32) -> OnUnknownType {
        self.unknown_types.map_or(OnUnknownType::DeadLetter, |u| {
            u.on_unknown_type(delivery_count)
        })
    }
}

/// A source's policy for messages of a type that no processor of it handles (asked only
/// when the host has no `on_unknown_type` hook), so that the host's error hook and metrics
/// report what was done: a transport whose fleet has another policy than a dead letter
/// (BabelQueue's unknown-URN strategies) says so here.
pub trait UnknownTypes: Send + Sync + fmt::Debug {
    /// What to do with the `delivery_count`-th delivery of such a message.
    fn on_unknown_type(&self, delivery_count: u32) -> OnUnknownType;
}

/// A source's fleet-wide circuit breaker, stored in the transport so that every consumer
/// of every host obeys it: reserves are held back ([`Hold::BreakerOpen`]) until its
/// cool-down ends, then one message goes as the probe ([`Hold::Probe`]), judged by the
/// transport when it is settled.
#[async_trait]
pub trait FleetBreaker: Send + Sync + fmt::Debug {
    /// Opens the breaker for `cool_down` from now (the transport's clock), on every
    /// consumer of every host; never shortens an open one. One atomic step.
    async fn trip(&self, cool_down: Duration) -> Result<()>;
}

/// The errors recorded for held messages by their earlier deliveries.
#[async_trait]
pub trait ErrorHistory: Send + Sync + fmt::Debug {
    /// The errors of a held message's earlier failed deliveries, oldest first (at most
    /// [`ERROR_HISTORY`]).
    async fn errors(&self, receipt: &Receipt) -> Result<Vec<ErrorRecord>>;
}

/// Shorthands over [`Consumer::receive`], for tests and tools that want the messages only.
#[async_trait]
pub trait ConsumerExt: Consumer {
    /// Up to `max` messages (what held the source back is dropped).
    async fn take(&self, max: usize, stop: &CancellationToken) -> Result<Vec<Delivery>> {
        Ok(self.receive(Want::new(max), stop).await?.deliveries)
    }

    /// The next message recovered from a crash, to run alone, if one waits.
    async fn take_alone(&self) -> Result<Option<Delivery>> {
        let received = self
            .receive(Want::alone(), &CancellationToken::new())
            .await?;
        Ok(received.deliveries.into_iter().next())
    }
}

impl<C: Consumer + ?Sized> ConsumerExt for C {}

/// Refuses a keyed send with an empty key: a key names a list and a field in the
/// transport, so it must have at least one character.
pub fn refuse_empty_key(queue: &str, key: &str) -> crate::Result<()> {
    if key.is_empty() {
        return Err(crate::Error::Config(format!(
            "sending to {queue} with an empty key: a key must have at least one character"
        )));
    }
    Ok(())
}
