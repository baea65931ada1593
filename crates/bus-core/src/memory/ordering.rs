//! Per-key ordering on the in-memory transport: the same semantics as Redis's
//! (`lua/send_keyed.lua`, reserve.lua's `take_keyed`, common.lua's `key_freed`;
//! docs/concepts.md, "Flow control").

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use tokio::time::Instant;

use super::{entries, Entry, Queue};
use crate::fast_hash::{FastMap, FastSet};
use crate::transport::{Delivery, Outgoing};

/// The keyed messages of an ordered queue that wait for their key, and the keys' state.
#[derive(Debug, Default)]
pub(super) struct Keyed {
    /// Each key's waiting messages, in the order sent.
    waiting: FastMap<Arc<str>, VecDeque<Entry>>,
    /// Keys whose next message may start, in turn order (round robin).
    turns: VecDeque<Arc<str>>,
    /// The keys in `turns` (each at most once).
    queued: FastSet<Arc<str>>,
    /// Messages of each key in flight (holding its slot).
    busy: FastMap<Arc<str>, u32>,
    /// Which side a receive of one message serves first (alternates).
    keyed_first: bool,
    /// Per-key rate limit: each key's starts within its window, oldest first.
    starts: FastMap<Arc<str>, VecDeque<Instant>>,
    /// Keys over their rate, out of turn until a start leaves their window (reserve.lua's
    /// `kwait`).
    cooling: BTreeSet<(Instant, Arc<str>)>,
}

impl Queue {
    /// Most messages of one key in flight; 0: no limit (ordering switched off while keyed
    /// messages still wait: they drain).
    fn key_limit(&self) -> u32 {
        self.flow.per_key.map_or(0, |order| order.limit())
    }

    /// A keyed send: into its key's list on an ordered queue, else onto `ready`. The due
    /// delayed messages are promoted first, as send_keyed.lua does, so that a delayed
    /// keyed send already due goes ahead of these.
    pub(super) fn send_keyed(&mut self, key: &str, messages: Vec<Outgoing>) {
        if self.flow.per_key.is_none() {
            self.ready.extend(entries(messages));
            return;
        }
        self.promote_due(Instant::now());
        self.join_key(Arc::from(key), entries(messages));
    }

    /// A delayed keyed send (send_keyed_at.lua): delayed as any; on an ordered queue it
    /// carries its key, so that its promotion puts it in its key's list.
    pub(super) fn send_keyed_at(&mut self, key: &str, messages: Vec<Outgoing>, due: Instant) {
        let key: Option<Arc<str>> = self.flow.per_key.is_some().then(|| Arc::from(key));
        for mut entry in entries(messages) {
            entry.stored.order_key = key.clone();
            self.delay(entry, due);
        }
    }

    /// A delayed message falls due (keyed.lua's promote_due): a delayed keyed send
    /// (keyed, never delivered) joins its key's list if the queue is still ordered, and
    /// is a plain message otherwise; anything else (a delayed retry of a keyed message
    /// too, still holding its slot) goes onto `ready`.
    pub(super) fn promote(&mut self, mut entry: Entry) {
        let fresh_key = match &entry.stored.order_key {
            Some(key) if entry.stored.deliveries == 0 => Some(Arc::clone(key)),
            _ => None,
        };
        match fresh_key {
            Some(key) if self.key_limit() > 0 => self.join_key(key, std::iter::once(entry)),
            Some(_) => {
                entry.stored.order_key = None;
                self.ready.push_back(entry);
            }
            None => self.ready.push_back(entry),
        }
    }

    /// Appends keyed messages to their key's list; the key takes a turn if it has a
    /// free slot.
    fn join_key(&mut self, key: Arc<str>, new: impl Iterator<Item = Entry>) {
        let list = self.keyed.waiting.entry(Arc::clone(&key)).or_default();
        list.extend(new.map(|mut entry| {
            entry.stored.order_key = Some(Arc::clone(&key));
            entry
        }));
        if self.keyed.busy.get(&key).copied().unwrap_or(0) < self.key_limit() {
            self.keyed.take_turn(key);
        }
    }

    /// How many of `want` messages a receive keeps for the keys' turns: up to half while
    /// any key may start (a receive of one alternates), none otherwise.
    pub(super) fn keyed_share(&mut self, want: usize) -> usize {
        if self.keyed.turns.is_empty() {
            return 0;
        }
        if want == 1 {
            self.keyed.keyed_first = !self.keyed.keyed_first;
            return usize::from(self.keyed.keyed_first);
        }
        want / 2
    }

    /// Keys whose rate window freed a start take their turn again (all of them once the
    /// queue has no per-key rate any more).
    pub(super) fn cool_keys(&mut self, now: Instant) {
        let limited = self.flow.per_key.and_then(|o| o.rate_limit()).is_some();
        while let Some((until, _)) = self.keyed.cooling.first() {
            if limited && *until > now {
                break;
            }
            if let Some((_, key)) = self.keyed.cooling.pop_first() {
                self.keyed.take_turn(key);
            }
        }
    }

    /// Whether the queue limits each key's rate of starts.
    pub(super) fn key_rate_limited(&self) -> bool {
        self.flow.per_key.and_then(|o| o.rate_limit()).is_some()
    }

    /// When the first key over its rate may start again.
    pub(super) fn next_key_turn(&self) -> Option<Instant> {
        self.keyed.cooling.first().map(|(until, _)| *until)
    }

    /// Whether `key` may start one more message at `now` under the per-key rate; if not,
    /// it cools until its window frees a start.
    fn within_key_rate(&mut self, key: &Arc<str>, now: Instant) -> bool {
        let Some(rate) = self.flow.per_key.and_then(|o| o.rate_limit()) else {
            return true;
        };
        // Counted at reserve, which a start follows within the margin: the window is kept
        // that much longer, so that the limit holds at handler start.
        let window = rate.per() + crate::flow::start_margin(rate.per());
        let starts = self.keyed.starts.entry(Arc::clone(key)).or_default();
        while starts.front().is_some_and(|s| *s + window <= now) {
            starts.pop_front();
        }
        if starts.len() < rate.starts() as usize {
            starts.push_back(now);
            return true;
        }
        let until = starts.front().map_or(now, |s| *s + window);
        self.keyed.cooling.insert((until, Arc::clone(key)));
        false
    }

    /// Reserves up to `max` keyed messages, one per key per turn: a key that still has a
    /// free slot and waiting messages takes its next turn at the back; one over its rate
    /// cools (`cool_keys`).
    pub(super) fn take_keyed(
        &mut self,
        max: usize,
        now: Instant,
        lock: Instant,
        out: &mut Vec<Delivery>,
    ) {
        let limit = self.key_limit();
        let mut taken = 0;
        // Keys with no starts left in their window are forgotten now and then.
        if self.keyed.starts.len() > 1024 {
            let per = self
                .flow
                .per_key
                .and_then(|o| o.rate_limit())
                .map(|r| r.per());
            self.keyed.starts.retain(|_, starts| {
                per.is_some_and(|per| starts.back().is_some_and(|s| *s + per > now))
            });
        }
        while taken < max {
            let Some(key) = self.keyed.turns.pop_front() else {
                break;
            };
            self.keyed.queued.remove(&key);
            let busy = self.keyed.busy.get(&key).copied().unwrap_or(0);
            if limit != 0 && busy >= limit {
                continue; // Back in turn when a slot frees (key_freed).
            }
            if !self.keyed.waiting.contains_key(&key) || !self.within_key_rate(&key, now) {
                continue;
            }
            let Some(list) = self.keyed.waiting.get_mut(&key) else {
                continue;
            };
            let Some(entry) = list.pop_front() else {
                self.keyed.waiting.remove(&key);
                continue;
            };
            let more = !list.is_empty();
            if !more {
                self.keyed.waiting.remove(&key);
            }
            *self.keyed.busy.entry(Arc::clone(&key)).or_default() += 1;
            out.push(self.reserve(entry, lock));
            taken += 1;
            if more && (limit == 0 || busy + 1 < limit) {
                self.keyed.take_turn(key);
            }
        }
    }

    /// Gives back the slot a keyed message held, as it leaves flight for good (acked, or
    /// dead-lettered unless dead letters block their key).
    pub(super) fn key_freed(&mut self, entry: &Entry) {
        let Some(key) = entry.stored.order_key.as_ref() else {
            return;
        };
        if let Some(busy) = self.keyed.busy.get_mut(key) {
            *busy -= 1;
            if *busy == 0 {
                self.keyed.busy.remove(key);
            }
        }
        if self.keyed.waiting.contains_key(key) {
            self.keyed.take_turn(Arc::clone(key));
            self.notify.notify_waiters();
        }
    }

    /// Whether a dead letter keeps its key's slot.
    pub(super) fn dead_letter_blocks(&self) -> bool {
        self.flow
            .per_key
            .is_some_and(|order| order.blocks_on_dead_letter())
    }

    /// Keyed messages waiting for their key (`QueueStats::keyed`).
    pub(super) fn keyed_waiting(&self) -> usize {
        self.keyed.waiting.values().map(VecDeque::len).sum()
    }
}

impl Keyed {
    /// Puts `key` at the back of the turns, unless it is there already.
    fn take_turn(&mut self, key: Arc<str>) {
        if self.queued.insert(Arc::clone(&key)) {
            self.turns.push_back(key);
        }
    }
}
