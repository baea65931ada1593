//! The operator's view of queues, defined once for every kind of queue: [`Operator`].
//!
//! The bus's native layout (`bus_redis::admin::Admin`) and BabelQueue's two layouts
//! (`bus_babelqueue`) answer the same questions (list, count, peek, dead letters,
//! requeue, delete, purge); the `bus` tool, the dashboard and the metrics endpoint ask
//! them through this trait, so one command table, one dashboard and one endpoint serve
//! every kind. What a kind cannot do is a declared [`Capability`] it lacks, and calling
//! it fails with [`Error::Unsupported`], never a silent no-op.
//!
//! **Why here.** Both implementations must reach the trait without a crate arrow running
//! back up: bus-redis implements it for the native layout and bus-babelqueue (which
//! depends on bus-redis) for BabelQueue's, while bus-management (which depends on
//! bus-redis) composes them. bus-core is below all three, already holds the records the
//! operations return ([`QueueStats`], [`DeadLetter`], [`MessageSummary`],
//! [`ErrorRecord`](crate::records::ErrorRecord)), and knows nothing of Redis, so an in-memory
//! implementation is possible too (docs/architecture.md, "The operator surface").

use std::fmt;

use async_trait::async_trait;
use serde::Serialize;

use crate::records::{DeadLetter, MessageSummary, QueueStats};
use crate::{Error, Result};

/// One thing an operator may ask of a kind of queue, or a host or a bus of a transport:
/// what [`Error::Unsupported`] names when it is lacking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Capability {
    /// [`Operator::queues`].
    List,
    /// [`Operator::stats`].
    Stats,
    /// [`Operator::peek`].
    Peek,
    /// [`Operator::dead_letters`].
    DeadLetters,
    /// [`Operator::requeue`] back to the dead letters' own queue.
    Requeue,
    /// [`Operator::requeue`] to another queue of the same kind.
    RequeueElsewhere,
    /// [`Operator::delete_dead_letter`].
    DeleteDeadLetter,
    /// [`Operator::purge`].
    Purge,
    /// [`Operator::pause`] (flow control).
    Pause,
    /// [`Operator::resume`] (flow control).
    Resume,
    /// [`Operator::close_breaker`] (flow control).
    CloseBreaker,
    /// A transport's deduplicated sends ([`crate::transport::Deduplicated`]).
    Deduplication,
    /// A transport's delayed messages read back, cancelled or rescheduled
    /// ([`crate::transport::Scheduling`]).
    Scheduling,
    /// A transport's recurring ticks ([`crate::transport::Ticks`]).
    RecurringTicks,
    /// A transport's request/reply ([`crate::transport::Replies`]).
    RequestReply,
    /// A transport's step marks ([`crate::transport::StepMarks`]).
    StepMarks,
    /// A transport's singleton leases ([`crate::transport::Leases`]).
    SingletonLeases,
    /// A transport's flow control ([`crate::flow::FlowControl`]).
    FlowControl,
    /// A consumer's fleet-wide circuit breaker ([`crate::transport::FleetBreaker`]).
    FleetBreaker,
}

impl Capability {
    /// What the capability does, in words (for errors: "`<kind>` queues cannot ...").
    pub fn describe(self) -> &'static str {
        match self {
            Capability::List => "be listed",
            Capability::Stats => "be counted",
            Capability::Peek => "be peeked",
            Capability::DeadLetters => "list dead letters",
            Capability::Requeue => "requeue dead letters",
            Capability::RequeueElsewhere => "requeue dead letters to another queue",
            Capability::DeleteDeadLetter => "delete a dead letter",
            Capability::Purge => "be purged",
            Capability::Pause => "be paused",
            Capability::Resume => "be resumed",
            Capability::CloseBreaker => "have a circuit breaker closed",
            Capability::Deduplication => "deduplicate sends",
            Capability::Scheduling => "read, cancel or reschedule delayed messages",
            Capability::RecurringTicks => "record the ticks of recurring messages",
            Capability::RequestReply => "carry requests and replies",
            Capability::StepMarks => "mark steps as done (Context::once)",
            Capability::SingletonLeases => "lease singleton processors",
            Capability::FlowControl => "take flow control",
            Capability::FleetBreaker => "hold a fleet-wide circuit breaker",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A waiting message, as [`Operator::peek`] shows it.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ReadyMessage {
    /// Its place in processing order, from 0 (the next to be taken).
    pub position: u64,
    /// Its storage id when the kind keeps one apart from the message (the native
    /// layout's `~<n>` for a message stored before); `None` for a fresh element.
    pub storage_id: Option<String>,
    /// Deliveries (attempts) so far.
    pub delivery_count: u64,
    /// The decoded message; `None` when the element is not readable.
    pub message: Option<MessageSummary>,
    /// Why the element is not readable (a consumer will dead-letter it).
    pub decode_error: Option<String>,
}

impl ReadyMessage {
    /// A waiting message as read from storage.
    pub fn new(
        position: u64,
        storage_id: Option<String>,
        delivery_count: u64,
        message: Option<MessageSummary>,
        decode_error: Option<String>,
    ) -> Self {
        ReadyMessage {
            position,
            storage_id,
            delivery_count,
            message,
            decode_error,
        }
    }
}

/// Which dead letters to requeue. Exhaustive on purpose: every implementation must
/// handle every selection (a new one must not be ignored silently by an old match).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every dead letter of the queue (at most as many as it had when the call started).
    All,
    /// These storage ids (see [`DeadLetter::storage_id`]).
    Ids(Vec<String>),
}

/// What [`Operator::requeue`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Requeued {
    /// Where the messages went: the queue's name as the operator lists it.
    pub target: String,
    /// The storage ids (in the source queue) of the dead letters requeued.
    pub requeued: Vec<String>,
    /// Ids asked for that are not dead letters of the source (never were, or were
    /// requeued or deleted already).
    pub not_found: Vec<String>,
    /// Dead letters left dead because there is nothing to requeue (no stored envelope,
    /// a poison record, no target).
    pub skipped: Vec<String>,
    /// Dead letters copied to another queue that had left the source's dead letters by
    /// the time the copy was to be removed: those messages may be delivered twice.
    pub duplicated: Vec<String>,
}

/// What [`Operator::purge`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Purged {
    /// Ready messages deleted.
    pub ready: u64,
    /// Delayed messages (scheduled sends and retries waiting) deleted.
    pub delayed: u64,
    /// Messages of an ordered queue waiting for their key deleted.
    pub keyed: u64,
}

/// The operator's capabilities over one kind of queue (the native layout, a BabelQueue
/// layout, ...). Queues are named as [`Operator::queues`] lists them; each method fails
/// with [`Error::Unsupported`] when the kind lacks its [`Capability`].
///
/// Reads take several commands, not one snapshot, unless an implementation says
/// otherwise; changes are atomic as each implementation documents.
#[async_trait]
pub trait Operator: Send + Sync + fmt::Debug {
    /// The kind's short name (`bus`, `babel`, `laravel`): what the tools show beside a
    /// queue, and how they address a queue of this kind.
    fn kind(&self) -> &'static str;

    /// The messaging system the kind belongs to (OpenTelemetry's `messaging.system`:
    /// `bus`, `babelqueue`), for metrics; the kind's name unless said otherwise.
    fn system(&self) -> &'static str {
        self.kind()
    }

    /// Whether the kind offers `capability`.
    fn supports(&self, capability: Capability) -> bool;

    /// Every queue of this kind, sorted.
    async fn queues(&self) -> Result<Vec<String>>;

    /// Whether `queue` exists (holds a key, or was registered).
    async fn exists(&self, queue: &str) -> Result<bool>;

    /// The counts of `queue`.
    async fn stats(&self, queue: &str) -> Result<QueueStats>;

    /// The next `n` waiting messages of `queue`, in processing order, without taking them.
    async fn peek(&self, queue: &str, n: u64) -> Result<Vec<ReadyMessage>>;

    /// The first `n` dead letters of `queue`, oldest first.
    async fn dead_letters(&self, queue: &str, n: u64) -> Result<Vec<DeadLetter>>;

    /// Requeues dead letters of `queue` to their own queue (`to` `None`) or to another
    /// queue of the same kind.
    async fn requeue(
        &self,
        queue: &str,
        selection: &Selection,
        to: Option<&str>,
    ) -> Result<Requeued>;

    /// Deletes one dead letter; whether it was one.
    async fn delete_dead_letter(&self, queue: &str, id: &str) -> Result<bool>;

    /// Deletes the waiting (ready, delayed and keyed) messages of `queue`.
    async fn purge(&self, queue: &str) -> Result<Purged>;

    /// Stops consumers from taking messages of `queue` (flow control).
    async fn pause(&self, queue: &str) -> Result<()> {
        let _ = queue;
        Err(unsupported(self.kind(), Capability::Pause))
    }

    /// Lets consumers take messages of `queue` again (flow control).
    async fn resume(&self, queue: &str) -> Result<()> {
        let _ = queue;
        Err(unsupported(self.kind(), Capability::Resume))
    }

    /// Closes the fleet-wide circuit breaker of `queue` by hand: consumers take its
    /// messages again at once, with no probe ([`FlowControl::close_breaker`](crate::flow::FlowControl::close_breaker)).
    async fn close_breaker(&self, queue: &str) -> Result<()> {
        let _ = queue;
        Err(unsupported(self.kind(), Capability::CloseBreaker))
    }
}

/// The error of a capability `kind` lacks.
pub fn unsupported(kind: &'static str, capability: Capability) -> Error {
    Error::Unsupported { kind, capability }
}
