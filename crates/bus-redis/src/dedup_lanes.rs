//! Concurrent deduplicated sends of one group (queue or partition, window, due time,
//! partition key) share one `send_once_batch` call, as plain sends share one `RPUSH`
//! (`coalesce.rs`, same scheme): a send that arrives while a call for its group is under
//! way waits and goes in the next one, with every other that waits (at most
//! [`BATCH_MAX`]); a lone send waits for nothing. Each message stays atomic with its key
//! inside the call, and each send reads its own answer from the call's reply (its id or
//! the first message's, or the call's error).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use bus_core::transport::Outgoing;
use bus_core::MessageId;
use tokio::sync::oneshot;

use crate::dedup::{self, Group, Outcome, BATCH_MAX};
use crate::keys::QueueKeys;
use crate::transport::RedisTransport;

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
        transport: &RedisTransport,
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
            let flush = self.clone().flush(transport.clone(), group, keys, first);
            match &self.runtime {
                Some(runtime) => drop(runtime.spawn(flush)),
                None => drop(tokio::spawn(flush)),
            }
        }
        let Ok((outcome, at, n)) = replied.await else {
            return Err(bus_core::Error::OutcomeUnknown(
                "the call carrying this deduplicated send was dropped".into(),
            ));
        };
        dedup::answer(transport, &outcome, at, n)
    }

    /// Calls for `first`, then for whatever waits in `group`, until nothing does.
    async fn flush(self, transport: RedisTransport, group: Group, keys: QueueKeys, first: Waiting) {
        let mut batch = vec![first];
        loop {
            let n = batch.len();
            let (messages, replies): (Vec<_>, Vec<_>) = batch
                .into_iter()
                .map(|w| ((w.message, w.key), w.reply))
                .unzip();
            let outcome = Arc::new(dedup::call(&transport, &group, &keys, messages).await);
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
