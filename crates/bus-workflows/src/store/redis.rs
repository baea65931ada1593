//! [`RedisWorkflowStore`]: the workflow store on Redis, one script per step
//! (docs/redis-layout.md, "Workflows").

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{Receipt, Source};
use bus_redis::admin::Admin;
use bus_redis::{LuaScript, RedisTransport};
use bytes::Bytes;
use fred::prelude::{Client, KeysInterface, SortedSetsInterface};
use fred::types::Value;

use super::records::{message_id, parent, receipt_tag, MarkJson, RunRecord};
use super::{
    BatchOutcome, BatchSpec, BatchState, BatchStatus, Callback, CallbackStatus, DeadMember, DueRun,
    Fired, Handoff, Inspection, Mark, MemberResult, Outcome, ParkedInfo, ParkedKind, ParkedRun,
    Presence, PresenceCheck, Settle, WaitOutcome, WorkflowStore, OUTCOME_KEEP, RETENTION,
};
use crate::ids::{BatchId, CallbackKind, ChildPolicy, MemberRef};
use crate::keys::{BatchKeys, SharedKeys};
use crate::scripts::*;
use crate::{Error, Result};

/// Workflow state in Redis, beside the transport's queues and under its key prefix:
/// each batch under its own hash tag (`{wf:<batch>}`), the parked runs and the index of
/// batches under `{wf}`, so that every script touches one cluster slot.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use bus_redis::{RedisConfig, RedisTransport};
/// use bus_workflows::{RedisWorkflowStore, Workflows};
///
/// let transport = RedisTransport::connect(&RedisConfig::from_url("redis://127.0.0.1")?).await?;
/// let workflows = Workflows::new(RedisWorkflowStore::for_transport(&transport));
/// # let _ = workflows; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisWorkflowStore {
    client: Client,
    prefix: String,
    shared: SharedKeys,
    presence: Option<RedisPresence>,
}

impl fmt::Debug for RedisWorkflowStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisWorkflowStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Asks the transport's layout where a member is (bus-redis's `Admin::presence`).
#[derive(Clone, Debug)]
struct RedisPresence(Admin);

#[async_trait]
impl PresenceCheck for RedisPresence {
    async fn presence(&self, source: &Source, receipt: &Receipt) -> Result<Presence> {
        use bus_redis::admin::Presence as P;
        Ok(match self.0.presence(source, receipt).await? {
            P::Held => Presence::Held,
            P::Stored => Presence::Stored,
            P::Dead => Presence::Dead,
            _ => Presence::Gone,
        })
    }
}

impl RedisWorkflowStore {
    /// On the transport's connection and under its key prefix, able to ask it where a
    /// member is (what resolves a settle whose confirmation a crash lost).
    pub fn for_transport(transport: &RedisTransport) -> Self {
        let mut store =
            RedisWorkflowStore::new(transport.client().clone(), transport.config().key_prefix());
        store.presence = Some(RedisPresence(Admin::new(transport.clone())));
        store
    }

    /// On a connected client, under `prefix` (the transport's). Without the transport it
    /// cannot ask where a member is: prefer [`RedisWorkflowStore::for_transport`].
    pub fn new(client: Client, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        RedisWorkflowStore {
            client,
            shared: SharedKeys::new(&prefix),
            prefix,
            presence: None,
        }
    }

    /// The key prefix in use.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    fn keys(&self, batch: &BatchId) -> BatchKeys {
        BatchKeys::new(&self.prefix, batch)
    }

    async fn array(
        &self,
        script: &LuaScript,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Vec<Value>> {
        Ok(script.run_array(&self.client, keys, args).await?)
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn text(value: &Value) -> String {
    value.as_string().unwrap_or_default()
}

fn bytes(value: Value) -> Option<Bytes> {
    match value {
        Value::Bytes(b) => Some(b),
        Value::String(s) => Some(s.into_inner()),
        _ => None,
    }
}

/// Callbacks as the scripts return them: kind, queue, message id, envelope.
fn callbacks(values: Vec<Value>) -> Result<Vec<Callback>> {
    let mut out = Vec::with_capacity(values.len() / 4);
    let mut items = values.into_iter();
    while let (Some(kind), Some(queue), Some(id), Some(envelope)) =
        (items.next(), items.next(), items.next(), items.next())
    {
        out.push(Callback::new(
            CallbackKind::parse(&text(&kind))?,
            text(&queue),
            message_id(&text(&id)),
            bytes(envelope).unwrap_or_default(),
        ));
    }
    Ok(out)
}

/// What fire() returns: whether the batch finished, then its callbacks.
fn fired(mut values: Vec<Value>) -> Result<Fired> {
    if values.is_empty() {
        return Ok(Fired::default());
    }
    let finished = values.remove(0).as_i64() == Some(1);
    Ok(Fired {
        callbacks: callbacks(values)?,
        finished,
    })
}

/// A reply that is -1 when the batch does not exist.
fn existing(batch: &BatchId, reply: &Value) -> Result<()> {
    if reply.as_i64() == Some(-1) {
        return Err(Error::NotFound {
            batch: batch.clone(),
        });
    }
    Ok(())
}

fn handoff(batch: &BatchId, reply: Vec<Value>) -> Result<Handoff> {
    let status = reply.first().map(text).unwrap_or_default();
    Ok(match status.as_str() {
        "PENDING" => Handoff::Pending,
        "DONE" => Handoff::Done,
        "PARENT" => {
            let member: MemberRef = reply.get(1).map(text).unwrap_or_default().parse()?;
            let failed = reply.get(2).map(text).filter(|f| !f.is_empty());
            Handoff::Parent { member, failed }
        }
        _ => {
            return Err(Error::NotFound {
                batch: batch.clone(),
            })
        }
    })
}

#[async_trait]
impl WorkflowStore for RedisWorkflowStore {
    async fn open(&self, spec: &BatchSpec) -> Result<bool> {
        // Listed first: a batch that exists is always found by the sweeper (one listed
        // that never opened is dropped by it).
        let () = self
            .client
            .zadd(
                &self.shared.open,
                Some(fred::types::SetOptions::NX),
                None,
                false,
                false,
                (0.0, spec.id.as_str()),
            )
            .await?;
        let keys = self.keys(&spec.id);
        let mut args: Vec<Value> = vec![
            spec.policy.map_or("", ChildPolicy::as_str).into(),
            spec.parent
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default()
                .into(),
        ];
        for c in &spec.callbacks {
            args.extend([
                c.kind.as_str().into(),
                c.queue.as_str().into(),
                c.id.as_str().into(),
                Value::Bytes(c.envelope.clone()),
            ]);
        }
        let opened: i64 = BATCH_OPEN
            .run_int(&self.client, vec![keys.batch, keys.callbacks], args)
            .await?;
        Ok(opened == 1)
    }

    async fn add(
        &self,
        batch: &BatchId,
        token: &str,
        count: u64,
        adder: Option<u64>,
    ) -> Result<u64> {
        let keys = self.keys(batch);
        let adder = adder.and_then(|a| i64::try_from(a).ok()).unwrap_or(-1);
        let reply = self
            .array(
                &BATCH_ADD,
                vec![keys.batch, keys.adds, keys.done],
                vec![
                    token.into(),
                    i64::try_from(count).unwrap_or(i64::MAX).into(),
                    adder.into(),
                ],
            )
            .await?;
        let batch = batch.clone();
        match reply.first().map(text).as_deref() {
            Some("OK") => Ok(reply.get(1).and_then(Value::as_u64).unwrap_or(0)),
            Some("CLOSED") => Err(Error::Closed { batch }),
            Some("FINISHED") => Err(Error::Finished { batch }),
            _ => Err(Error::NotFound { batch }),
        }
    }

    async fn defer(&self, member: &MemberRef, child: &BatchId) -> Result<bool> {
        let keys = self.keys(&member.batch);
        let reply = BATCH_DEFER
            .call(
                &self.client,
                vec![keys.batch, keys.done, keys.defer],
                vec![
                    i64::try_from(member.index).unwrap_or(i64::MAX).into(),
                    child.as_str().into(),
                ],
            )
            .await?;
        existing(&member.batch, &reply)?;
        Ok(reply.as_i64() == Some(1))
    }

    async fn close(&self, batch: &BatchId) -> Result<Fired> {
        let keys = self.keys(batch);
        let reply = BATCH_CLOSE
            .call(&self.client, vec![keys.batch, keys.callbacks], vec![])
            .await?;
        existing(batch, &reply)?;
        let fired = fired(BATCH_CLOSE.array(reply)?)?;
        // Listed again: a sweep that ran between the listing and the opening of the batch
        // may have dropped it from the open ones.
        let () = self
            .client
            .zadd(
                &self.shared.open,
                Some(fred::types::SetOptions::NX),
                None,
                false,
                false,
                (0.0, batch.as_str()),
            )
            .await?;
        Ok(fired)
    }

    async fn mark(&self, batch: &BatchId, marks: &[Mark]) -> Result<()> {
        let keys = self.keys(batch);
        let mut args: Vec<Value> = Vec::with_capacity(marks.len() * 3);
        for mark in marks {
            let (word, result) = match &mark.outcome {
                Outcome::Succeeded { result } => ("ok", result.clone().unwrap_or_default()),
                Outcome::Dead { .. } => ("dead", Bytes::new()),
            };
            let json = serde_json::to_string(&MarkJson::of(mark, bus_core::transport::now_ms()))?;
            args.extend([
                mark.index.to_string().into(),
                format!("{word} {json}").into(),
                Value::Bytes(result),
            ]);
        }
        let reply = BATCH_MARK
            .call(
                &self.client,
                vec![keys.batch, keys.done, keys.settling],
                args,
            )
            .await?;
        existing(batch, &reply)
    }

    async fn settle(&self, batch: &BatchId, settles: &[Settle]) -> Result<Fired> {
        let keys = self.keys(batch);
        let mut args: Vec<Value> = Vec::with_capacity(settles.len() * 3);
        for settle in settles {
            let (op, index, detail) = match settle {
                Settle::Confirm { index, receipt } => (
                    "confirm",
                    *index,
                    receipt.as_ref().map(receipt_tag).unwrap_or_default(),
                ),
                Settle::Drop { index, receipt } => ("drop", *index, receipt_tag(receipt)),
                Settle::Child { index, failed } => {
                    ("child", *index, failed.clone().unwrap_or_default())
                }
            };
            args.extend([op.into(), index.to_string().into(), detail.into()]);
        }
        let all = vec![
            keys.batch,
            keys.done,
            keys.settling,
            keys.dead,
            keys.results,
            keys.defer,
            keys.callbacks,
        ];
        let reply = BATCH_SETTLE.call(&self.client, all, args).await?;
        existing(batch, &reply)?;
        fired(BATCH_SETTLE.array(reply)?)
    }

    async fn sent(&self, batch: &BatchId, kinds: &[CallbackKind]) -> Result<Handoff> {
        let mut args: Vec<Value> = vec![ms(RETENTION).into()];
        args.extend(kinds.iter().map(|k| Value::from(k.as_str())));
        let reply = self
            .array(&BATCH_SENT, self.keys(batch).all(), args)
            .await?;
        let handoff = handoff(batch, reply)?;
        if handoff == Handoff::Done {
            self.unlist(batch).await?;
        }
        Ok(handoff)
    }

    async fn done(&self, batch: &BatchId) -> Result<()> {
        BATCH_DONE
            .run_int(
                &self.client,
                self.keys(batch).all(),
                vec![ms(RETENTION).into()],
            )
            .await?;
        self.unlist(batch).await
    }

    async fn status(&self, batch: &BatchId, dead_limit: usize) -> Result<Option<BatchStatus>> {
        let keys = self.keys(batch);
        let reply = self
            .array(
                &BATCH_STATUS,
                vec![keys.batch, keys.dead, keys.defer],
                vec![i64::try_from(dead_limit).unwrap_or(i64::MAX).into()],
            )
            .await?;
        if reply.is_empty() {
            return Ok(None);
        }
        status_of(batch, reply).map(Some)
    }

    async fn results(&self, batch: &BatchId, from: u64, count: usize) -> Result<Vec<MemberResult>> {
        let keys = self.keys(batch);
        let reply = BATCH_RESULTS
            .call(
                &self.client,
                vec![keys.batch, keys.done, keys.results, keys.dead],
                vec![
                    i64::try_from(from).unwrap_or(i64::MAX).into(),
                    i64::try_from(count.min(1000)).unwrap_or(1000).into(),
                ],
            )
            .await?;
        existing(batch, &reply)?;
        let mut out = Vec::new();
        let mut items = BATCH_RESULTS.array(reply)?.into_iter();
        let mut index = from;
        while let (Some(done), Some(result), Some(dead)) =
            (items.next(), items.next(), items.next())
        {
            out.push(match (done.as_i64(), bytes(dead)) {
                (_, Some(record)) => MemberResult::Dead(dead_member(index, &record)?),
                (Some(1), None) => MemberResult::Succeeded(bytes(result)),
                _ => MemberResult::Pending,
            });
            index += 1;
        }
        Ok(out)
    }

    async fn list(&self, limit: usize) -> Result<(Vec<BatchId>, Vec<BatchId>)> {
        let stop = i64::try_from(limit).unwrap_or(i64::MAX) - 1;
        let open: Vec<String> = self
            .client
            .zrange(&self.shared.open, 0, stop, None, false, None, false)
            .await?;
        let recent: Vec<String> = self
            .client
            .zrange(&self.shared.recent, 0, stop, None, true, None, false)
            .await?;
        let ids = |v: Vec<String>| v.iter().filter_map(|s| BatchId::parse(s).ok()).collect();
        Ok((ids(open), ids(recent)))
    }

    async fn due_for_sweep(&self, limit: usize, every: Duration) -> Result<Vec<BatchId>> {
        let reply = INDEX_SWEEP
            .run_array(
                &self.client,
                vec![self.shared.open.clone()],
                vec![
                    i64::try_from(limit).unwrap_or(i64::MAX).into(),
                    ms(every).into(),
                ],
            )
            .await?;
        Ok(reply
            .iter()
            .filter_map(|v| BatchId::parse(&text(v)).ok())
            .collect())
    }

    async fn inspect(&self, batch: &BatchId, stale: Duration) -> Result<Option<Inspection>> {
        let keys = self.keys(batch);
        let reply = self
            .array(
                &BATCH_INSPECT,
                vec![keys.batch, keys.settling, keys.callbacks],
                vec![ms(stale).into(), 200.into()],
            )
            .await?;
        if reply.is_empty() {
            return Ok(None);
        }
        inspection(reply).map(Some)
    }

    async fn unlist(&self, batch: &BatchId) -> Result<()> {
        INDEX_DONE
            .run_int(
                &self.client,
                vec![self.shared.open.clone(), self.shared.recent.clone()],
                vec![batch.as_str().into(), ms(RETENTION).into()],
            )
            .await?;
        Ok(())
    }

    fn presence(&self) -> Option<&dyn PresenceCheck> {
        self.presence.as_ref().map(|p| p as &dyn PresenceCheck)
    }

    async fn park(&self, run: &ParkedRun) -> Result<bool> {
        let record = serde_json::to_string(&run_record(run, None))?;
        let parked: i64 = RUN_PARK
            .run_int(&self.client, self.run_keys(), run_args(run, record))
            .await?;
        Ok(parked == 1)
    }

    async fn wait(&self, run: &ParkedRun, signal: &str) -> Result<bool> {
        let record = serde_json::to_string(&run_record(run, Some(signal)))?;
        let mut keys = self.run_keys();
        keys.extend([self.shared.signal(signal), self.shared.waiters(signal)]);
        let mut args = run_args(run, record);
        args.extend([
            self.shared.outcome_prefix.as_str().into(),
            ms(OUTCOME_KEEP).into(),
        ]);
        let parked: i64 = RUN_WAIT.run_int(&self.client, keys, args).await?;
        Ok(parked > 0)
    }

    async fn signal(&self, signal: &str, payload: &Bytes, keep: Duration) -> Result<usize> {
        let reply = self
            .array(
                &RUN_SIGNAL,
                vec![
                    self.shared.signal(signal),
                    self.shared.waiters(signal),
                    self.shared.due.clone(),
                ],
                vec![
                    Value::Bytes(payload.clone()),
                    ms(keep).into(),
                    self.shared.outcome_prefix.as_str().into(),
                    ms(OUTCOME_KEEP).into(),
                ],
            )
            .await?;
        Ok(reply.get(1).and_then(Value::as_u64).unwrap_or(0) as usize)
    }

    async fn take_due(&self, limit: usize, claim: Duration) -> Result<Vec<DueRun>> {
        let reply = self
            .array(
                &RUN_TAKE,
                self.run_keys(),
                vec![
                    i64::try_from(limit).unwrap_or(i64::MAX).into(),
                    ms(claim).into(),
                    self.shared.outcome_prefix.as_str().into(),
                    self.shared.waiters_prefix.as_str().into(),
                    ms(OUTCOME_KEEP).into(),
                ],
            )
            .await?;
        let mut out = Vec::new();
        let mut items = reply.into_iter();
        while let (Some(token), Some(record), Some(envelope)) =
            (items.next(), items.next(), items.next())
        {
            let record: RunRecord = serde_json::from_str(&text(&record))?;
            out.push(DueRun {
                token: text(&token),
                queue: record.q,
                message_id: message_id(&record.id),
                envelope: bytes(envelope).unwrap_or_default(),
            });
        }
        Ok(out)
    }

    async fn relayed(&self, tokens: &[String]) -> Result<()> {
        if tokens.is_empty() {
            return Ok(());
        }
        let args = tokens.iter().map(|t| Value::from(t.as_str())).collect();
        RUN_RELAYED
            .run_int(&self.client, self.run_keys(), args)
            .await?;
        Ok(())
    }

    async fn outcome(&self, token: &str) -> Result<Option<WaitOutcome>> {
        let stored: Option<Bytes> = self.client.get(self.shared.outcome(token)).await?;
        Ok(stored.and_then(|b| match b.first() {
            Some(b's') => Some(WaitOutcome::Signalled(b.slice(1..))),
            Some(b't') => Some(WaitOutcome::TimedOut),
            _ => None,
        }))
    }

    async fn next_due(&self) -> Result<Option<u64>> {
        let first: Vec<(String, f64)> = self
            .client
            .zrange(&self.shared.due, 0, 0, None, false, None, true)
            .await?;
        Ok(first.first().map(|(_, at)| *at as u64))
    }

    async fn parked(&self, limit: usize) -> Result<Vec<ParkedInfo>> {
        let reply = self
            .array(
                &RUN_LIST,
                vec![self.shared.due.clone(), self.shared.runs.clone()],
                vec![
                    i64::try_from(limit).unwrap_or(i64::MAX).into(),
                    self.shared.outcome_prefix.as_str().into(),
                ],
            )
            .await?;
        let mut out = Vec::new();
        let mut items = reply.into_iter();
        while let (Some(token), Some(due), Some(record), Some(got)) =
            (items.next(), items.next(), items.next(), items.next())
        {
            let Ok(record) = serde_json::from_str::<RunRecord>(&text(&record)) else {
                continue;
            };
            let kind = match record.w {
                None => ParkedKind::Sleep,
                Some(signal) => ParkedKind::Wait {
                    signal,
                    signalled: got.as_i64() == Some(1) && {
                        matches!(
                            self.outcome(&text(&token)).await?,
                            Some(WaitOutcome::Signalled(_))
                        )
                    },
                },
            };
            out.push(ParkedInfo {
                token: text(&token),
                queue: record.q,
                message_id: record.id,
                message_type: record.message_type,
                kind,
                due_ms: text(&due).parse::<f64>().unwrap_or(0.0) as u64,
            });
        }
        Ok(out)
    }
}

impl RedisWorkflowStore {
    fn run_keys(&self) -> Vec<String> {
        vec![
            self.shared.due.clone(),
            self.shared.runs.clone(),
            self.shared.envs.clone(),
        ]
    }
}

fn run_record(run: &ParkedRun, signal: Option<&str>) -> RunRecord {
    RunRecord {
        q: run.queue.clone(),
        id: run.message_id.to_string(),
        message_type: run.message_type.clone(),
        w: signal.map(str::to_owned),
    }
}

fn run_args(run: &ParkedRun, record: String) -> Vec<Value> {
    vec![
        run.token.as_str().into(),
        i64::try_from(run.due_ms).unwrap_or(i64::MAX).into(),
        record.into(),
        Value::Bytes(run.envelope.clone()),
    ]
}

fn dead_member(index: u64, record: &[u8]) -> Result<DeadMember> {
    let mark: MarkJson = serde_json::from_slice(record)?;
    Ok(mark.dead_member(index))
}

/// A batch's status from batch_status's reply.
fn status_of(id: &BatchId, reply: Vec<Value>) -> Result<BatchStatus> {
    let mut parts = reply.into_iter();
    let pairs = |v: Option<Value>| -> Vec<(String, Value)> {
        let mut items = match v {
            Some(Value::Array(items)) => items.into_iter(),
            _ => Vec::new().into_iter(),
        };
        let mut out = Vec::new();
        while let (Some(k), Some(v)) = (items.next(), items.next()) {
            out.push((text(&k), v));
        }
        out
    };
    let fields: std::collections::HashMap<String, Value> =
        pairs(parts.next()).into_iter().collect();
    let field = |name: &str| fields.get(name).map(text).unwrap_or_default();
    let number = |name: &str| field(name).parse::<u64>().unwrap_or(0);
    let mut dead_members = pairs(parts.next())
        .into_iter()
        .map(|(i, record)| {
            let record = bytes(record).unwrap_or_default();
            dead_member(i.parse().unwrap_or(0), &record)
        })
        .collect::<Result<Vec<_>>>()?;
    dead_members.sort_by_key(|d| d.index);
    let mut waiting_on = pairs(parts.next())
        .into_iter()
        .filter_map(|(i, child)| Some((i.parse().ok()?, BatchId::parse(&text(&child)).ok()?)))
        .collect::<Vec<_>>();
    waiting_on.sort();
    let callbacks = CallbackKind::ALL
        .into_iter()
        .filter_map(|kind| {
            let staged = field(&format!("cb:{kind}"));
            let (queue, message_id) = staged.split_once(' ')?;
            Some(CallbackStatus {
                kind,
                queue: queue.to_owned(),
                message_id: message_id.to_owned(),
                fired: fields.contains_key(&format!("fired:{kind}")),
                sent: fields.contains_key(&format!("sent:{kind}")),
            })
        })
        .collect();
    Ok(BatchStatus {
        id: id.clone(),
        state: BatchState::parse(&field("state"))?,
        outcome: BatchOutcome::parse(&field("outcome"))?,
        total: number("total"),
        succeeded: number("ok"),
        dead: number("dead"),
        closed: field("closed") == "1",
        created_ms: number("created"),
        fired_ms: field("fired").parse().ok(),
        parent: parent(&field("parent"))?.map(|p| p.to_string()),
        policy: ChildPolicy::parse(&field("policy"))?,
        callbacks,
        dead_members,
        waiting_on,
    })
}

/// An inspection from batch_inspect's reply.
fn inspection(reply: Vec<Value>) -> Result<Inspection> {
    let mut parts = reply.into_iter();
    let state = BatchState::parse(&parts.next().map(|v| text(&v)).unwrap_or_default())?;
    let parent = parent(&parts.next().map(|v| text(&v)).unwrap_or_default())?;
    let failure = parts.next().map(|v| text(&v)).filter(|f| !f.is_empty());
    let list = |v: Option<Value>| match v {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    };
    let unsent = callbacks(list(parts.next()))?;
    let mut stale = Vec::new();
    let mut items = list(parts.next()).into_iter();
    while let (Some(index), Some(mark)) = (items.next(), items.next()) {
        let mark = text(&mark);
        let json = mark.split_once(' ').map_or("", |(_, json)| json);
        let mark: MarkJson = serde_json::from_str(json)?;
        stale.push(mark.stale(text(&index).parse().unwrap_or(0))?);
    }
    let handoff = match (state, parent) {
        (BatchState::Settled, Some(member)) => Handoff::Parent {
            member,
            failed: failure,
        },
        (BatchState::Done, _) => Handoff::Done,
        _ => Handoff::Pending,
    };
    Ok(Inspection {
        state,
        unsent,
        handoff,
        stale,
    })
}
