//! Concurrent sends to one ready list share one `RPUSH`.
//!
//! A Redis command costs the client several µs (a future, a trip through fred's router,
//! a reply) while one more element in it costs a fraction of one, so under load the
//! send path is bounded by commands, not bytes. Sends that arrive while a push to their
//! list is under way wait and go together in the next one. Each send's envelopes stay
//! contiguous inside it, so a send is still stored all or none, and every send gets the
//! reply of the `RPUSH` that carried it (an error, a timeout, an OOM refusal alike). A
//! lone send waits for nothing: it is pushed at once.
//!
//! A durable coalescer (its own connection) follows each `RPUSH` with one `WAIT`
//! (`durable.rs`), shared by every send the push carried.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use fred::error::{Error as FredError, ErrorKind};

use super::durable::{Durability, WriteError};
use fred::prelude::{Client, ListInterface};
use fred::types::Value;
use tokio::sync::oneshot;

/// At most this many envelopes, or this many bytes, go in one coalesced `RPUSH` (a
/// single send larger than that goes alone).
const MAX_ELEMENTS: usize = 1_000;
const MAX_BYTES: usize = 1 << 20;

type Reply = Result<(), WriteError>;

/// One waiting send: its envelopes and where its reply goes.
struct Pending {
    envelopes: Vec<Bytes>,
    reply: oneshot::Sender<Reply>,
}

/// The sends waiting per ready list. A list has an entry exactly while a flusher task
/// pushes for it.
#[derive(Debug, Clone)]
pub(crate) struct Coalescer {
    client: Client,
    /// Set on a durable transport's coalescer: each push waits for replicas.
    durability: Option<Durability>,
    lanes: Arc<Mutex<HashMap<String, Vec<Pending>>>>,
    /// The runtime the transport was made on, where flush tasks run: not the runtime of
    /// whichever caller sends first (a host's handler threads stop with the host, and a
    /// flush may carry other callers' sends).
    runtime: Option<tokio::runtime::Handle>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pending({} envelopes)", self.envelopes.len())
    }
}

impl Coalescer {
    pub(crate) fn new(client: Client) -> Self {
        Coalescer {
            client,
            durability: None,
            lanes: Arc::default(),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// A coalescer whose pushes return only once `durability` is met; `client` must be
    /// a connection of its own (a `WAIT` blocks its connection).
    pub(crate) fn durable(client: Client, durability: Durability) -> Self {
        Coalescer {
            client,
            durability: Some(durability),
            lanes: Arc::default(),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// Appends `envelopes` to the list `ready`, in one `RPUSH` with whatever other sends
    /// to it are waiting.
    pub(crate) async fn push(&self, ready: String, envelopes: Vec<Bytes>) -> Reply {
        if envelopes.is_empty() {
            return Ok(()); // nothing to store (and `RPUSH` needs an element)
        }
        let (reply, replied) = oneshot::channel();
        let pending = Pending { envelopes, reply };
        let idle = {
            let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
            match lanes.get_mut(&ready) {
                Some(waiting) => {
                    waiting.push(pending);
                    None
                }
                None => {
                    lanes.insert(ready.clone(), Vec::new());
                    Some(pending)
                }
            }
        };
        if let Some(first) = idle {
            // A task of its own, so that a caller dropping its future never strands the
            // sends that joined it.
            let flush = self.clone().flush(ready, first);
            match &self.runtime {
                Some(runtime) => drop(runtime.spawn(flush)),
                None => drop(tokio::spawn(flush)),
            }
        }
        replied.await.unwrap_or_else(|_| {
            Err(WriteError::Redis(FredError::new(
                ErrorKind::Canceled,
                "the push carrying this send was dropped",
            )))
        })
    }

    /// Pushes `first`, then whatever waits for `ready`, until nothing does.
    async fn flush(self, ready: String, first: Pending) {
        let mut batch = vec![first];
        loop {
            let envelopes: Vec<Value> = batch
                .iter()
                .flat_map(|p| p.envelopes.iter().cloned().map(Value::Bytes))
                .collect();
            let result = match &self.durability {
                None => {
                    let pushed: Result<i64, FredError> = self.client.rpush(&ready, envelopes).await;
                    pushed.map(drop).map_err(WriteError::Redis)
                }
                Some(durability) => durability.rpush(&self.client, &ready, envelopes).await,
            };
            for pending in batch {
                let _ = pending.reply.send(result.clone());
            }
            batch = self.next_batch(&ready);
            if batch.is_empty() {
                return;
            }
        }
    }

    /// The waiting sends that fit one push, oldest first; none (and the lane closed)
    /// when nothing waits.
    fn next_batch(&self, ready: &str) -> Vec<Pending> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(waiting) = lanes.get_mut(ready) else {
            return Vec::new();
        };
        if waiting.is_empty() {
            lanes.remove(ready);
            return Vec::new();
        }
        let (mut elements, mut bytes, mut take) = (0, 0, 0);
        for pending in waiting.iter() {
            let size: usize = pending.envelopes.iter().map(Bytes::len).sum();
            let full =
                elements + pending.envelopes.len() > MAX_ELEMENTS || bytes + size > MAX_BYTES;
            if take > 0 && full {
                break;
            }
            elements += pending.envelopes.len();
            bytes += size;
            take += 1;
        }
        waiting.drain(..take).collect()
    }
}
