//! What the stores hand back (a batch's status, its members' results, parked runs), and
//! the one JSON form of a member's mark that both stores keep (docs/wire-format.md,
//! "Workflows": a foreign client writes the same).

use bus_core::transport::{Held, Receipt, Source};
use bus_core::MessageId;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{Mark, Outcome, StaleMark};
use crate::ids::{BatchId, CallbackKind, ChildPolicy, MemberRef};
use crate::{Error, Result};

/// Where a batch is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BatchState {
    /// Members may still settle (and, until it is closed, be added).
    Open,
    /// Its outcome is decided; its callbacks are being sent.
    Fired,
    /// Its callbacks were sent; the parent batch's member is being settled.
    Settled,
    /// Nothing is left to do; its state expires after the retention.
    Done,
}

impl BatchState {
    /// As stored: `open`, `fired`, `settled`, `done`.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchState::Open => "open",
            BatchState::Fired => "fired",
            BatchState::Settled => "settled",
            BatchState::Done => "done",
        }
    }

    pub(crate) fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "open" => BatchState::Open,
            "fired" => BatchState::Fired,
            "settled" => BatchState::Settled,
            "done" => BatchState::Done,
            other => return Err(Error::invalid("batch state", other)),
        })
    }
}

/// How a batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BatchOutcome {
    /// Every member was acknowledged.
    Success,
    /// Every member settled; some were dead-lettered.
    Complete,
    /// A child died under [`ChildPolicy::FailParent`]: the continuation went at once.
    Failed,
}

impl BatchOutcome {
    /// As stored: `success`, `complete`, `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchOutcome::Success => "success",
            BatchOutcome::Complete => "complete",
            BatchOutcome::Failed => "failed",
        }
    }

    pub(crate) fn parse(text: &str) -> Result<Option<Self>> {
        Ok(match text {
            "" => None,
            "success" => Some(BatchOutcome::Success),
            "complete" => Some(BatchOutcome::Complete),
            "failed" => Some(BatchOutcome::Failed),
            other => return Err(Error::invalid("batch outcome", other)),
        })
    }
}

/// A member that was dead-lettered, with its error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeadMember {
    /// Its index in the batch.
    pub index: u64,
    /// Its message id.
    pub message_id: String,
    /// Its queue (or `topic/subscription`).
    pub queue: String,
    /// The dead letter's reason.
    pub reason: String,
    /// Its last error.
    pub error: String,
    /// When its dead letter was marked (ms since the Unix epoch).
    pub at_ms: u64,
}

/// One callback of a batch, and whether it was sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CallbackStatus {
    /// When it is sent.
    pub kind: CallbackKind,
    /// Its queue.
    pub queue: String,
    /// Its message id.
    pub message_id: String,
    /// Whether its kind fired.
    pub fired: bool,
    /// Whether it was stored in its queue.
    pub sent: bool,
}

/// A batch as code, `bus batch` and the dashboard show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BatchStatus {
    /// Its id.
    pub id: BatchId,
    /// Where it is in its life.
    pub state: BatchState,
    /// How it ended, once it did.
    pub outcome: Option<BatchOutcome>,
    /// Members added.
    pub total: u64,
    /// Members acknowledged.
    pub succeeded: u64,
    /// Members dead-lettered.
    pub dead: u64,
    /// Whether it takes no more members.
    pub closed: bool,
    /// When it was opened (ms since the Unix epoch).
    pub created_ms: u64,
    /// When its outcome was decided.
    pub fired_ms: Option<u64>,
    /// The member of another batch that opened it.
    pub parent: Option<String>,
    /// For a parent's children: what a dead child does.
    pub policy: Option<ChildPolicy>,
    /// Its callbacks.
    pub callbacks: Vec<CallbackStatus>,
    /// Some of its dead members (up to the limit asked), with their errors.
    pub dead_members: Vec<DeadMember>,
    /// Members that opened a child batch, still waiting for it: (index, child batch).
    pub waiting_on: Vec<(u64, BatchId)>,
}

impl BatchStatus {
    /// Members not settled yet.
    pub fn pending(&self) -> u64 {
        self.total.saturating_sub(self.succeeded + self.dead)
    }
}

/// One line of a listing of batches (`bus batches`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BatchSummary {
    /// Its status, without dead members.
    pub status: BatchStatus,
}

/// A member as [`WorkflowStore::results`](super::WorkflowStore::results) reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemberResult {
    /// Acknowledged, with the result its handler set (JSON), if any.
    Succeeded(Option<Bytes>),
    /// Dead-lettered.
    Dead(DeadMember),
    /// Not settled yet.
    Pending,
}

/// What a parked run waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ParkedKind {
    /// A sleep, until its due time.
    Sleep,
    /// A signal, until its timeout.
    Wait {
        /// The signal's name.
        signal: String,
        /// Whether the signal came (the run is due now).
        signalled: bool,
    },
}

/// A parked run as operators see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ParkedInfo {
    /// `<message id>.<step>`.
    pub token: String,
    /// Where it resumes.
    pub queue: String,
    /// Its message id.
    pub message_id: String,
    /// Its type.
    pub message_type: String,
    /// What it waits for.
    pub kind: ParkedKind,
    /// When it resumes at the latest (ms since the Unix epoch).
    pub due_ms: u64,
}

/// A parked run's record, as stored beside its envelope.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    pub(crate) q: String,
    pub(crate) id: String,
    #[serde(rename = "type")]
    pub(crate) message_type: String,
    /// The signal of a wait; absent for a sleep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) w: Option<String>,
}

/// The JSON of a member's mark: how it left, where it was consumed and under which
/// reservation, and (dead) its reason and error. Kept as the dead record too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MarkJson {
    /// `ok` or `dead`.
    pub(crate) o: String,
    pub(crate) id: String,
    /// Queue, or topic and subscription.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) q: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) t: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) s: Option<String>,
    /// The receipt: shard, key, and the delivery count (stored) or the index (leased).
    pub(crate) sh: u16,
    pub(crate) k: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) d: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) i: Option<u32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) r: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) e: String,
    #[serde(default)]
    pub(crate) at: u64,
}

impl MarkJson {
    pub(crate) fn of(mark: &Mark, at: u64) -> Self {
        let (o, r, e) = match &mark.outcome {
            Outcome::Succeeded { .. } => ("ok", String::new(), String::new()),
            Outcome::Dead { reason, error } => ("dead", reason.clone(), error.clone()),
        };
        let (q, t, s) = match &mark.source {
            Source::Queue(q) => (Some(q.clone()), None, None),
            Source::Subscription { topic, name } => (None, Some(topic.clone()), Some(name.clone())),
        };
        let (k, d, i) = match &mark.receipt.held {
            Held::Stored { key, delivery } => (key, Some(*delivery), None),
            Held::Leased { lease, index } => (lease, None, Some(*index)),
        };
        MarkJson {
            o: o.to_owned(),
            id: mark.message_id.to_string(),
            q,
            t,
            s,
            sh: mark.receipt.shard,
            k: String::from_utf8_lossy(k).into_owned(),
            d,
            i,
            r,
            e,
            at,
        }
    }

    pub(crate) fn source(&self) -> Result<Source> {
        match (&self.q, &self.t, &self.s) {
            (Some(q), _, _) => Ok(Source::Queue(q.clone())),
            (None, Some(t), Some(s)) => Ok(Source::Subscription {
                topic: t.clone(),
                name: s.clone(),
            }),
            _ => Err(Error::invalid("member mark", "no queue nor subscription")),
        }
    }

    pub(crate) fn receipt(&self) -> Result<Receipt> {
        let key = Bytes::from(self.k.clone().into_bytes());
        let held = match (self.d, self.i) {
            (Some(delivery), _) => Held::Stored { key, delivery },
            (None, Some(index)) => Held::Leased { lease: key, index },
            (None, None) => return Err(Error::invalid("member mark", "no receipt")),
        };
        Ok(Receipt {
            shard: self.sh,
            held,
        })
    }

    pub(crate) fn stale(&self, index: u64) -> Result<StaleMark> {
        Ok(StaleMark {
            index,
            dead: self.o == "dead",
            source: self.source()?,
            receipt: self.receipt()?,
        })
    }

    pub(crate) fn dead_member(&self, index: u64) -> DeadMember {
        let queue = match (&self.q, &self.t, &self.s) {
            (Some(q), _, _) => q.clone(),
            (None, Some(t), Some(s)) => format!("{t}/{s}"),
            _ => String::new(),
        };
        DeadMember {
            index,
            message_id: self.id.clone(),
            queue,
            reason: self.r.clone(),
            error: self.e.clone(),
            at_ms: self.at,
        }
    }
}

/// The delivery a conditional settle names (batch_settle.lua): `<shard> <key> d<count>`
/// for a stored message, `<shard> <key> i<index>` for a leased one, as the mark JSON's
/// `sh`, `k` and `d` or `i` spell it.
pub(crate) fn receipt_tag(receipt: &Receipt) -> String {
    let (key, kind, n) = match &receipt.held {
        Held::Stored { key, delivery } => (key, 'd', *delivery),
        Held::Leased { lease, index } => (lease, 'i', *index),
    };
    format!(
        "{} {} {kind}{n}",
        receipt.shard,
        String::from_utf8_lossy(key)
    )
}

/// Reads a member's id as stored in a mark.
pub(crate) fn message_id(text: &str) -> MessageId {
    MessageId::from(text.to_owned())
}

/// A parent member as stored (`<batch>:<index>`, empty for none).
pub(crate) fn parent(text: &str) -> Result<Option<MemberRef>> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some)
}
