//! [`MemoryWorkflowStore`]: the workflow store in the process, for the in-memory transport
//! and tests. The same steps as the Redis store's scripts, each under one lock.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::now_ms;
use bytes::Bytes;

use super::machine::{Batch, Defer};
use super::records::{MarkJson, RunRecord};
use super::{
    BatchSpec, BatchStatus, DueRun, Fired, Handoff, Inspection, Mark, MemberResult, Outcome,
    ParkedInfo, ParkedKind, ParkedRun, Settle, WaitOutcome, WorkflowStore, RETENTION,
};
use crate::ids::{BatchId, CallbackKind, MemberRef};
use crate::{Error, Result};

/// Workflow state in the process: for [`MemoryTransport`](bus_core::MemoryTransport)
/// hosts and tests. Clones share it. It cannot ask its transport where a member is
/// ([`WorkflowStore::presence`] is `None`): in one process a lost confirmation only
/// follows a crash that takes the state with it.
#[derive(Debug, Clone, Default)]
pub struct MemoryWorkflowStore {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    batches: HashMap<BatchId, Batch>,
    /// Open batches, by when the sweeper looks at them next.
    open: HashMap<BatchId, u64>,
    /// Done batches, by when they were done.
    recent: Vec<(BatchId, u64)>,
    runs: HashMap<String, Run>,
    /// Parked runs by due time.
    due: BTreeSet<(u64, String)>,
    /// Signals sent: payload and expiry.
    signals: HashMap<String, (Bytes, u64)>,
    /// Runs waiting, by signal.
    waiters: HashMap<String, BTreeSet<String>>,
    /// Waits' outcomes: outcome and expiry.
    outcomes: HashMap<String, (WaitOutcome, u64)>,
}

#[derive(Debug)]
struct Run {
    record: RunRecord,
    envelope: Bytes,
    due_ms: u64,
}

impl State {
    fn batch(&mut self, id: &BatchId) -> Result<&mut Batch> {
        let now = now_ms();
        match self.batches.get(id) {
            Some(b) if b.expired(now) => {
                self.batches.remove(id);
            }
            _ => {}
        }
        self.batches
            .get_mut(id)
            .ok_or_else(|| Error::NotFound { batch: id.clone() })
    }

    fn reschedule(&mut self, token: &str, due_ms: u64) {
        if let Some(run) = self.runs.get_mut(token) {
            self.due.remove(&(run.due_ms, token.to_owned()));
            run.due_ms = due_ms;
            self.due.insert((due_ms, token.to_owned()));
        }
    }

    fn live_outcome(&self, token: &str, now: u64) -> Option<&WaitOutcome> {
        self.outcomes
            .get(token)
            .filter(|(_, until)| *until > now)
            .map(|(o, _)| o)
    }
}

impl MemoryWorkflowStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[async_trait]
impl WorkflowStore for MemoryWorkflowStore {
    async fn open(&self, spec: &BatchSpec) -> Result<bool> {
        let mut state = self.state();
        let now = now_ms();
        if state.batch(&spec.id).is_ok() {
            return Ok(false);
        }
        state.batches.insert(spec.id.clone(), Batch::new(spec, now));
        state.open.insert(spec.id.clone(), now);
        Ok(true)
    }

    async fn add(
        &self,
        batch: &BatchId,
        token: &str,
        count: u64,
        adder: Option<u64>,
    ) -> Result<u64> {
        self.state().batch(batch)?.add(batch, token, count, adder)
    }

    async fn defer(&self, member: &MemberRef, child: &BatchId) -> Result<bool> {
        let mut state = self.state();
        let b = state.batch(&member.batch)?;
        if b.is_done(member.index) {
            return Ok(false);
        }
        b.defer.entry(member.index).or_insert_with(|| Defer {
            child: child.clone(),
            own: None,
            child_failed: None,
        });
        Ok(true)
    }

    async fn close(&self, batch: &BatchId) -> Result<Fired> {
        let mut state = self.state();
        let b = state.batch(batch)?;
        b.closed = true;
        Ok(b.fire(now_ms()))
    }

    async fn mark(&self, batch: &BatchId, marks: &[Mark]) -> Result<()> {
        let mut state = self.state();
        let b = state.batch(batch)?;
        let now = now_ms();
        for mark in marks {
            if b.is_done(mark.index) {
                continue;
            }
            let result = match &mark.outcome {
                Outcome::Succeeded { result } => result.clone(),
                Outcome::Dead { .. } => None,
            };
            b.settling
                .insert(mark.index, (now, MarkJson::of(mark, now), result));
        }
        Ok(())
    }

    async fn settle(&self, batch: &BatchId, settles: &[Settle]) -> Result<Fired> {
        let mut state = self.state();
        let b = state.batch(batch)?;
        for settle in settles {
            b.apply(settle);
        }
        Ok(b.fire(now_ms()))
    }

    async fn sent(&self, batch: &BatchId, kinds: &[CallbackKind]) -> Result<Handoff> {
        let mut state = self.state();
        let handoff = state.batch(batch)?.sent(kinds);
        if handoff == Handoff::Done {
            self.finish(&mut state, batch);
        }
        Ok(handoff)
    }

    async fn done(&self, batch: &BatchId) -> Result<()> {
        let mut state = self.state();
        if state.batch(batch).is_ok() {
            self.finish(&mut state, batch);
        }
        Ok(())
    }

    async fn status(&self, batch: &BatchId, dead_limit: usize) -> Result<Option<BatchStatus>> {
        let mut state = self.state();
        Ok(state.batch(batch).ok().map(|b| b.status(batch, dead_limit)))
    }

    async fn results(&self, batch: &BatchId, from: u64, count: usize) -> Result<Vec<MemberResult>> {
        let mut state = self.state();
        let b = state.batch(batch)?;
        let end = b.total.min(from.saturating_add(count as u64));
        Ok((from..end).map(|i| b.result(i)).collect())
    }

    async fn list(&self, limit: usize) -> Result<(Vec<BatchId>, Vec<BatchId>)> {
        let state = self.state();
        let mut open: Vec<(u64, BatchId)> = state
            .open
            .keys()
            .filter_map(|id| state.batches.get(id).map(|b| (b.created, id.clone())))
            .collect();
        open.sort();
        let recent = state
            .recent
            .iter()
            .rev()
            .take(limit)
            .map(|(id, _)| id.clone());
        Ok((
            open.into_iter().take(limit).map(|(_, id)| id).collect(),
            recent.collect(),
        ))
    }

    async fn due_for_sweep(&self, limit: usize, every: Duration) -> Result<Vec<BatchId>> {
        let mut state = self.state();
        let now = now_ms();
        let mut due: Vec<(u64, BatchId)> = state
            .open
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, at)| (*at, id.clone()))
            .collect();
        due.sort();
        due.truncate(limit);
        for (_, id) in &due {
            state.open.insert(id.clone(), now + ms(every));
        }
        Ok(due.into_iter().map(|(_, id)| id).collect())
    }

    async fn inspect(&self, batch: &BatchId, stale: Duration) -> Result<Option<Inspection>> {
        let mut state = self.state();
        let Ok(b) = state.batch(batch) else {
            return Ok(None);
        };
        Ok(Some(b.inspect(now_ms().saturating_sub(ms(stale)))?))
    }

    async fn unlist(&self, batch: &BatchId) -> Result<()> {
        self.state().open.remove(batch);
        Ok(())
    }

    async fn park(&self, run: &ParkedRun) -> Result<bool> {
        let mut state = self.state();
        if state.runs.contains_key(&run.token) {
            return Ok(false);
        }
        insert_run(&mut state, run, None);
        Ok(true)
    }

    async fn wait(&self, run: &ParkedRun, signal: &str) -> Result<bool> {
        let mut state = self.state();
        let now = now_ms();
        if state.runs.contains_key(&run.token) {
            return Ok(false);
        }
        insert_run(&mut state, run, Some(signal));
        let sent = state
            .signals
            .get(signal)
            .filter(|(_, until)| *until > now)
            .map(|(payload, _)| payload.clone());
        match sent {
            Some(payload) => {
                let until = now + ms(super::OUTCOME_KEEP);
                state
                    .outcomes
                    .insert(run.token.clone(), (WaitOutcome::Signalled(payload), until));
                state.reschedule(&run.token, now);
            }
            None => {
                let waiters = state.waiters.entry(signal.to_owned()).or_default();
                waiters.insert(run.token.clone());
            }
        }
        Ok(true)
    }

    async fn signal(&self, signal: &str, payload: &Bytes, keep: Duration) -> Result<usize> {
        let mut state = self.state();
        let now = now_ms();
        let kept = match state.signals.get(signal) {
            Some((first, until)) if *until > now => first.clone(),
            _ => {
                state
                    .signals
                    .insert(signal.to_owned(), (payload.clone(), now + ms(keep)));
                payload.clone()
            }
        };
        let waiting = state.waiters.remove(signal).unwrap_or_default();
        let mut woken = 0;
        for token in waiting {
            if state.live_outcome(&token, now).is_some() {
                continue;
            }
            let until = now + ms(super::OUTCOME_KEEP);
            state
                .outcomes
                .insert(token.clone(), (WaitOutcome::Signalled(kept.clone()), until));
            state.reschedule(&token, now);
            woken += 1;
        }
        Ok(woken)
    }

    async fn take_due(&self, limit: usize, claim: Duration) -> Result<Vec<DueRun>> {
        let mut state = self.state();
        let now = now_ms();
        let due: Vec<String> = state
            .due
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(limit)
            .map(|(_, token)| token.clone())
            .collect();
        let mut taken = Vec::with_capacity(due.len());
        for token in due {
            let Some(run) = state.runs.get(&token) else {
                continue;
            };
            let (record, envelope) = (run.record.clone(), run.envelope.clone());
            if let Some(signal) = &record.w {
                if state.live_outcome(&token, now).is_none() {
                    let until = now + ms(super::OUTCOME_KEEP);
                    state
                        .outcomes
                        .insert(token.clone(), (WaitOutcome::TimedOut, until));
                    if let Some(waiters) = state.waiters.get_mut(signal) {
                        waiters.remove(&token);
                    }
                }
            }
            state.reschedule(&token, now + ms(claim));
            taken.push(DueRun {
                token,
                queue: record.q,
                message_id: super::records::message_id(&record.id),
                envelope,
            });
        }
        Ok(taken)
    }

    async fn relayed(&self, tokens: &[String]) -> Result<()> {
        let mut state = self.state();
        for token in tokens {
            if let Some(run) = state.runs.remove(token) {
                state.due.remove(&(run.due_ms, token.clone()));
            }
        }
        Ok(())
    }

    async fn outcome(&self, token: &str) -> Result<Option<WaitOutcome>> {
        Ok(self.state().live_outcome(token, now_ms()).cloned())
    }

    async fn next_due(&self) -> Result<Option<u64>> {
        Ok(self.state().due.first().map(|(at, _)| *at))
    }

    async fn parked(&self, limit: usize) -> Result<Vec<ParkedInfo>> {
        let state = self.state();
        let now = now_ms();
        let parked = state.due.iter().take(limit).filter_map(|(due_ms, token)| {
            let run = state.runs.get(token)?;
            let kind = match &run.record.w {
                None => ParkedKind::Sleep,
                Some(signal) => ParkedKind::Wait {
                    signal: signal.clone(),
                    signalled: matches!(
                        state.live_outcome(token, now),
                        Some(WaitOutcome::Signalled(_))
                    ),
                },
            };
            Some(ParkedInfo {
                token: token.clone(),
                queue: run.record.q.clone(),
                message_id: run.record.id.clone(),
                message_type: run.record.message_type.clone(),
                kind,
                due_ms: *due_ms,
            })
        });
        Ok(parked.collect())
    }
}

impl MemoryWorkflowStore {
    fn finish(&self, state: &mut State, batch: &BatchId) {
        let now = now_ms();
        if let Some(b) = state.batches.get_mut(batch) {
            b.state = super::BatchState::Done;
            b.expires = Some(now + ms(RETENTION));
        }
        state.open.remove(batch);
        state.recent.retain(|(id, _)| id != batch);
        state.recent.push((batch.clone(), now));
        let horizon = now.saturating_sub(ms(RETENTION));
        state.recent.retain(|(_, at)| *at > horizon);
    }
}

fn insert_run(state: &mut State, run: &ParkedRun, signal: Option<&str>) {
    let record = RunRecord {
        q: run.queue.clone(),
        id: run.message_id.to_string(),
        message_type: run.message_type.clone(),
        w: signal.map(str::to_owned),
    };
    state.runs.insert(
        run.token.clone(),
        Run {
            record,
            envelope: run.envelope.clone(),
            due_ms: run.due_ms,
        },
    );
    state.due.insert((run.due_ms, run.token.clone()));
}
