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

use std::sync::{Arc, Mutex, PoisonError};

use bytes::{Bytes, BytesMut};
use fred::error::{Error as FredError, ErrorKind};

use super::durable::{Durability, WriteError};
use crate::keys::QueueKeys;
use fred::prelude::{Client, ListInterface};
use fred::types::Value;
use tokio::sync::oneshot;

/// At most this many envelopes, or this many bytes, go in one coalesced `RPUSH` (a
/// single send larger than that goes alone).
const MAX_ELEMENTS: usize = 1_000;
const MAX_BYTES: usize = 1 << 20;

type Reply = Result<(), WriteError>;

/// Sends waiting for one ready list. Their envelopes are copied end to end into one
/// buffer, so that the buffers the senders encoded into are freed on the senders' own
/// threads: with glibc's allocator, a buffer freed on another thread waits for the lock
/// of the arena that made it, and the I/O thread that drops a pushed batch queued behind
/// every sender's allocations (`perf` of a thousand concurrent sends: 24% of the sending
/// thread's samples woke it).
#[derive(Default)]
struct Lane {
    bytes: BytesMut,
    /// Each waiting envelope's end in `bytes`.
    ends: Vec<usize>,
    /// Each waiting send: its envelopes' count and where its reply goes.
    sends: Vec<(usize, oneshot::Sender<Reply>)>,
    /// The buffer of the push before, back from fred and empty: the next batch's sends
    /// gather in it. Two buffers take turns, so a push allocates none, and no page of a
    /// fresh one is faulted in as its envelopes are copied.
    spare: Option<BytesMut>,
}

impl Lane {
    /// Adds a send's envelopes after the others'.
    fn add(&mut self, envelopes: &[Bytes], reply: oneshot::Sender<Reply>) {
        for envelope in envelopes {
            self.bytes.extend_from_slice(envelope);
            self.ends.push(self.bytes.len());
        }
        self.sends.push((envelopes.len(), reply));
    }

    /// The waiting sends that fit one push, oldest first (at least one, if any wait;
    /// a single send larger than the bounds goes alone), taken out of the lane.
    fn take(&mut self) -> Batch {
        let (mut elements, mut take) = (0, 0);
        for &(count, _) in &self.sends {
            let end = self.ends[elements + count - 1];
            let full = elements + count > MAX_ELEMENTS || end > MAX_BYTES;
            if take > 0 && full {
                break;
            }
            elements += count;
            take += 1;
        }
        let bytes = match self.spare.take() {
            Some(spare) if elements == self.ends.len() => std::mem::replace(&mut self.bytes, spare),
            spare => {
                self.spare = spare;
                let bytes = self.bytes.split_to(match elements {
                    0 => 0,
                    n => self.ends[n - 1],
                });
                // Room for a batch like this one: the sends that gather meanwhile grow
                // nothing.
                self.bytes.reserve(bytes.len());
                bytes
            }
        };
        let cut = bytes.len();
        let ends = self.ends.drain(..elements).collect();
        for end in &mut self.ends {
            *end -= cut;
        }
        Batch {
            bytes: bytes.freeze(),
            ends,
            replies: self.sends.drain(..take).map(|(_, reply)| reply).collect(),
        }
    }
}

/// The sends one `RPUSH` carries.
struct Batch {
    bytes: Bytes,
    ends: Vec<usize>,
    replies: Vec<oneshot::Sender<Reply>>,
}

impl Batch {
    /// The push's elements: slices of one buffer.
    fn elements(&self) -> Vec<Value> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| Value::Bytes(self.bytes.slice(start..end)))
            .collect()
    }
}

/// A ready list: a queue's, or one shard's of a partitioned queue. Found without making
/// its key's name, which only a lane's flusher needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct List<'a> {
    pub(crate) prefix: &'a str,
    pub(crate) queue: &'a str,
    pub(crate) shard: Option<u16>,
}

impl List<'_> {
    fn key(&self) -> String {
        match self.shard {
            Some(shard) => QueueKeys::shard_ready_of(self.prefix, self.queue, shard),
            None => QueueKeys::queue_ready_of(self.prefix, self.queue),
        }
    }

    /// Its place among its queue's lanes.
    fn slot(&self) -> usize {
        self.shard.map_or(0, usize::from)
    }
}

/// The sends waiting per ready list: per queue, a lane for each of its lists (one, or
/// one per shard). A list has a lane exactly while a flusher task pushes for it.
#[derive(Debug, Clone)]
pub(crate) struct Coalescer {
    client: Client,
    /// Set on a durable transport's coalescer: each push waits for replicas.
    durability: Option<Durability>,
    /// (FNV: a queue's short name is hashed on every send, and SipHash's resistance to
    /// chosen keys buys nothing for names the application picks.)
    lanes: Arc<Mutex<fnv::FnvHashMap<String, Vec<Option<Lane>>>>>,
    /// The runtime the transport was made on, where flush tasks run: not the runtime of
    /// whichever caller sends first (a host's handler threads stop with the host, and a
    /// flush may carry other callers' sends).
    runtime: Option<tokio::runtime::Handle>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lane({} sends waiting)", self.sends.len())
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

    /// Appends `envelopes` to `list`, in one `RPUSH` with whatever other sends to it are
    /// waiting.
    pub(crate) async fn push(&self, list: List<'_>, envelopes: Vec<Bytes>) -> Reply {
        if envelopes.is_empty() {
            return Ok(()); // nothing to store (and `RPUSH` needs an element)
        }
        let (reply, replied) = oneshot::channel();
        let first = {
            let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
            if !lanes.contains_key(list.queue) {
                lanes.insert(list.queue.to_owned(), Vec::new());
            }
            let queue_lanes = lanes.get_mut(list.queue).expect("inserted above");
            if queue_lanes.len() <= list.slot() {
                queue_lanes.resize_with(list.slot() + 1, || None);
            }
            match &mut queue_lanes[list.slot()] {
                Some(waiting) => {
                    waiting.add(&envelopes, reply);
                    None
                }
                vacant @ None => {
                    // Pushed at once; the lane stays open (with room for the sends that
                    // gather meanwhile) until the flusher finds it empty.
                    let lane = vacant.insert(Lane::default());
                    lane.add(&envelopes, reply);
                    Some(lane.take())
                }
            }
        };
        // (Copied: freed here, on the sender's thread.)
        drop(envelopes);
        if let Some(first) = first {
            // A task of its own, so that a caller dropping its future never strands the
            // sends that joined it.
            let flush = self
                .clone()
                .flush((list.queue.to_owned(), list.slot()), list.key(), first);
            match &self.runtime {
                Some(runtime) => drop(runtime.spawn(flush)),
                None => drop(tokio::spawn(flush)),
            }
        }
        // Unconstrained: a reply that is here is taken even when the caller's task has
        // used up tokio's cooperative budget. Else the oneshot answers "not yet" and wakes
        // the task, and a caller awaiting many sends in one task (`buffer_unordered`,
        // `join_all`) polls each one's whole future again: client CPU per single send
        // 2.2–2.6 → 1.6–2.1 µs from the bench's thread, 3.0–3.8 → 1.5–2.0 µs from a
        // runtime task (docs/performance.md, "Client CPU per single send").
        tokio::task::unconstrained(replied)
            .await
            .unwrap_or_else(|_| {
                Err(WriteError::Redis(FredError::new(
                    ErrorKind::Canceled,
                    "the push carrying this send was dropped",
                )))
            })
    }

    /// Pushes `batch` onto the list `ready`, then whatever waits in its lane (`lane`: its
    /// queue and place), until nothing does.
    async fn flush(self, lane: (String, usize), ready: String, mut batch: Batch) {
        loop {
            let envelopes = batch.elements();
            let result = match &self.durability {
                None => {
                    let pushed: Result<i64, FredError> = self.client.rpush(&ready, envelopes).await;
                    pushed.map(drop).map_err(WriteError::Redis)
                }
                Some(durability) => durability.rpush(&self.client, &ready, envelopes).await,
            };
            for reply in batch.replies {
                let _ = reply.send(result.clone());
            }
            // (fred has let go of the push's elements once it replied, as a rule; if it
            // has not, the buffer is simply not reused.)
            let spare = batch.bytes.try_into_mut().ok().map(|mut spare| {
                spare.clear();
                spare
            });
            match self.next_batch(&lane, spare) {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// The waiting sends that fit one push, oldest first; none (and the lane closed)
    /// when nothing waits. `spare` is the last push's buffer, emptied, if fred let go of
    /// it.
    fn next_batch(
        &self,
        (queue, slot): &(String, usize),
        spare: Option<BytesMut>,
    ) -> Option<Batch> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let open = lanes.get_mut(queue.as_str())?.get_mut(*slot)?;
        let waiting = open.as_mut()?;
        if waiting.sends.is_empty() {
            *open = None;
            return None;
        }
        if spare.is_some() {
            waiting.spare = spare;
        }
        Some(waiting.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(lane: &mut Lane, envelopes: &[&'static [u8]]) {
        let envelopes: Vec<Bytes> = envelopes.iter().map(|e| Bytes::from_static(e)).collect();
        lane.add(&envelopes, oneshot::channel().0);
    }

    fn elements(batch: &Batch) -> Vec<Vec<u8>> {
        let values = batch.elements();
        values
            .into_iter()
            .map(|value| match value {
                Value::Bytes(bytes) => bytes.to_vec(),
                other => panic!("not bytes: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_lane_gives_its_sends_in_order_each_whole_within_the_bounds() {
        let mut lane = Lane::default();
        send(&mut lane, &[b"a", b"bb"]);
        send(&mut lane, &[b"ccc"]);
        let batch = lane.take();
        assert_eq!(elements(&batch), [&b"a"[..], b"bb", b"ccc"]);
        assert_eq!(batch.replies.len(), 2);
        assert!(lane.sends.is_empty() && lane.ends.is_empty() && lane.bytes.is_empty());

        // A send that would pass MAX_ELEMENTS waits for the next push, whole.
        let big: Vec<&'static [u8]> = vec![b"x"; MAX_ELEMENTS - 1];
        send(&mut lane, &big);
        send(&mut lane, &[b"y", b"zz"]);
        send(&mut lane, &[b"w"]);
        let first = lane.take();
        assert_eq!(first.replies.len(), 1);
        assert_eq!(elements(&first).len(), MAX_ELEMENTS - 1);
        let second = lane.take();
        assert_eq!(elements(&second), [&b"y"[..], b"zz", b"w"]);
        assert_eq!(second.replies.len(), 2);

        // A single send beyond the bounds goes alone.
        let huge: Vec<&'static [u8]> = vec![b"h"; MAX_ELEMENTS + 1];
        send(&mut lane, &huge);
        send(&mut lane, &[b"after"]);
        assert_eq!(elements(&lane.take()).len(), MAX_ELEMENTS + 1);
        assert_eq!(elements(&lane.take()), [&b"after"[..]]);
        assert!(lane.take().replies.is_empty());
    }

    #[test]
    fn the_buffer_of_the_push_before_takes_the_next_sends() {
        let mut lane = Lane::default();
        send(&mut lane, &[b"first", b"push"]);
        let first = lane.take();
        let first_buffer = first.bytes.as_ptr();
        send(&mut lane, &[b"second"]);
        // Given back once its elements are dropped, it takes the sends after the next.
        drop(elements(&first));
        let mut spare = first.bytes.try_into_mut().expect("no element holds it");
        spare.clear();
        lane.spare = Some(spare);
        let second = lane.take();
        assert_eq!(elements(&second), [&b"second"[..]]);
        send(&mut lane, &[b"third", b"push"]);
        assert_eq!(lane.bytes.as_ptr(), first_buffer);
        let third = lane.take();
        assert_eq!(third.bytes.as_ptr(), first_buffer);
        assert_eq!(elements(&third), [&b"third"[..], b"push"]);

        // Sends that do not all fit one push leave the spare for a later one.
        let big: Vec<&'static [u8]> = vec![b"x"; MAX_ELEMENTS];
        lane.spare = Some(BytesMut::with_capacity(8));
        send(&mut lane, &big);
        send(&mut lane, &[b"next"]);
        assert_eq!(elements(&lane.take()).len(), MAX_ELEMENTS);
        assert!(lane.spare.is_some());
        assert_eq!(elements(&lane.take()), [&b"next"[..]]);
        assert!(lane.spare.is_none());
    }
}
