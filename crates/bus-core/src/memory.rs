//! The in-memory transport: the same semantics as Redis (locks, delivery counts,
//! retries, delayed delivery, dead letters, event fan-out) inside one process, for
//! tests and for running without Redis.

use std::collections::{hash_map, BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::envelope::now_ms;
use crate::fast_hash::{FastMap, FastSet};
use crate::flow::Flow;
use crate::records::{DeadLetter, ErrorRecord, QueueStats};
use crate::transport::{
    Consumer, ConsumerExtras, ConsumerOptions, Deduplicated, Delivery, ErrorHistory, FleetBreaker,
    Held, Hold, Leases, Outgoing, Placement, Receipt, Received, Replies, Scheduling, StepMarks,
    Ticks, TransportExtras, Want, ERROR_HISTORY,
};
use crate::transport::{DeadLetterReason, Deduplication, Source};
use crate::{MessageId, Result, Transport};

// Flow control (crate::flow) on this transport.
mod flow;
use flow::Allowance;
// Reply inboxes and step marks on this transport.
mod once_reply;
// Per-key ordering (crate::flow::PerKey) on this transport.
mod ordering;
// Deduplication at send on this transport.
mod dedup;

/// Longest an idle `receive` waits before returning empty.
const IDLE_WAIT: Duration = Duration::from_secs(1);
/// Longest a `receive` held back by flow control or a breaker waits for a change before
/// it says so (as the Redis consumer's poll of a paused queue).
const HELD_WAIT: Duration = Duration::from_millis(250);

/// An in-process transport. Clones share the same queues.
#[derive(Debug, Clone, Default)]
pub struct MemoryTransport {
    state: Arc<Mutex<State>>,
    /// Singleton processors' leases, apart from the queues' state.
    leases: crate::singleton::Leases,
    /// Request/reply inboxes and step marks ([`once_reply`]).
    inboxes: once_reply::Inboxes,
    marks: once_reply::Marks,
}

#[derive(Debug, Default)]
struct State {
    queues: FastMap<Source, Queue>,
    subscriptions: FastMap<String, BTreeSet<String>>,
}

/// One queue's messages, each kept where its state says: a send appends to `ready`, a
/// reserve moves the front of `ready` into `in_flight`, an ack drops it from there. No
/// map of every stored message is looked up on the way, so the hot path touches only
/// the ready list and the small in-flight map (at most what consumers hold).
#[derive(Debug, Default)]
struct Queue {
    ready: VecDeque<Entry>,
    /// Reserved messages by storage key, with their lock deadline.
    in_flight: FastMap<Bytes, Locked>,
    /// Waiting for their due time, in due order (ties in the order they came).
    delayed: BTreeMap<(Instant, u64), Entry>,
    dead: Vec<Entry>,
    /// Recovered messages, delivered one at a time, each alone.
    suspects: VecDeque<Entry>,
    /// Reserved suspects (held alone by their consumer).
    isolated: FastSet<Bytes>,
    sequence: u64,
    notify: Arc<Notify>,
    /// Deduplication keys: the first message's id, held until the instant.
    dedup: FastMap<String, (MessageId, Instant)>,
    /// Flow control (crate::flow): its settings, and the rate limit's window of starts.
    flow: Flow,
    starts: VecDeque<Instant>,
    /// A fleet circuit breaker's trip (crate::transport::FleetBreaker).
    tripped: Option<flow::Tripped>,
    /// Recurring schedules sending here: the last tick stored (ms), by schedule name.
    ticks: FastMap<String, u64>,
    /// Keyed messages waiting for their key, and the keys' turns and slots.
    keyed: ordering::Keyed,
}

/// A message at rest, with its storage key: the message id (unless that id was already
/// held when it was reserved; see [`Queue::reserve`]).
#[derive(Debug)]
struct Entry {
    key: Bytes,
    stored: Stored,
}

#[derive(Debug)]
struct Locked {
    until: Instant,
    stored: Stored,
}

#[derive(Debug)]
struct Stored {
    payload: Bytes,
    deliveries: u32,
    errors: Vec<ErrorRecord>,
    dead: Option<(DeadLetterReason, u64)>,
    /// The ordering key of a message sent keyed to an ordered queue: it holds a slot of
    /// that key from its first delivery until acked or dead-lettered.
    order_key: Option<Arc<str>>,
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

/// The key of a step mark: the source, the message and the step (no name holds `\0`).
fn mark_key(source: &Source, id: &MessageId, step: &str) -> String {
    format!("{source}\0{id}\0{step}")
}

/// A message id as the `Bytes` of its storage key. Made as shared bytes that own the id:
/// reserve clones the key into the receipt, and cloning a `Bytes` made from a `String`
/// allocates (its first clone makes it shared), where cloning this one only counts.
struct IdKey(MessageId);

impl AsRef<[u8]> for IdKey {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// New messages, not yet placed. As in Redis, a repeated id is a message of its own.
fn entries(messages: Vec<Outgoing>) -> impl Iterator<Item = Entry> {
    messages.into_iter().map(|m| Entry {
        key: Bytes::from_owner(IdKey(m.id)),
        stored: Stored {
            payload: m.payload,
            deliveries: 0,
            errors: Vec::new(),
            dead: None,
            order_key: None,
        },
    })
}

/// The key and delivery count of a receipt this transport made (every message here is
/// stored alone); `None` for any other, which is then stale.
fn stored(receipt: &Receipt) -> Option<(&Bytes, u32)> {
    match &receipt.held {
        Held::Stored { key, delivery } => Some((key, *delivery)),
        Held::Leased { .. } => None,
    }
}

impl Queue {
    fn delay(&mut self, entry: Entry, due: Instant) {
        self.sequence += 1;
        self.delayed.insert((due, self.sequence), entry);
    }

    /// Where the delayed message stored under `id` waits (a scan: delayed messages are
    /// few in the embedded transport, and this is no hot path).
    fn delayed_entry(&self, id: &MessageId) -> Option<(Instant, u64)> {
        self.delayed
            .iter()
            .find(|(_, entry)| entry.key == id.as_str().as_bytes())
            .map(|(slot, _)| *slot)
    }

    fn promote_due(&mut self, now: Instant) {
        while let Some(first) = self.delayed.first_entry() {
            if first.key().0 > now {
                break;
            }
            let entry = first.remove();
            self.promote(entry);
        }
    }

    /// The reservation if `receipt` is the message's current one.
    fn reserved(&mut self, receipt: &Receipt) -> Option<&mut Locked> {
        let (key, delivery) = stored(receipt)?;
        self.in_flight
            .get_mut(key)
            .filter(|m| m.stored.deliveries == delivery)
    }

    /// Reserves a message now: counts the delivery and locks it. A message whose id is
    /// already held (a repeated id) gets a key of its own for the rest of its life.
    fn reserve(&mut self, entry: Entry, lock: Instant) -> Delivery {
        let Entry { key, mut stored } = entry;
        stored.deliveries += 1;
        let (count, payload) = (stored.deliveries, stored.payload.clone());
        // One hash: the key goes in unless it is already held (a repeated id).
        let key = match self.in_flight.entry(key) {
            hash_map::Entry::Vacant(vacant) => {
                let key = vacant.key().clone();
                vacant.insert(Locked {
                    until: lock,
                    stored,
                });
                key
            }
            hash_map::Entry::Occupied(held) => {
                self.sequence += 1;
                let mut key = held.key().to_vec();
                key.extend_from_slice(format!("~{}", self.sequence).as_bytes());
                let key = Bytes::from(key);
                let locked = Locked {
                    until: lock,
                    stored,
                };
                self.in_flight.insert(key.clone(), locked);
                key
            }
        };
        Delivery {
            receipt: Receipt::stored(key, count),
            delivery_count: count,
            payload,
            decoded: None,
        }
    }

    /// Ends the reservation of `receipt` if it is the current one: the message, and
    /// whether it was held alone.
    fn unlock(&mut self, receipt: &Receipt) -> Option<(Entry, bool)> {
        // One hash in the common case; a stale receipt puts the reservation back.
        let (key, delivery) = stored(receipt)?;
        let (key, locked) = self.in_flight.remove_entry(key)?;
        if locked.stored.deliveries != delivery {
            self.in_flight.insert(key, locked);
            return None;
        }
        // Almost always empty (only crash suspects are isolated): skip hashing the key.
        let alone = !self.isolated.is_empty() && self.isolated.remove(&key);
        let stored = locked.stored;
        Some((Entry { key, stored }, alone))
    }

    fn kill(&mut self, mut entry: Entry, reason: DeadLetterReason, error: Option<&ErrorRecord>) {
        entry.stored.record(error);
        entry.stored.dead = Some((reason, now_ms()));
        self.dead.push(entry);
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
                keyed: q.keyed_waiting() as u64,
                in_flight: q.in_flight.len() as u64,
                delayed: q.delayed.len() as u64,
                dead_letters: q.dead.len() as u64,
                paused: q.flow.paused,
                breaker_until_ms: q.breaker_until_ms(),
                ..QueueStats::new(source)
            },
        )
    }

    /// How many reply inboxes hold replies that nobody took ([`Bus::request`](crate::Bus::request)
    /// (crate::Bus::request)): zero once every requesting bus is dropped.
    pub fn reply_inboxes(&self) -> usize {
        self.inboxes.held()
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
            .filter_map(|Entry { key, stored: m }| {
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
    async fn send(
        &self,
        queue: &str,
        placement: Placement<'_>,
        messages: Vec<Outgoing>,
    ) -> Result<()> {
        if let Some(key) = placement.key {
            crate::transport::refuse_empty_key(queue, key)?;
        }
        let mut state = self.state();
        let q = state.queue(&Source::queue(queue)?);
        match (placement.key, placement.due.map(to_instant)) {
            (Some(key), Some(due)) => q.send_keyed_at(key, messages, due),
            (Some(key), None) => q.send_keyed(key, messages),
            (None, Some(due)) => {
                for entry in entries(messages) {
                    q.delay(entry, due);
                }
            }
            (None, None) => q.ready.extend(entries(messages)),
        }
        // Waiters take the messages, or recompute how long to sleep.
        q.notify.notify_waiters();
        Ok(())
    }

    async fn publish(
        &self,
        topic: &str,
        due: Option<SystemTime>,
        messages: Vec<Outgoing>,
    ) -> Result<usize> {
        let due = due.map(to_instant);
        let mut state = self.state();
        let names: Vec<String> = state
            .subscriptions
            .get(topic)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for name in &names {
            let q = state.queue(&Source::subscription(topic, name.as_str())?);
            match due {
                Some(due) => {
                    for entry in entries(messages.clone()) {
                        q.delay(entry, due);
                    }
                }
                None => q.ready.extend(entries(messages.clone())),
            }
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
        }))
    }

    fn extras(&self) -> TransportExtras<'_> {
        TransportExtras::default()
            .dedup(self)
            .scheduling(self)
            .ticks(self)
            .replies(self)
            .marks(self)
            .leases(self)
            .flow(self)
    }
}

impl Leases for MemoryTransport {
    fn singleton_lease(
        &self,
        queue: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Arc<dyn crate::transport::SingletonLease>> {
        Ok(self.leases.lease(queue, holder, ttl))
    }
}

#[async_trait]
impl Deduplicated for MemoryTransport {
    async fn send_deduplicated(
        &self,
        queue: &str,
        message: Outgoing,
        dedup: Deduplication<'_>,
    ) -> Result<Option<MessageId>> {
        Ok(self
            .send_deduplicated_batch(queue, vec![(message, dedup)])
            .await?
            .pop()
            .flatten())
    }

    async fn send_deduplicated_batch(
        &self,
        queue: &str,
        messages: Vec<(Outgoing, Deduplication<'_>)>,
    ) -> Result<Vec<Option<MessageId>>> {
        for key in messages.iter().filter_map(|(_, d)| d.partition) {
            crate::transport::refuse_empty_key(queue, key)?;
        }
        let mut state = self.state();
        let q = state.queue(&Source::queue(queue)?);
        let now = Instant::now();
        let firsts: Vec<_> = messages
            .into_iter()
            .map(|(message, dedup)| q.store_once(message, &dedup, now))
            .collect();
        if firsts.iter().any(Option::is_none) {
            q.notify.notify_waiters();
        }
        Ok(firsts)
    }
}

#[async_trait]
impl Ticks for MemoryTransport {
    async fn send_tick(
        &self,
        queue: &str,
        tick: crate::transport::Tick<'_>,
        message: Outgoing,
    ) -> Result<bool> {
        let mut state = self.state();
        let q = state.queue(&Source::queue(queue)?);
        // The rule of lua/send_tick.lua.
        let last = q.ticks.get(tick.schedule).copied();
        let newer = last.map_or(!tick.catch_up, |last| tick.at_ms > last);
        if !newer {
            return Ok(false);
        }
        q.ticks.insert(tick.schedule.to_owned(), tick.at_ms);
        q.ready.extend(entries(vec![message]));
        q.notify.notify_waiters();
        Ok(true)
    }

    async fn last_tick(&self, queue: &str, schedule: &str) -> Result<Option<u64>> {
        let mut state = self.state();
        Ok(state
            .queue(&Source::queue(queue)?)
            .ticks
            .get(schedule)
            .copied())
    }

    async fn record_schedule(&self, _: &crate::transport::ScheduleRecord) -> Result<()> {
        // Nobody lists this transport's schedules but the host that runs them.
        Ok(())
    }
}

#[async_trait]
impl Scheduling for MemoryTransport {
    async fn scheduled(&self, queue: &str, id: &MessageId) -> Result<Option<(SystemTime, Bytes)>> {
        let mut state = self.state();
        let q = state.queue(&Source::queue(queue)?);
        let now = (Instant::now(), SystemTime::now());
        Ok(q.delayed_entry(id).and_then(|slot| {
            let due = now.1 + slot.0.saturating_duration_since(now.0);
            Some((due, q.delayed.get(&slot)?.stored.payload.clone()))
        }))
    }

    async fn cancel(&self, queue: &str, id: &MessageId) -> Result<bool> {
        let mut state = self.state();
        let q = state.queue(&Source::queue(queue)?);
        Ok(q.delayed_entry(id)
            .and_then(|slot| q.delayed.remove(&slot))
            .is_some())
    }

    async fn reschedule(&self, queue: &str, id: &MessageId, due: SystemTime) -> Result<bool> {
        let mut state = self.state();
        let q = state.queue(&Source::queue(queue)?);
        let Some(entry) = q.delayed_entry(id).and_then(|slot| q.delayed.remove(&slot)) else {
            return Ok(false);
        };
        q.delay(entry, to_instant(due));
        q.notify.notify_waiters();
        Ok(true)
    }
}

#[async_trait]
impl Replies for MemoryTransport {
    async fn reply_inbox(&self, name: &str) -> Result<Box<dyn crate::ReplyInbox>> {
        Ok(self.inboxes.open(name))
    }

    async fn reply(&self, inbox: &str, element: Bytes, keep: Duration) -> Result<()> {
        self.inboxes.push(inbox, element, keep);
        Ok(())
    }
}

#[async_trait]
impl StepMarks for MemoryTransport {
    async fn step_mark(
        &self,
        source: &Source,
        id: &MessageId,
        step: &str,
    ) -> Result<Option<Bytes>> {
        Ok(self.marks.get(&mark_key(source, id, step)))
    }

    async fn mark_step(
        &self,
        source: &Source,
        id: &MessageId,
        step: &str,
        result: Bytes,
        keep: Duration,
    ) -> Result<Option<Bytes>> {
        Ok(self.marks.set(mark_key(source, id, step), result, keep))
    }
}

/// A consumer of one source of a [`MemoryTransport`].
#[derive(Debug)]
struct MemoryConsumer {
    transport: MemoryTransport,
    source: Source,
    options: ConsumerOptions,
}

impl MemoryConsumer {
    fn with_queue<T>(&self, f: impl FnOnce(&mut Queue) -> T) -> T {
        let mut state = self.transport.state();
        f(state.queue(&self.source))
    }
}

#[async_trait]
impl Consumer for MemoryConsumer {
    async fn receive(&self, want: Want, stop: &CancellationToken) -> Result<Received> {
        if want.alone {
            return Ok(self.receive_alone());
        }
        let notify = self.with_queue(|q| Arc::clone(&q.notify));
        let deadline = Instant::now() + IDLE_WAIT;
        let mut waited_held = false;
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            // Register before looking, so a send between the look and the wait is seen.
            notified.as_mut().enable();
            let now = Instant::now();
            let lock = now + self.options.lock_timeout;
            let (deliveries, next_due, hold) = self.with_queue(|q| {
                q.promote_due(now);
                q.cool_keys(now);
                let allowed = match q.allowance(want.max, want.now, now) {
                    Allowance::Take(n) => n,
                    Allowance::Wait(until, hold) => return (Vec::new(), until, hold),
                };
                if !q.suspects.is_empty() {
                    return (Vec::new(), None, Hold::Isolation);
                }
                let keyed = q.keyed_share(allowed);
                let n = (allowed - keyed).min(q.ready.len());
                let mut deliveries = Vec::with_capacity(n);
                for _ in 0..n {
                    if let Some(entry) = q.ready.pop_front() {
                        deliveries.push(q.reserve(entry, lock));
                    }
                }
                let left = allowed - deliveries.len();
                if left > 0 {
                    q.take_keyed(left, now, lock, &mut deliveries);
                }
                q.started(deliveries.len(), now);
                let probe = deliveries.first().map(|d| d.receipt.key());
                let hold = q.breaker_seen(probe, now, lock);
                let next_due = q.delayed.first_key_value().map(|(d, _)| d.0);
                let next_due = match (next_due, q.next_key_turn()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                (deliveries, next_due, hold)
            });
            // With nothing ready, wait for a send (or a due time) until the deadline; held
            // back (flow control, a breaker), wait once for a change, briefly, and say so.
            let held = hold != Hold::None;
            if !deliveries.is_empty()
                || want.max == 0
                || now >= deadline
                || hold == Hold::Isolation
                || (held && waited_held)
            {
                return Ok(Received::new(deliveries, hold));
            }
            let mut wake = next_due.map_or(deadline, |due| due.min(deadline));
            if held {
                wake = wake.min(now + HELD_WAIT);
                waited_held = true;
            }
            tokio::select! {
                () = stop.cancelled() => return Ok(Received::new(Vec::new(), hold)),
                () = notified => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    async fn ack(&self, receipts: &[Receipt]) -> Result<()> {
        let now = Instant::now();
        self.with_queue(|q| {
            for receipt in receipts {
                if let Some((entry, _)) = q.unlock(receipt) {
                    q.key_freed(&entry);
                    q.judge_probe(&entry.key, true, now);
                }
            }
            q.freed();
        });
        Ok(())
    }

    async fn renew(&self, receipts: &[Receipt]) -> Result<Vec<bool>> {
        let deadline = Instant::now() + self.options.lock_timeout;
        Ok(self.with_queue(|q| {
            receipts
                .iter()
                .map(|receipt| match q.reserved(receipt) {
                    Some(locked) => {
                        locked.until = deadline;
                        q.extend_probe(receipt.key(), deadline);
                        true
                    }
                    None => false,
                })
                .collect()
        }))
    }

    async fn retry(&self, receipt: &Receipt, delay: Duration, error: &ErrorRecord) -> Result<()> {
        self.with_queue(|q| {
            let Some((mut entry, _)) = q.unlock(receipt) else {
                return;
            };
            q.judge_probe(&entry.key, false, Instant::now());
            entry.stored.record(Some(error));
            if delay.is_zero() {
                q.ready.push_back(entry);
            } else {
                q.delay(entry, Instant::now() + delay);
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
            if let Some((entry, _)) = q.unlock(receipt) {
                if !q.dead_letter_blocks() {
                    q.key_freed(&entry);
                }
                q.judge_probe(&entry.key, false, Instant::now());
                q.kill(entry, reason, error);
            }
            q.freed();
        });
        Ok(())
    }

    async fn release(&self, receipts: &[Receipt]) -> Result<()> {
        self.with_queue(|q| {
            // In reverse, so that the released messages keep their order at the head.
            for receipt in receipts.iter().rev() {
                if let Some((mut entry, alone)) = q.unlock(receipt) {
                    entry.stored.deliveries -= 1;
                    if alone {
                        q.suspects.push_front(entry);
                    } else {
                        q.ready.push_front(entry);
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
            let expired: Vec<Receipt> = q
                .in_flight
                .iter()
                .filter(|(_, locked)| locked.until <= now)
                .map(|(key, locked)| Receipt::stored(key.clone(), locked.stored.deliveries))
                .collect();
            let error =
                ErrorRecord::now("lock expired: the consumer stopped or lost its connection");
            for receipt in &expired {
                let Some((mut entry, alone)) = q.unlock(receipt) else {
                    continue;
                };
                // Held alone, it can only have failed itself; held with others, it is
                // delivered alone next, so that it is charged only its own failures.
                if alone && entry.stored.deliveries >= limit {
                    if !q.dead_letter_blocks() {
                        q.key_freed(&entry);
                    }
                    q.kill(entry, DeadLetterReason::DeliveryLimit, Some(&error));
                } else {
                    entry.stored.record(Some(&error));
                    q.suspects.push_back(entry);
                }
            }
            q.notify.notify_waiters();
            expired.len()
        }))
    }

    async fn close(&self) -> Result<()> {
        Ok(())
    }

    fn extras(&self) -> ConsumerExtras<'_> {
        ConsumerExtras::default()
            .fleet_breaker(self)
            .error_history(self)
    }
}

#[async_trait]
impl FleetBreaker for MemoryConsumer {
    async fn trip(&self, cool_down: Duration) -> Result<()> {
        self.with_queue(|q| q.trip(Instant::now(), cool_down));
        Ok(())
    }
}

#[async_trait]
impl ErrorHistory for MemoryConsumer {
    async fn errors(&self, receipt: &Receipt) -> Result<Vec<ErrorRecord>> {
        Ok(self.with_queue(|q| {
            q.reserved(receipt)
                .map(|m| m.stored.errors.clone())
                .unwrap_or_default()
        }))
    }
}

impl MemoryConsumer {
    /// The next suspect, reserved to run alone (its holder holds nothing else).
    fn receive_alone(&self) -> Received {
        let now = Instant::now();
        let lock = now + self.options.lock_timeout;
        self.with_queue(|q| {
            if let Allowance::Wait(_, hold) = q.allowance(1, 1, now) {
                return Received::new(Vec::new(), hold);
            }
            let Some(entry) = q.suspects.pop_front() else {
                return Received::default();
            };
            q.started(1, now);
            let delivery = q.reserve(entry, lock);
            let hold = q.breaker_seen(Some(delivery.receipt.key()), now, lock);
            q.isolated.insert(delivery.receipt.key().clone());
            let hold = if hold == Hold::None && !q.suspects.is_empty() {
                Hold::Isolation
            } else {
                hold
            };
            Received::new(vec![delivery], hold)
        })
    }
}
