//! One batch's state and its transitions, for the memory store: the same rules as the
//! Redis scripts (`lua/batch_*.lua`, `lua/fire.lua`), which `bus_conformance::workflows`
//! runs against both.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bus_core::transport::Receipt;
use bytes::Bytes;

use super::records::{DeadMember, MarkJson};
use super::{
    BatchOutcome, BatchSpec, BatchState, BatchStatus, Callback, CallbackStatus, Fired, Handoff,
    Inspection, MemberResult, Settle,
};
use crate::ids::{BatchId, CallbackKind, ChildPolicy, MemberRef};
use crate::{Error, Result};

/// A member that opened a child batch: it settles when both its own ack is confirmed and
/// the child batch handed off.
#[derive(Debug)]
pub(super) struct Defer {
    pub(super) child: BatchId,
    /// Its own confirmed ack: its mark and result.
    pub(super) own: Option<(MarkJson, Option<Bytes>)>,
    /// The child batch's end: `Some(None)` succeeded, `Some(Some(why))` failed.
    pub(super) child_failed: Option<Option<String>>,
}

#[derive(Debug)]
pub(super) struct Batch {
    pub(super) state: BatchState,
    outcome: Option<BatchOutcome>,
    pub(super) total: u64,
    ok: u64,
    dead: u64,
    pub(super) closed: bool,
    pub(super) created: u64,
    fired: Option<u64>,
    policy: Option<ChildPolicy>,
    parent: Option<MemberRef>,
    callbacks: Vec<Callback>,
    /// Kinds that fired and have a callback.
    fired_kinds: BTreeSet<CallbackKind>,
    sent: BTreeSet<CallbackKind>,
    death_fired: bool,
    /// Settled members, one bit each.
    done: Vec<u8>,
    /// Marks: when written, the mark, the result.
    pub(super) settling: BTreeMap<u64, (u64, MarkJson, Option<Bytes>)>,
    dead_members: BTreeMap<u64, DeadMember>,
    results: BTreeMap<u64, Bytes>,
    adds: HashMap<String, u64>,
    pub(super) defer: BTreeMap<u64, Defer>,
    pub(super) expires: Option<u64>,
}

impl Batch {
    pub(super) fn new(spec: &BatchSpec, now: u64) -> Self {
        Batch {
            state: BatchState::Open,
            outcome: None,
            total: 0,
            ok: 0,
            dead: 0,
            closed: false,
            created: now,
            fired: None,
            policy: spec.policy,
            parent: spec.parent.clone(),
            callbacks: spec.callbacks.clone(),
            fired_kinds: BTreeSet::new(),
            sent: BTreeSet::new(),
            death_fired: false,
            done: Vec::new(),
            settling: BTreeMap::new(),
            dead_members: BTreeMap::new(),
            results: BTreeMap::new(),
            adds: HashMap::new(),
            defer: BTreeMap::new(),
            expires: None,
        }
    }

    pub(super) fn expired(&self, now: u64) -> bool {
        self.expires.is_some_and(|at| at <= now)
    }

    pub(super) fn is_done(&self, index: u64) -> bool {
        let (byte, bit) = ((index / 8) as usize, 7 - (index % 8) as u8);
        self.done.get(byte).is_some_and(|b| b & (1 << bit) != 0)
    }

    fn set_done(&mut self, index: u64) {
        let (byte, bit) = ((index / 8) as usize, 7 - (index % 8) as u8);
        if self.done.len() <= byte {
            self.done.resize(byte + 1, 0);
        }
        self.done[byte] |= 1 << bit;
    }

    pub(super) fn add(
        &mut self,
        id: &BatchId,
        token: &str,
        count: u64,
        adder: Option<u64>,
    ) -> Result<u64> {
        if let Some(first) = self.adds.get(token) {
            return Ok(*first);
        }
        if self.state != BatchState::Open {
            return Err(Error::Finished { batch: id.clone() });
        }
        let pending_adder = adder.is_some_and(|a| a < self.total && !self.is_done(a));
        if self.closed && !pending_adder {
            return Err(Error::Closed { batch: id.clone() });
        }
        let first = self.total;
        self.total += count;
        self.adds.insert(token.to_owned(), first);
        Ok(first)
    }

    fn callback(&self, kind: CallbackKind) -> Option<&Callback> {
        self.callbacks.iter().find(|c| c.kind == kind)
    }

    /// The callbacks that fire now: the death callback at the first dead member, the
    /// outcome's and the continuation once every member settled (or, failing the parent,
    /// at the first dead child).
    pub(super) fn fire(&mut self, now: u64) -> Fired {
        let mut out = Fired::default();
        if self.state != BatchState::Open {
            return out;
        }
        let mut kinds = Vec::new();
        if self.dead > 0 && !self.death_fired {
            self.death_fired = true;
            kinds.push(CallbackKind::Death);
        }
        let outcome = if self.policy == Some(ChildPolicy::FailParent) && self.dead > 0 {
            Some(BatchOutcome::Failed)
        } else if self.closed && self.ok + self.dead >= self.total {
            Some(if self.dead == 0 {
                BatchOutcome::Success
            } else {
                BatchOutcome::Complete
            })
        } else {
            None
        };
        if let Some(outcome) = outcome {
            out.finished = true;
            self.state = BatchState::Fired;
            self.outcome = Some(outcome);
            self.fired = Some(now);
            match outcome {
                BatchOutcome::Success => kinds.push(CallbackKind::Success),
                BatchOutcome::Complete => kinds.push(CallbackKind::Complete),
                BatchOutcome::Failed => {}
            }
            kinds.push(CallbackKind::Continuation);
        }
        for kind in kinds {
            if let Some(callback) = self.callback(kind).cloned() {
                self.fired_kinds.insert(kind);
                out.callbacks.push(callback);
            }
        }
        out
    }

    pub(super) fn apply(&mut self, settle: &Settle) {
        match settle {
            Settle::Drop { index, receipt } => {
                if self.written_for(*index, Some(receipt)) {
                    self.settling.remove(index);
                }
            }
            Settle::Confirm { index, receipt } => {
                if !self.written_for(*index, receipt.as_ref()) {
                    return;
                }
                let Some((_, mark, result)) = self.settling.remove(index) else {
                    return;
                };
                if self.is_done(*index) {
                    return;
                }
                if mark.o != "ok" {
                    self.settle_dead(*index, mark.dead_member(*index));
                    return;
                }
                match self.defer.get_mut(index) {
                    None => self.settle_ok(*index, result),
                    Some(defer) => match defer.child_failed.take() {
                        Some(failed) => self.combine(*index, mark, result, failed),
                        None => defer.own = Some((mark, result)),
                    },
                }
            }
            Settle::Child { index, failed } => {
                if self.is_done(*index) {
                    return;
                }
                let defer = self.defer.entry(*index).or_insert_with(|| Defer {
                    child: BatchId::generate(),
                    own: None,
                    child_failed: None,
                });
                match defer.own.take() {
                    Some((mark, result)) => self.combine(*index, mark, result, failed.clone()),
                    None => defer.child_failed = Some(failed.clone()),
                }
            }
        }
    }

    /// Whether member `index` has a mark, written for `receipt` if one is named.
    fn written_for(&self, index: u64, receipt: Option<&Receipt>) -> bool {
        self.settling.get(&index).is_some_and(|(_, mark, _)| {
            receipt.map_or(true, |receipt| {
                mark.receipt().ok().as_ref() == Some(receipt)
            })
        })
    }

    fn combine(
        &mut self,
        index: u64,
        mark: MarkJson,
        result: Option<Bytes>,
        failed: Option<String>,
    ) {
        match failed {
            None => self.settle_ok(index, result),
            Some(error) => {
                let mut dead = mark.dead_member(index);
                dead.reason = "child_batch".to_owned();
                dead.error = error;
                self.settle_dead(index, dead);
            }
        }
    }

    fn settle_ok(&mut self, index: u64, result: Option<Bytes>) {
        self.set_done(index);
        self.defer.remove(&index);
        self.ok += 1;
        if let (Some(_), Some(result)) = (self.policy, result) {
            self.results.insert(index, result);
        }
    }

    fn settle_dead(&mut self, index: u64, dead: DeadMember) {
        self.set_done(index);
        self.defer.remove(&index);
        self.dead += 1;
        self.dead_members.insert(index, dead);
    }

    pub(super) fn sent(&mut self, kinds: &[CallbackKind]) -> Handoff {
        self.sent.extend(kinds.iter().copied());
        if self.state == BatchState::Fired && self.fired_kinds.is_subset(&self.sent) {
            self.state = if self.parent.is_some() {
                BatchState::Settled
            } else {
                BatchState::Done
            };
        }
        self.handoff()
    }

    fn handoff(&self) -> Handoff {
        match (self.state, &self.parent) {
            (BatchState::Settled, Some(member)) => Handoff::Parent {
                member: member.clone(),
                failed: self.failure(),
            },
            (BatchState::Done, _) => Handoff::Done,
            _ => Handoff::Pending,
        }
    }

    /// Why the batch failed, as its parent's member records it.
    fn failure(&self) -> Option<String> {
        match self.outcome {
            Some(BatchOutcome::Success) | None => None,
            Some(_) => Some(format!(
                "{} of {} members of the child batch were dead-lettered",
                self.dead, self.total
            )),
        }
    }

    pub(super) fn inspect(&self, stale_before: u64) -> Result<Inspection> {
        let unsent = self
            .callbacks
            .iter()
            .filter(|c| self.fired_kinds.contains(&c.kind) && !self.sent.contains(&c.kind))
            .cloned()
            .collect();
        let stale = self
            .settling
            .iter()
            .filter(|(_, (at, _, _))| *at <= stale_before)
            .map(|(index, (_, mark, _))| mark.stale(*index))
            .collect::<Result<_>>()?;
        Ok(Inspection {
            state: self.state,
            unsent,
            handoff: self.handoff(),
            stale,
        })
    }

    pub(super) fn status(&self, id: &BatchId, dead_limit: usize) -> BatchStatus {
        let callbacks = self
            .callbacks
            .iter()
            .map(|c| CallbackStatus {
                kind: c.kind,
                queue: c.queue.clone(),
                message_id: c.id.to_string(),
                fired: self.fired_kinds.contains(&c.kind),
                sent: self.sent.contains(&c.kind),
            })
            .collect();
        BatchStatus {
            id: id.clone(),
            state: self.state,
            outcome: self.outcome,
            total: self.total,
            succeeded: self.ok,
            dead: self.dead,
            closed: self.closed,
            created_ms: self.created,
            fired_ms: self.fired,
            parent: self.parent.as_ref().map(ToString::to_string),
            policy: self.policy,
            callbacks,
            dead_members: self
                .dead_members
                .values()
                .take(dead_limit)
                .cloned()
                .collect(),
            waiting_on: self
                .defer
                .iter()
                .map(|(i, d)| (*i, d.child.clone()))
                .collect(),
        }
    }

    pub(super) fn result(&self, index: u64) -> MemberResult {
        if let Some(dead) = self.dead_members.get(&index) {
            return MemberResult::Dead(dead.clone());
        }
        if self.is_done(index) {
            return MemberResult::Succeeded(self.results.get(&index).cloned());
        }
        MemberResult::Pending
    }
}
