//! Where workflows keep their state: the [`WorkflowStore`] seam, what crosses it, and its
//! two implementations ([`MemoryWorkflowStore`], [`RedisWorkflowStore`]). This is the
//! implementer's face of the crate; an application only picks one of the two.
//!
//! Every method is one atomic step of the store (one Lua script on Redis) and safe to run
//! twice: a method re-run after a lost reply, or by a second process, changes nothing
//! more. The steps that span two places (a member's queue and its batch, a batch and its
//! callbacks' queues, a child batch and its parent) are made of such steps in an order
//! that a crash between two of them cannot break (docs/concepts.md, "Workflows").

mod machine;
mod memory;
mod records;
mod redis;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{Receipt, Source};
use bytes::Bytes;

pub use memory::MemoryWorkflowStore;
pub use records::{
    BatchOutcome, BatchState, BatchStatus, BatchSummary, CallbackStatus, DeadMember, MemberResult,
    ParkedInfo, ParkedKind,
};
pub use redis::RedisWorkflowStore;

use crate::ids::{BatchId, CallbackKind, ChildPolicy, MemberRef};
use crate::Result;

/// A batch as it is opened.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BatchSpec {
    /// Its id.
    pub id: BatchId,
    /// The member of another batch that opened it: that member counts as settled in its
    /// batch only once this batch's callbacks were sent (a nested batch).
    pub parent: Option<MemberRef>,
    /// Its callbacks, staged: each is sent at most once, when its kind fires.
    pub callbacks: Vec<Callback>,
    /// `Some` for a parent's children: their results are kept, and the policy decides
    /// what a dead child does to the continuation.
    pub policy: Option<ChildPolicy>,
}

impl BatchSpec {
    /// A batch with no callbacks yet.
    pub fn new(id: BatchId) -> Self {
        BatchSpec {
            id,
            parent: None,
            callbacks: Vec::new(),
            policy: None,
        }
    }
    /// Nested in `parent`'s batch.
    pub fn parent(mut self, parent: Option<MemberRef>) -> Self {
        self.parent = parent;
        self
    }
    /// With a callback.
    pub fn callback(mut self, callback: Callback) -> Self {
        self.callbacks.retain(|c| c.kind != callback.kind);
        self.callbacks.push(callback);
        self
    }
    /// Children of a parent, with its policy.
    pub fn policy(mut self, policy: Option<ChildPolicy>) -> Self {
        self.policy = policy;
        self
    }
}

/// A staged callback: an encoded envelope and its queue.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Callback {
    /// When it is sent.
    pub kind: CallbackKind,
    /// Its queue.
    pub queue: String,
    /// Its message id.
    pub id: bus_core::MessageId,
    /// The encoded envelope, sent as it is.
    pub envelope: Bytes,
}

impl Callback {
    /// A callback of `kind`: `envelope` (with message id `id`) to `queue`.
    pub fn new(
        kind: CallbackKind,
        queue: impl Into<String>,
        id: bus_core::MessageId,
        envelope: Bytes,
    ) -> Self {
        Callback {
            kind,
            queue: queue.into(),
            id,
            envelope,
        }
    }
}

impl fmt::Debug for Callback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Callback")
            .field("kind", &self.kind)
            .field("queue", &self.queue)
            .field("id", &self.id)
            .field("envelope_len", &self.envelope.len())
            .finish()
    }
}

/// How a member left its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Acknowledged, with the result its handler set (JSON), if any.
    Succeeded {
        /// The result.
        result: Option<Bytes>,
    },
    /// Dead-lettered.
    Dead {
        /// The dead letter's reason (`rejected`, `delivery_limit`, ...).
        reason: String,
        /// Its last error.
        error: String,
    },
}

/// A member's settle, written before the transport settles it (its ack or dead letter)
/// and confirmed after: what the batch counts once confirmed, and where to look for the
/// member if the confirmation never comes (the process died in between).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Mark {
    /// The member's index.
    pub index: u64,
    /// How it left.
    pub outcome: Outcome,
    /// Its message id.
    pub message_id: bus_core::MessageId,
    /// Where it was consumed.
    pub source: Source,
    /// The reservation that settles it.
    pub receipt: Receipt,
}

impl Mark {
    /// Member `index` leaving as `outcome`: message `message_id`, reserved from `source`
    /// as `receipt`.
    pub fn new(
        index: u64,
        outcome: Outcome,
        message_id: bus_core::MessageId,
        source: Source,
        receipt: Receipt,
    ) -> Self {
        Mark {
            index,
            outcome,
            message_id,
            source,
            receipt,
        }
    }
}

/// One change to a batch's members ([`WorkflowStore::settle`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settle {
    /// Count member `index` as its mark says (its transport settle is stored); nothing if
    /// it has no mark or is settled already. With a receipt, only a mark written for that
    /// delivery counts: what the relay's sweep sends, since a newer delivery may have
    /// replaced the mark it looked at. Without, any mark: a consumer's own settle,
    /// confirmed while its lock held, so that no newer delivery exists.
    Confirm {
        /// The member.
        index: u64,
        /// The delivery whose mark is meant, if only that one.
        receipt: Option<Receipt>,
    },
    /// Drop member `index`'s mark written for `receipt`: that delivery's transport settle
    /// did not happen (the member is back in its queue and will settle again). A mark a
    /// newer delivery wrote since is kept for that delivery's own settle.
    Drop {
        /// The member.
        index: u64,
        /// The delivery whose mark is dropped.
        receipt: Receipt,
    },
    /// Member `index` opened a child batch, which finished so: the member counts as
    /// settled once its own ack is confirmed too.
    Child {
        /// The member.
        index: u64,
        /// `None`: every child succeeded; else why the child batch failed.
        failed: Option<String>,
    },
}

/// What a close or a settle fired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fired {
    /// The callbacks to send now.
    pub callbacks: Vec<Callback>,
    /// The batch finished with this step (its outcome is decided): record the callbacks
    /// as sent with [`WorkflowStore::sent`], even if there are none, to move it on.
    pub finished: bool,
}

/// What [`WorkflowStore::sent`] leaves to do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Handoff {
    /// Other fired callbacks are not sent yet, or the batch has not finished.
    Pending,
    /// Every callback is sent; the member of the parent batch that opened this one is to
    /// be settled ([`Settle::Child`]), then [`WorkflowStore::done`].
    Parent {
        /// The member.
        member: MemberRef,
        /// `None` when the batch succeeded, else why it failed.
        failed: Option<String>,
    },
    /// Every callback is sent and nothing is left: the batch is done.
    Done,
}

/// A mark whose confirmation did not come in time, for the sweeper
/// ([`WorkflowStore::inspect`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StaleMark {
    /// The member's index.
    pub index: u64,
    /// Whether the mark is a dead letter (else an ack).
    pub dead: bool,
    /// Where the member was consumed.
    pub source: Source,
    /// The reservation the mark was written for.
    pub receipt: Receipt,
}

/// What the sweeper finds in a batch ([`WorkflowStore::inspect`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Inspection {
    /// Its state.
    pub state: BatchState,
    /// Callbacks that fired but are not recorded as sent.
    pub unsent: Vec<Callback>,
    /// In [`BatchState::Settled`]: the parent member still to settle.
    pub handoff: Handoff,
    /// Marks older than the staleness bound.
    pub stale: Vec<StaleMark>,
}

/// Where a settled member's message is now, as its transport sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Presence {
    /// Still held under the reservation: its settle may still come.
    Held,
    /// Stored under another reservation, or ready again: it will run again.
    Stored,
    /// In the dead letters.
    Dead,
    /// Nowhere: acknowledged (or deleted by an operator).
    Gone,
}

/// Asks a transport where a reserved message is now: what resolves a mark whose
/// confirmation was lost. A capability: a store without it leaves such marks for the
/// next delivery of the member to replace (docs/concepts.md, "Workflows").
#[async_trait]
pub trait PresenceCheck: Send + Sync + fmt::Debug {
    /// Where the message reserved as `receipt` from `source` is now.
    async fn presence(&self, source: &Source, receipt: &Receipt) -> Result<Presence>;
}

/// A run parked by a durable step ([`WorkflowStore::park`], [`WorkflowStore::wait`]):
/// the message to send again, at its due time or when its signal comes.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ParkedRun {
    /// Unique per message and step: `<message id>.<step>`.
    pub token: String,
    /// Where the resumed message goes.
    pub queue: String,
    /// The message's id (the resumed message keeps it).
    pub message_id: bus_core::MessageId,
    /// The message's type, for operators.
    pub message_type: String,
    /// When it resumes (ms since the Unix epoch): a sleep's end, or a wait's timeout.
    pub due_ms: u64,
    /// The resumed message: the original envelope with its resume header.
    pub envelope: Bytes,
}

/// A parked run whose time came, to send ([`WorkflowStore::take_due`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DueRun {
    /// Its token: the deduplication key of its send, and what [`WorkflowStore::relayed`]
    /// takes.
    pub token: String,
    /// Its queue.
    pub queue: String,
    /// Its message id.
    pub message_id: bus_core::MessageId,
    /// The envelope to send.
    pub envelope: Bytes,
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitOutcome {
    /// The signal came, with this payload (JSON).
    Signalled(Bytes),
    /// The timeout passed first.
    TimedOut,
}

/// The state of batches and parked runs. [`MemoryWorkflowStore`] and
/// [`RedisWorkflowStore`] implement it; `bus_conformance::workflows` checks that they
/// agree.
#[async_trait]
pub trait WorkflowStore: Send + Sync + fmt::Debug + 'static {
    /// Opens a batch unless it exists (then changes nothing): `true` when it opened it.
    async fn open(&self, spec: &BatchSpec) -> Result<bool>;
    /// Takes `count` member indices for the add named `token`, returning the first; the
    /// same token again returns the same indices. Refused once the batch is closed
    /// ([`Error::Closed`](crate::Error::Closed)), unless `adder` is an unsettled member
    /// of the batch, or finished.
    async fn add(
        &self,
        batch: &BatchId,
        token: &str,
        count: u64,
        adder: Option<u64>,
    ) -> Result<u64>;
    /// Records that `member` opened the child batch `child`: it settles only once that
    /// batch's callbacks were sent. `false` when the member had settled already.
    async fn defer(&self, member: &MemberRef, child: &BatchId) -> Result<bool>;
    /// Closes the batch: no more members (but from its own unsettled members). Returns
    /// the callbacks that fire now (an empty batch, or every member settled already).
    async fn close(&self, batch: &BatchId) -> Result<Fired>;
    /// Writes marks, skipping members already settled.
    async fn mark(&self, batch: &BatchId, marks: &[Mark]) -> Result<()>;
    /// Applies settles; returns the callbacks that fire with them.
    async fn settle(&self, batch: &BatchId, settles: &[Settle]) -> Result<Fired>;
    /// Records fired callbacks as sent; what is left to do.
    async fn sent(&self, batch: &BatchId, kinds: &[CallbackKind]) -> Result<Handoff>;
    /// Marks a batch done (after its parent member was settled): its state expires after
    /// [`RETENTION`].
    async fn done(&self, batch: &BatchId) -> Result<()>;
    /// A batch's status with up to `dead_limit` of its dead members; `None` when unknown.
    async fn status(&self, batch: &BatchId, dead_limit: usize) -> Result<Option<BatchStatus>>;
    /// Members `from .. from + count` (fewer past the last): their results.
    async fn results(&self, batch: &BatchId, from: u64, count: usize) -> Result<Vec<MemberResult>>;
    /// Open batches (oldest first) and recently done ones (newest first), at most `limit`
    /// of each.
    async fn list(&self, limit: usize) -> Result<(Vec<BatchId>, Vec<BatchId>)>;
    /// Up to `limit` open batches due for a sweep, each then due again after `every`.
    async fn due_for_sweep(&self, limit: usize, every: Duration) -> Result<Vec<BatchId>>;
    /// What the sweeper must look at in a batch: its unsent callbacks, its parent hand-off,
    /// its marks older than `stale`. `None` when the batch is gone.
    async fn inspect(&self, batch: &BatchId, stale: Duration) -> Result<Option<Inspection>>;
    /// Drops a done (or vanished) batch from the open ones.
    async fn unlist(&self, batch: &BatchId) -> Result<()>;
    /// Where a reserved message is now, when this store can ask its transport.
    fn presence(&self) -> Option<&dyn PresenceCheck> {
        None
    }

    /// Parks a sleeping run until `run.due_ms` unless its token is parked: `true` when it
    /// parked it.
    async fn park(&self, run: &ParkedRun) -> Result<bool>;
    /// Parks a run waiting for `signal` until `run.due_ms` (its timeout) unless its token
    /// is parked; if the signal came already, the run is due at once with it.
    async fn wait(&self, run: &ParkedRun, signal: &str) -> Result<bool>;
    /// Sends `signal` (first one wins; kept for `keep`): every run waiting for it becomes
    /// due with `payload`, and a run that waits for it later finds it. Returns how many
    /// waiting runs it woke.
    async fn signal(&self, signal: &str, payload: &Bytes, keep: Duration) -> Result<usize>;
    /// Up to `limit` parked runs whose time came, each claimed for `claim` (another
    /// process takes it again after that, if it was not relayed). A wait without its
    /// signal is timed out here.
    async fn take_due(&self, limit: usize, claim: Duration) -> Result<Vec<DueRun>>;
    /// Forgets runs whose resumed message was stored.
    async fn relayed(&self, tokens: &[String]) -> Result<()>;
    /// How the wait of `token` ended, once it did.
    async fn outcome(&self, token: &str) -> Result<Option<WaitOutcome>>;
    /// When the next parked run is due (ms since the Unix epoch).
    async fn next_due(&self) -> Result<Option<u64>>;
    /// Up to `limit` parked runs, soonest first, for operators.
    async fn parked(&self, limit: usize) -> Result<Vec<ParkedInfo>>;
}

/// How long a finished batch's state is kept for status and results (7 days).
pub const RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// How long a wait's outcome and a signal are kept (7 days, as step marks).
pub const OUTCOME_KEEP: Duration = bus_core::defaults::ONCE_KEEP;
