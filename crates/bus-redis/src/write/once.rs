//! Concurrent deduplicated sends of one group (queue or partition, window, due time,
//! partition key) share one `send_once_batch` call, as plain sends share one `RPUSH`
//! (`coalesce.rs`, same scheme): a send that arrives while a call for its group is under
//! way waits and goes in the next one, with every other that waits (at most
//! [`BATCH_MAX`]); a lone send waits for nothing. Each message stays atomic with its key
//! inside the call, and each send reads its own answer from the call's reply (its id or
//! the first message's, or the call's error). A batch of deduplicated sends
//! (`send/dedup.rs`) makes the same call ([`call`]) and reads it the same way
//! ([`answer`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use bus_core::transport::Outgoing;
use bus_core::MessageId;
use fred::types::Value;
use tokio::sync::oneshot;

use super::conn::Connection;
use super::durable::WriteError;
use crate::keys::QueueKeys;
use crate::scripts;

/// At most this many messages go in one `send_once_batch` call (its KEYS and ARGV grow
/// with it, and the script runs alone on the server).
pub(crate) const BATCH_MAX: usize = 1_000;

/// What the messages of one `send_once_batch` call share: the queue or partition (its
/// ready list names it), the window, the due time and the partition key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Group {
    pub(crate) ready: String,
    pub(crate) window_ms: i64,
    /// Ms since the Unix epoch, or empty: ready now.
    pub(crate) due: String,
    pub(crate) partition: Option<String>,
}

/// The raw outcome of one call, shared by every message it carried.
pub(crate) type Outcome = Result<Value, WriteError>;

/// One waiting send, and where its call's outcome goes (with its place in the call).
struct Waiting {
    message: Outgoing,
    key: String,
    reply: oneshot::Sender<(Arc<Outcome>, usize, usize)>,
}

/// The lanes of one connection (a durable handle has its own: its calls wait for
/// replicas).
#[derive(Clone)]
pub(crate) struct OnceLanes {
    /// The sends waiting per group. A group has an entry exactly while a flusher task
    /// calls for it.
    lanes: Arc<Mutex<HashMap<Group, Vec<Waiting>>>>,
    /// Where flush tasks run: the transport's runtime (see `coalesce.rs`).
    runtime: Option<tokio::runtime::Handle>,
}

impl std::fmt::Debug for OnceLanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnceLanes")
    }
}

impl OnceLanes {
    pub(crate) fn new() -> Self {
        OnceLanes {
            lanes: Arc::default(),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// Sends `message` with deduplication key `key` in the next call of `group`.
    pub(crate) async fn send(
        &self,
        conn: &Arc<Connection>,
        group: Group,
        keys: QueueKeys,
        message: Outgoing,
        key: String,
    ) -> bus_core::Result<Option<MessageId>> {
        let (reply, replied) = oneshot::channel();
        let waiting = Waiting {
            message,
            key,
            reply,
        };
        let idle = {
            let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
            match lanes.get_mut(&group) {
                Some(lane) => {
                    lane.push(waiting);
                    None
                }
                None => {
                    lanes.insert(group.clone(), Vec::new());
                    Some(waiting)
                }
            }
        };
        if let Some(first) = idle {
            // A task of its own, so that a caller dropping its future never strands the
            // sends that joined it.
            let flush = self.clone().flush(Arc::clone(conn), group, keys, first);
            match &self.runtime {
                Some(runtime) => drop(runtime.spawn(flush)),
                None => drop(tokio::spawn(flush)),
            }
        }
        // (Unconstrained, as a coalesced send's reply is: write/coalesce.rs.)
        let Ok((outcome, at, n)) = tokio::task::unconstrained(replied).await else {
            return Err(bus_core::Error::OutcomeUnknown(
                "the call carrying this deduplicated send was dropped".into(),
            ));
        };
        answer(conn, &outcome, at, n)
    }

    /// Calls for `first`, then for whatever waits in `group`, until nothing does.
    async fn flush(self, conn: Arc<Connection>, group: Group, keys: QueueKeys, first: Waiting) {
        let mut batch = vec![first];
        loop {
            let n = batch.len();
            let (messages, replies): (Vec<_>, Vec<_>) = batch
                .into_iter()
                .map(|w| ((w.message, w.key), w.reply))
                .unzip();
            let outcome = Arc::new(call(&conn, &group, &keys, messages).await);
            for (at, reply) in replies.into_iter().enumerate() {
                let _ = reply.send((Arc::clone(&outcome), at, n));
            }
            batch = self.next_batch(&group);
            if batch.is_empty() {
                return;
            }
        }
    }

    /// The waiting sends that fit one call, oldest first; none (and the lane closed)
    /// when nothing waits.
    fn next_batch(&self, group: &Group) -> Vec<Waiting> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(lane) = lanes.get_mut(group) else {
            return Vec::new();
        };
        if lane.is_empty() {
            lanes.remove(group);
            return Vec::new();
        }
        let take = lane.len().min(BATCH_MAX);
        lane.drain(..take).collect()
    }
}

/// One `send_once_batch` call: KEYS ready, delayed, msgs [, flow, kheads, kbusy, kq,
/// kdue], one dedup key per message; ARGV n, window, due, key, then id, envelope pairs.
pub(crate) async fn call(
    conn: &Connection,
    group: &Group,
    keys: &QueueKeys,
    batch: Vec<(Outgoing, String)>,
) -> Outcome {
    let n = batch.len();
    let mut script_keys = Vec::with_capacity(8 + n);
    script_keys.extend([keys.ready.clone(), keys.delayed.clone(), keys.msgs.clone()]);
    if group.partition.is_some() {
        script_keys.extend([
            keys.flow.clone(),
            keys.kheads.clone(),
            keys.kbusy.clone(),
            keys.kq.clone(),
            keys.kdue.clone(),
        ]);
    }
    let mut args = Vec::with_capacity(4 + 2 * n);
    args.extend([
        Value::from(i64::try_from(n).unwrap_or(i64::MAX)),
        Value::from(group.window_ms),
        Value::from(group.due.as_str()),
        Value::from(group.partition.as_deref().unwrap_or("")),
    ]);
    for (message, key) in batch {
        script_keys.push(keys.dedup(&key));
        args.push(Value::from(message.id.as_str()));
        args.push(Value::Bytes(message.payload));
    }
    conn.run(&scripts::SEND_ONCE_BATCH, script_keys, args).await
}

/// The answer for message `at` of the `n` a call carried: `None` stored, or the first
/// message's id. Only a message that was stored is reported as not replicated.
pub(crate) fn answer(
    conn: &Connection,
    outcome: &Outcome,
    at: usize,
    n: usize,
) -> bus_core::Result<Option<MessageId>> {
    let script = &scripts::SEND_ONCE_BATCH;
    let (reply, not_replicated) = match outcome {
        Ok(reply) => (reply, None),
        Err(error @ WriteError::NotReplicated { written, .. }) => (written, Some(error)),
        Err(error) => return Err(conn.error(error.clone())),
    };
    let Value::Array(answers) = reply else {
        return Err(script.unexpected(reply).into());
    };
    if answers.len() != n {
        return Err(script.unexpected(reply).into());
    }
    match &answers[at] {
        Value::Integer(_) => match not_replicated {
            Some(error) => Err(conn.error(error.clone())),
            None => Ok(None),
        },
        other => match other.as_string() {
            Some(first) => Ok(Some(MessageId::from(first))),
            None => Err(script.unexpected(other).into()),
        },
    }
}
