//! The in-memory transport: the same semantics as Redis (locks, delivery counts,
//! retries, delayed delivery, dead letters, event fan-out) inside one process, for
//! tests and for running without Redis.

use std::collections::{BTreeSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::envelope::now_ms;
use crate::transport::{Consumer, ConsumerOptions, Delivery, Outgoing, Receipt, ERROR_HISTORY};
use crate::{DeadLetter, DeadLetterReason, ErrorRecord, QueueStats, Result, Source, Transport};

/// Longest an idle `receive` waits before returning empty.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// An in-process transport. Clones share the same queues.
#[derive(Debug, Clone, Default)]
pub struct MemoryTransport {
    state: Arc<Mutex<State>>,
}

/// A fast hasher for maps keyed by ids the process makes itself (message and storage
/// ids, receipts), where SipHash's flood resistance buys nothing: FxHash's mixing, a
/// multiply and a rotate per 8 bytes, and a final rotate. It was 6% of the in-memory transport's profile.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

impl FastHasher {
    const K: u64 = 0x517c_c1b7_2722_0a95;

    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::K);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        // The multiply mixes upward; hashbrown picks buckets with the low bits, so the
        // well-mixed high bits are rotated down (as rustc-hash 2 does).
        self.0.rotate_left(26)
    }
}

pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<FastHasher>>;
type FastSet<K> = std::collections::HashSet<K, BuildHasherDefault<FastHasher>>;

#[derive(Debug, Default)]
struct State {
    queues: FastMap<Source, Queue>,
    subscriptions: FastMap<String, BTreeSet<String>>,
}

#[derive(Debug, Default)]
struct Queue {
    ready: VecDeque<Bytes>,
    messages: FastMap<Bytes, Stored>,
    in_flight: FastMap<Bytes, Instant>,
    delayed: BTreeSet<(Instant, u64, Bytes)>,
    dead: Vec<Bytes>,
    /// Recovered messages, delivered one at a time, each alone.
    suspects: VecDeque<Bytes>,
    /// Reserved suspects (held alone by their consumer).
    isolated: FastSet<Bytes>,
    sequence: u64,
    notify: Arc<Notify>,
}

#[derive(Debug)]
struct Stored {
    payload: Bytes,
    deliveries: u32,
    errors: Vec<ErrorRecord>,
    dead: Option<(DeadLetterReason, u64)>,
}

impl State {
    fn queue(&mut self, source: &Source) -> &mut Queue {
        // Looked up first: `entry` would clone the source on every call.
        if !self.queues.contains_key(source) {
            self.queues.insert(source.clone(), Queue::default());
        }
        match self.queues.get_mut(source) {
            Some(queue) => queue,
            None => unreachable!("inserted above"),
        }
    }
}

impl Queue {
    fn store(&mut self, messages: Vec<Outgoing>) -> Vec<Bytes> {
        messages
            .into_iter()
            .filter_map(|m| {
                let key = Bytes::copy_from_slice(m.id.as_str().as_bytes());
                // Like the Redis script, a repeated id is stored once.
                let fresh = !self.messages.contains_key(&key);
                fresh.then(|| {
                    self.messages.insert(
                        key.clone(),
                        Stored {
                            payload: m.payload,
                            deliveries: 0,
                            errors: Vec::new(),
                            dead: None,
                        },
                    );
                    key
                })
            })
            .collect()
    }

    fn delay(&mut self, key: Bytes, due: Instant) {
        self.sequence += 1;
        self.delayed.insert((due, self.sequence, key));
    }

    fn promote_due(&mut self, now: Instant) {
        while let Some(first) = self.delayed.first() {
            if first.0 > now {
                break;
            }
            if let Some((_, _, key)) = self.delayed.pop_first() {
                self.ready.push_back(key);
            }
        }
    }

    /// The stored message if `receipt` is its current reservation.
    fn reserved(&mut self, receipt: &Receipt) -> Option<&mut Stored> {
        if !self.in_flight.contains_key(&receipt.key) {
            return None;
        }
        self.messages
            .get_mut(&receipt.key)
            .filter(|m| m.deliveries == receipt.delivery)
    }

    /// Reserves a stored message now: counts the delivery and locks it.
    fn reserve(&mut self, key: Bytes, lock: Instant) -> Option<Delivery> {
        let stored = self.messages.get_mut(&key)?;
        stored.deliveries += 1;
        let delivery = Delivery {
            receipt: Receipt {
                key: key.clone(),
                delivery: stored.deliveries,
            },
            delivery_count: stored.deliveries,
            payload: stored.payload.clone(),
        };
        self.in_flight.insert(key, lock);
        Some(delivery)
    }

    /// Ends a reservation; true if it was an isolated one.
    fn unlock(&mut self, key: &Bytes) -> bool {
        self.in_flight.remove(key);
        // Almost always empty (only crash suspects are isolated): skip hashing the key.
        !self.isolated.is_empty() && self.isolated.remove(key)
    }

    fn kill(&mut self, key: Bytes, reason: DeadLetterReason, error: Option<&ErrorRecord>) {
        self.unlock(&key);
        if let Some(stored) = self.messages.get_mut(&key) {
            stored.record(error);
            stored.dead = Some((reason, now_ms()));
            self.dead.push(key);
        }
    }
}

impl Stored {
    fn record(&mut self, error: Option<&ErrorRecord>) {
        if let Some(error) = error {
            self.errors.push(error.clone());
            let excess = self.errors.len().saturating_sub(ERROR_HISTORY);
            self.errors.drain(..excess);
        }
    }
}

fn to_instant(due: SystemTime) -> Instant {
    let wait = due.duration_since(SystemTime::now()).unwrap_or_default();
    Instant::now() + wait
}

impl MemoryTransport {
    /// An empty transport.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts of a queue's (or subscription's) messages by state.
    pub fn stats(&self, source: &Source) -> QueueStats {
        let state = self.state();
        state.queues.get(source).map_or_else(
            || QueueStats::new(source),
            |q| QueueStats {
                ready: (q.ready.len() + q.suspects.len()) as u64,
                in_flight: q.in_flight.len() as u64,
                delayed: q.delayed.len() as u64,
                dead_letters: q.dead.len() as u64,
                ..QueueStats::new(source)
            },
        )
    }

    /// The dead letters of a queue (or subscription), oldest first.
    pub fn dead_letters(&self, source: &Source) -> Vec<DeadLetter> {
        let state = self.state();
        let Some(queue) = state.queues.get(source) else {
            return Vec::new();
        };
        queue
            .dead
            .iter()
            .filter_map(|key| {
                let m = queue.messages.get(key)?;
                let (reason, at_ms) = m.dead?;
                Some((key, m, reason, at_ms))
            })
            .enumerate()
            .map(|(position, (key, m, reason, at_ms))| {
                DeadLetter::new(
                    position as u64,
                    String::from_utf8_lossy(key),
                    Some(m.payload.clone()),
                    Some(reason.as_str().to_owned()),
                    Some(at_ms),
                    u64::from(m.deliveries),
                    m.errors.clone(),
                )
            })
            .collect()
    }

    /// The subscriptions registered for a topic.
    pub fn subscriptions(&self, topic: &str) -> Vec<String> {
        self.state()
            .subscriptions
            .get(topic)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[async_trait]
impl Transport for MemoryTransport {
    async fn send(&self, queue: &str, messages: Vec<Outgoing>) -> Result<()> {
        let mut state = self.state();
        let q = state.queue(&Source::queue(queue)?);
        let keys = q.store(messages);
        q.ready.extend(keys);
        q.notify.notify_waiters();
        Ok(())
    }

    async fn send_at(&self, queue: &str, messages: Vec<Outgoing>, due: SystemTime) -> Result<()> {
        let due = to_instant(due);
        let mut state = self.state();
        let q = state.queue(&Source::queue(queue)?);
        for key in q.store(messages) {
            q.delay(key, due);
        }
        // Waiters recompute how long to sleep.
        q.notify.notify_waiters();
        Ok(())
    }

    async fn publish(&self, topic: &str, messages: Vec<Outgoing>) -> Result<usize> {
        let mut state = self.state();
        let names: Vec<String> = state
            .subscriptions
            .get(topic)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for name in &names {
            let q = state.queue(&Source::subscription(topic, name.as_str())?);
            let keys = q.store(messages.clone());
            q.ready.extend(keys);
            q.notify.notify_waiters();
        }
        Ok(names.len())
    }

    async fn consumer(
        &self,
        source: &Source,
        options: ConsumerOptions,
    ) -> Result<Box<dyn Consumer>> {
        let mut state = self.state();
        if let Source::Subscription { topic, name } = source {
            state
                .subscriptions
                .entry(topic.clone())
                .or_default()
                .insert(name.clone());
        }
        state.queue(source);
        Ok(Box::new(MemoryConsumer {
            transport: self.clone(),
            source: source.clone(),
            options,
            isolation_pending: AtomicBool::new(false),
        }))
    }
}

/// A consumer of one source of a [`MemoryTransport`].
#[derive(Debug)]
struct MemoryConsumer {
    transport: MemoryTransport,
    source: Source,
    options: ConsumerOptions,
    /// The last receive found suspects waiting.
    isolation_pending: AtomicBool,
}

impl MemoryConsumer {
    fn with_queue<T>(&self, f: impl FnOnce(&mut Queue) -> T) -> T {
        let mut state = self.transport.state();
        f(state.queue(&self.source))
    }
}

#[async_trait]
impl Consumer for MemoryConsumer {
    async fn receive(&self, max: usize, stop: &CancellationToken) -> Result<Vec<Delivery>> {
        let notify = self.with_queue(|q| Arc::clone(&q.notify));
        let deadline = Instant::now() + IDLE_WAIT;
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            // Register before looking, so a send between the look and the wait is seen.
            notified.as_mut().enable();
            let now = Instant::now();
            let lock = now + self.options.lock_timeout;
            let (deliveries, next_due, pending) = self.with_queue(|q| {
                q.promote_due(now);
                if !q.suspects.is_empty() {
                    return (Vec::new(), None, true);
                }
                let mut deliveries = Vec::new();
                while deliveries.len() < max {
                    let Some(key) = q.ready.pop_front() else {
                        break;
                    };
                    deliveries.extend(q.reserve(key, lock));
                }
                (deliveries, q.delayed.first().map(|d| d.0), false)
            });
            self.isolation_pending.store(pending, Ordering::Relaxed);
            if pending {
                return Ok(Vec::new());
            }
            if !deliveries.is_empty() || now >= deadline {
                return Ok(deliveries);
            }
            let wake = next_due.map_or(deadline, |due| due.min(deadline));
            tokio::select! {
                () = stop.cancelled() => return Ok(Vec::new()),
                () = notified => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    fn isolation_pending(&self) -> bool {
        self.isolation_pending.load(Ordering::Relaxed)
    }

    async fn receive_isolated(&self) -> Result<Option<Delivery>> {
        let lock = Instant::now() + self.options.lock_timeout;
        Ok(self.with_queue(|q| {
            while let Some(key) = q.suspects.pop_front() {
                if let Some(delivery) = q.reserve(key.clone(), lock) {
                    q.isolated.insert(key);
                    return Some(delivery);
                }
            }
            None
        }))
    }

    async fn ack(&self, receipts: &[Receipt]) -> Result<()> {
        self.with_queue(|q| {
            for receipt in receipts {
                if q.reserved(receipt).is_some() {
                    q.unlock(&receipt.key);
                    q.messages.remove(&receipt.key);
                }
            }
        });
        Ok(())
    }

    async fn renew(&self, receipts: &[Receipt]) -> Result<Vec<bool>> {
        let deadline = Instant::now() + self.options.lock_timeout;
        Ok(self.with_queue(|q| {
            receipts
                .iter()
                .map(|receipt| {
                    let kept = q.reserved(receipt).is_some();
                    if kept {
                        q.in_flight.insert(receipt.key.clone(), deadline);
                    }
                    kept
                })
                .collect()
        }))
    }

    async fn retry(&self, receipt: &Receipt, delay: Duration, error: &ErrorRecord) -> Result<()> {
        self.with_queue(|q| {
            let Some(stored) = q.reserved(receipt) else {
                return;
            };
            stored.record(Some(error));
            q.unlock(&receipt.key);
            if delay.is_zero() {
                q.ready.push_back(receipt.key.clone());
            } else {
                q.delay(receipt.key.clone(), Instant::now() + delay);
            }
            q.notify.notify_waiters();
        });
        Ok(())
    }

    async fn dead_letter(
        &self,
        receipt: &Receipt,
        reason: DeadLetterReason,
        error: Option<&ErrorRecord>,
    ) -> Result<()> {
        self.with_queue(|q| {
            if q.reserved(receipt).is_some() {
                q.kill(receipt.key.clone(), reason, error);
            }
        });
        Ok(())
    }

    async fn release(&self, receipts: &[Receipt]) -> Result<()> {
        self.with_queue(|q| {
            // In reverse, so that the released messages keep their order at the head.
            for receipt in receipts.iter().rev() {
                if let Some(stored) = q.reserved(receipt) {
                    stored.deliveries -= 1;
                    if q.unlock(&receipt.key) {
                        q.suspects.push_front(receipt.key.clone());
                    } else {
                        q.ready.push_front(receipt.key.clone());
                    }
                }
            }
            q.notify.notify_waiters();
        });
        Ok(())
    }

    async fn recover(&self) -> Result<usize> {
        let now = Instant::now();
        let limit = self.options.delivery_limit;
        Ok(self.with_queue(|q| {
            let expired: Vec<Bytes> = q
                .in_flight
                .iter()
                .filter(|(_, deadline)| **deadline <= now)
                .map(|(key, _)| key.clone())
                .collect();
            let error =
                ErrorRecord::now("lock expired: the consumer stopped or lost its connection");
            for key in &expired {
                let deliveries = q.messages.get(key).map_or(0, |m| m.deliveries);
                // Held alone, it can only have failed itself; held with others, it is
                // delivered alone next, so that it is charged only its own failures.
                let alone = q.unlock(key);
                if alone && deliveries >= limit {
                    q.kill(key.clone(), DeadLetterReason::DeliveryLimit, Some(&error));
                } else {
                    if let Some(stored) = q.messages.get_mut(key) {
                        stored.record(Some(&error));
                    }
                    q.suspects.push_back(key.clone());
                }
            }
            q.notify.notify_waiters();
            expired.len()
        }))
    }
}
