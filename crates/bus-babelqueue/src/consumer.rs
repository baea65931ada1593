//! One consumer of one BabelQueue queue: every transition is one script or one command.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use fred::prelude::{Client, ClientLike, SortedSetsInterface};
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::client::{available_at, now_secs, Options};
use crate::dead_letter::{poison_record, DeadLetterBlock};
use crate::frame::{frame, unframe, Headers};
use crate::keys::{Layout, QueueKeys};
use crate::{scripts, Envelope, Error, Poison, Result};

const LEGACY: u8 = b'L';
const LARAVEL: u8 = b'R';

/// Identifies one reservation: legacy, its token, the stored value and its recovery
/// count; Laravel, the reserved member (exactly as the reserve script wrote it) and the
/// job. Opaque bytes, so it can travel as a bus receipt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Handle(Bytes);

/// Tag, length of the first part, recoveries.
const HEAD: usize = 9;

impl Handle {
    fn new(tag: u8, first: &[u8], second: &[u8], recoveries: u32) -> Self {
        let mut b = BytesMut::with_capacity(HEAD + first.len() + second.len());
        b.put_u8(tag);
        b.put_u32(u32::try_from(first.len()).unwrap_or(u32::MAX));
        b.put_u32(recoveries);
        b.put_slice(first);
        b.put_slice(second);
        Handle(b.freeze())
    }

    /// The handle as bytes.
    pub fn to_bytes(&self) -> Bytes {
        self.0.clone()
    }

    /// A handle from [`Handle::to_bytes`]; `None` for other bytes.
    pub fn from_bytes(bytes: Bytes) -> Option<Self> {
        let (tag, len) = (*bytes.first()?, bytes.get(1..5)?);
        let len = u32::from_be_bytes(len.try_into().ok()?) as usize;
        (matches!(tag, LEGACY | LARAVEL) && bytes.len() >= HEAD + len).then_some(Handle(bytes))
    }

    fn parts(&self) -> (u8, Bytes, Bytes) {
        let len = u32::from_be_bytes([self.0[1], self.0[2], self.0[3], self.0[4]]) as usize;
        (
            self.0[0],
            self.0.slice(HEAD..HEAD + len),
            self.0.slice(HEAD + len..),
        )
    }

    /// Legacy: how often a sweep recovered the element (a consumer stopped mid-message).
    pub(crate) fn recoveries(&self) -> u32 {
        u32::from_be_bytes([self.0[5], self.0[6], self.0[7], self.0[8]])
    }

    /// Legacy: the deadline member `<token>:<raw>`. Laravel: the reserved member.
    fn member(&self) -> Bytes {
        let (tag, first, second) = self.parts();
        if tag == LEGACY {
            let mut m = BytesMut::with_capacity(first.len() + 1 + second.len());
            m.put_slice(&first);
            m.put_u8(b':');
            m.put_slice(&second);
            m.freeze()
        } else {
            first
        }
    }

    /// Legacy: the stored value. Laravel: the job as it was popped. A view of the
    /// handle's buffer, not a copy: the element the bus delivers.
    pub(crate) fn stored(&self) -> Bytes {
        self.parts().2
    }

    /// Laravel: the reserve script could not count the attempt (it reserved the job
    /// unchanged: `attempts` missing, null or not a number), so the job is poison there.
    pub(crate) fn uncountable(&self) -> bool {
        let (tag, first, second) = self.parts();
        tag == LARAVEL && first == second
    }
}

/// The deliveries so far, this one included, from the failed ones (`attempts`).
pub(crate) fn delivery_count(attempts: i64) -> u32 {
    u32::try_from(attempts.saturating_add(1).max(1)).unwrap_or(u32::MAX)
}

/// What a reserved body turned out to be: there is no third case.
#[derive(Debug, Clone)]
pub enum Content {
    /// A valid envelope.
    Envelope(Envelope),
    /// A body that can never be handled: dead-letter it at once.
    Poison(Poison),
}

/// One reserved message.
#[derive(Debug, Clone)]
pub struct Reserved {
    handle: Handle,
    body: Bytes,
    headers: Headers,
    content: Content,
}

impl Reserved {
    /// The message again from its handle (the handle carries the stored bytes).
    pub fn from_handle(handle: Handle) -> Self {
        let (tag, first, second) = handle.parts();
        if tag == LEGACY {
            let (body, headers) = unframe(&second);
            let content = match Envelope::decode(&body) {
                Ok(env) => Content::Envelope(env),
                Err(poison) => Content::Poison(poison),
            };
            Reserved {
                handle,
                body: body.into(),
                headers,
                content,
            }
        } else {
            let content = match Envelope::decode(&second) {
                Ok(_) if first == second => Content::Poison(Poison::NotCountable),
                Ok(env) => Content::Envelope(env),
                Err(poison) => Content::Poison(poison),
            };
            Reserved {
                handle,
                body: second,
                headers: Headers::new(),
                content,
            }
        }
    }

    /// The reservation's handle.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
    /// The body (unframed): the envelope's bytes, or the poison as stored.
    pub fn body(&self) -> &Bytes {
        &self.body
    }
    /// The out-of-band headers (legacy frames only).
    pub fn headers(&self) -> &Headers {
        &self.headers
    }
    /// The envelope, or why the body is poison.
    pub fn content(&self) -> &Content {
        &self.content
    }
    /// Legacy: how often our sweeps put this element back after its consumer stopped
    /// mid-message (a crash), counted out of band since the element's bytes (and so its
    /// `attempts`) stay unchanged. Laravel: 0, its recoveries count in `attempts`.
    pub fn recoveries(&self) -> u32 {
        self.handle.recoveries()
    }
    /// The failed deliveries so far: the envelope's `attempts` plus the recoveries (0 for
    /// poison, as BabelQueue's poison records say).
    pub fn attempts(&self) -> i64 {
        self.envelope().map_or(0, |env| {
            env.attempts().saturating_add(i64::from(self.recoveries()))
        })
    }
    /// The deliveries so far, this one included: [`Reserved::attempts`] + 1.
    pub fn delivery_count(&self) -> u32 {
        delivery_count(self.attempts())
    }
    /// The envelope, unless poison.
    pub fn envelope(&self) -> Option<&Envelope> {
        match &self.content {
            Content::Envelope(env) => Some(env),
            Content::Poison(_) => None,
        }
    }
}

/// A consumer of one queue (see [`crate::BabelQueue::consumer`]).
pub struct QueueConsumer {
    client: Client,
    waiter: Option<Client>,
    keys: QueueKeys,
    options: Arc<Options>,
}

impl std::fmt::Debug for QueueConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueConsumer")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

fn bytes_of(v: Value) -> Option<Bytes> {
    v.into_bytes()
}

impl QueueConsumer {
    pub(crate) fn new(
        client: Client,
        waiter: Option<Client>,
        keys: QueueKeys,
        options: Arc<Options>,
    ) -> Self {
        QueueConsumer {
            client,
            waiter,
            keys,
            options,
        }
    }

    /// The queue's keys.
    pub fn keys(&self) -> &QueueKeys {
        &self.keys
    }

    fn legacy(&self) -> bool {
        matches!(self.options.layout, Layout::Legacy)
    }

    fn deadline_score(&self) -> Value {
        match self.options.retry_after_secs() {
            None => Value::from("+inf"),
            Some(s) => Value::from(now_secs().saturating_add(i64::try_from(s).unwrap_or(i64::MAX))),
        }
    }

    /// Reserves up to `max` messages (sweeping lapsed reservations and, on Laravel, due
    /// delayed ones back first). Poison comes back as [`Content::Poison`]: dead-letter it.
    pub async fn reserve(&self, max: usize) -> Result<Vec<Reserved>> {
        Ok(self.reserve_with_hint(max).await?.0)
    }

    /// Like [`QueueConsumer::reserve`]; also, when nothing was ready on Laravel, the epoch
    /// second the next delayed message is due.
    pub(crate) async fn reserve_with_hint(
        &self,
        max: usize,
    ) -> Result<(Vec<Reserved>, Option<i64>)> {
        let (handles, due) = self.reserve_handles(max).await?;
        Ok((
            handles.into_iter().map(Reserved::from_handle).collect(),
            due,
        ))
    }

    /// Like [`QueueConsumer::reserve_with_hint`], the reservations unread: the bus
    /// adapter reads each element once, with its wire format.
    pub(crate) async fn reserve_handles(&self, max: usize) -> Result<(Vec<Handle>, Option<i64>)> {
        let max = i64::try_from(max.max(1)).unwrap_or(i64::MAX);
        let now = Value::from(now_secs());
        let batch = Value::from(i64::from(self.options.batch()));
        let k = &self.keys;
        if self.legacy() {
            let prefix = format!("{:024x}", rand::random::<u128>() >> 32);
            let args = vec![
                now,
                batch,
                self.deadline_score(),
                Value::from(max),
                Value::from(prefix),
            ];
            let reply = scripts::run(
                &scripts::LEGACY_RESERVE,
                &self.client,
                self.legacy_keys(),
                args,
            )
            .await?;
            let items = into_array(reply);
            let mut out = Vec::with_capacity(items.len() / 3);
            let mut it = items.into_iter();
            while let (Some(token), Some(raw), Some(recovered)) = (it.next(), it.next(), it.next())
            {
                let recovered = recovered.as_i64().and_then(|n| u32::try_from(n).ok());
                let (Some(token), Some(raw), Some(recovered)) =
                    (bytes_of(token), bytes_of(raw), recovered)
                else {
                    return Err(scripts::unexpected(
                        &scripts::LEGACY_RESERVE,
                        &Value::from("malformed reservation"),
                    ));
                };
                out.push(Handle::new(LEGACY, &token, &raw, recovered));
            }
            Ok((out, None))
        } else {
            let recover = if self.options.retry_after_secs().is_some() {
                "1"
            } else {
                "0"
            };
            let args = vec![
                now,
                batch,
                self.deadline_score(),
                Value::from(max),
                Value::from(recover),
            ];
            let keys = vec![
                k.ready.clone(),
                k.in_flight.clone(),
                k.notify.clone(),
                k.timers.clone(),
            ];
            let reply = scripts::run(&scripts::LARAVEL_RESERVE, &self.client, keys, args).await?;
            let mut it = into_array(reply).into_iter();
            let due = it.next().and_then(|v| v.as_i64()).filter(|d| *d >= 0);
            let mut out = Vec::new();
            while let (Some(job), Some(reserved)) = (it.next(), it.next()) {
                let (Some(job), Some(reserved)) = (bytes_of(job), bytes_of(reserved)) else {
                    return Err(scripts::unexpected(
                        &scripts::LARAVEL_RESERVE,
                        &Value::from("malformed reservation"),
                    ));
                };
                out.push(Handle::new(LARAVEL, &reserved, &job, 0));
            }
            Ok((out, due))
        }
    }

    /// Waits up to `timeout` for work: Laravel blocks on `:notify` (its own connection);
    /// the legacy layout has no wake-up list, so this only sleeps.
    pub async fn wait(&self, timeout: Duration) -> Result<()> {
        match &self.waiter {
            Some(waiter) => {
                let secs = format!("{:.3}", timeout.as_secs_f64().max(0.001));
                let cmd = CustomCommand::new_static("BLPOP", ClusterHash::FirstKey, true);
                let args = vec![Value::from(self.keys.notify.as_str()), Value::from(secs)];
                let _: Value = waiter.custom(cmd, args).await?;
            }
            None => tokio::time::sleep(timeout).await,
        }
        Ok(())
    }

    /// Removes handled messages (legacy: gated on each reservation's own token; Laravel:
    /// `ZREM` of the reserved members exactly as reserved, one command). Returns how
    /// many were still reserved; the others had lapsed and were recovered.
    pub async fn ack(&self, handles: &[Handle]) -> Result<usize> {
        if handles.is_empty() {
            return Ok(0);
        }
        if self.legacy() {
            let flags = self
                .settle("ack", handles.iter().map(|h| (h, Bytes::new())), None)
                .await?;
            return Ok(flags.into_iter().filter(|settled| *settled).count());
        }
        let members: Vec<Value> = handles.iter().map(|h| Value::Bytes(h.member())).collect();
        let removed: i64 = self.client.zrem(&self.keys.in_flight, members).await?;
        Ok(usize::try_from(removed).unwrap_or(0))
    }

    /// Legacy settle: one gated script for a batch.
    async fn settle(
        &self,
        mode: &'static str,
        items: impl Iterator<Item = (&Handle, Bytes)>,
        target: Option<&str>,
    ) -> Result<Vec<bool>> {
        let mut args = vec![Value::from(mode)];
        for (handle, body) in items {
            args.push(Value::Bytes(handle.member()));
            args.push(Value::Bytes(handle.stored()));
            args.push(Value::Bytes(body));
        }
        let k = &self.keys;
        let target = target.unwrap_or(&k.ready).to_owned();
        let keys = vec![
            k.in_flight.clone(),
            k.timers.clone(),
            target,
            k.recoveries.clone(),
        ];
        scripts::run_flags(&scripts::LEGACY_SETTLE, &self.client, keys, args).await
    }

    /// Extends reservations by `retry_after`; `false` where one was already lost.
    pub async fn renew(&self, handles: &[Handle]) -> Result<Vec<bool>> {
        if handles.is_empty() {
            return Ok(Vec::new());
        }
        let mut args = vec![self.deadline_score()];
        args.extend(handles.iter().map(|h| Value::Bytes(h.member())));
        let set = if self.legacy() {
            &self.keys.timers
        } else {
            &self.keys.in_flight
        };
        scripts::run_flags(&scripts::RENEW, &self.client, vec![set.clone()], args).await
    }

    /// Laravel: records that these reservations are last runs
    /// ([`OverLimit::RunOnce`](crate::OverLimit::RunOnce)), in one call; per handle
    /// `false` when its job is the member of a recorded last run that came back (the run
    /// stopped mid-message, so it must not run again). Only Laravel handles are given.
    pub(crate) async fn over_limit_runs(&self, handles: &[Handle]) -> Result<Vec<bool>> {
        if handles.is_empty() {
            return Ok(Vec::new());
        }
        let mut args = Vec::with_capacity(1 + handles.len() * 2);
        args.push(Value::from("mark"));
        for handle in handles {
            let (_, member, job) = handle.parts();
            args.push(Value::Bytes(job));
            args.push(Value::Bytes(member));
        }
        let keys = vec![self.keys.over_limit.clone()];
        scripts::run_flags(&scripts::LARAVEL_OVER_LIMIT, &self.client, keys, args).await
    }

    /// Laravel: forgets the records of last runs that were settled (their members never
    /// come back), so the hash holds only the runs in flight.
    pub(crate) async fn forget_last_runs(&self, handles: &[Handle]) -> Result<()> {
        if handles.is_empty() {
            return Ok(());
        }
        let mut args = Vec::with_capacity(1 + handles.len());
        args.push(Value::from("forget"));
        args.extend(handles.iter().map(|h| Value::Bytes(h.member())));
        let keys = vec![self.keys.over_limit.clone()];
        scripts::run_int(&scripts::LARAVEL_OVER_LIMIT, &self.client, keys, args).await?;
        Ok(())
    }

    /// The legacy reserve and recover scripts' KEYS.
    fn legacy_keys(&self) -> Vec<String> {
        let k = &self.keys;
        vec![
            k.ready.clone(),
            k.in_flight.clone(),
            k.timers.clone(),
            k.recoveries.clone(),
        ]
    }

    /// Hands a failed message back with `attempts + 1` (legacy: plus its recoveries, which
    /// become attempts in the element, as on Laravel): Laravel into `:delayed` after
    /// `delay` (whole seconds); legacy to the end of the list (it has no delayed set, so
    /// the delay is not honoured there, as in BabelQueue). `false`: the reservation was
    /// lost (swept or migrated back), nothing written.
    pub async fn retry(&self, reserved: &Reserved, delay: Duration) -> Result<bool> {
        let Some(envelope) = reserved.envelope() else {
            return Err(Error::Envelope(
                "a poison body is never retried; dead-letter it".into(),
            ));
        };
        let mut next = envelope.clone();
        next.set_attempts(reserved.attempts().saturating_add(1));
        let body = next.encode();
        if self.legacy() {
            let stored = frame(&body, reserved.headers());
            let flags = self
                .settle(
                    "tail",
                    std::iter::once((reserved.handle(), Bytes::from(stored))),
                    None,
                )
                .await?;
            return Ok(flags.first().copied().unwrap_or(false));
        }
        let k = &self.keys;
        let args = vec![
            Value::Bytes(reserved.handle().member()),
            Value::Bytes(body.into()),
            Value::from(available_at(delay)),
        ];
        let keys = vec![k.in_flight.clone(), k.timers.clone()];
        Ok(scripts::run_int(&scripts::LARAVEL_RELEASE, &self.client, keys, args).await? == 1)
    }

    /// Returns reservations that never started to the head of the ready list, unchanged
    /// (no attempt counted).
    pub async fn release(&self, handles: &[Handle]) -> Result<Vec<bool>> {
        if handles.is_empty() {
            return Ok(Vec::new());
        }
        if self.legacy() {
            return self
                .settle("head", handles.iter().map(|h| (h, h.stored())), None)
                .await;
        }
        let k = &self.keys;
        let mut args = Vec::with_capacity(handles.len() * 2);
        for h in handles {
            args.push(Value::Bytes(h.member()));
            args.push(Value::Bytes(h.stored()));
        }
        let keys = vec![k.in_flight.clone(), k.ready.clone(), k.notify.clone()];
        scripts::run_flags(&scripts::LARAVEL_RETURN, &self.client, keys, args).await
    }

    /// Moves the message to the queue's `.dlq` with the block: an envelope as the
    /// envelope plus `dead_letter`, poison as BabelQueue's poison record. Legacy records
    /// of framed messages stay framed, as BabelQueue writes them. `false`: the
    /// reservation was lost, nothing written.
    pub async fn dead_letter(&self, reserved: &Reserved, block: &DeadLetterBlock) -> Result<bool> {
        let record = match reserved.content() {
            Content::Envelope(env) => env.dead_lettered(block),
            Content::Poison(_) => poison_record(reserved.body(), block),
        };
        let k = &self.keys;
        if self.legacy() {
            let stored = frame(&record, reserved.headers());
            let flags = self
                .settle(
                    "tail",
                    std::iter::once((reserved.handle(), Bytes::from(stored))),
                    Some(&k.dlq),
                )
                .await?;
            return Ok(flags.first().copied().unwrap_or(false));
        }
        let args = vec![
            Value::Bytes(reserved.handle().member()),
            Value::Bytes(record.into()),
        ];
        let keys = vec![k.in_flight.clone(), k.dlq.clone(), k.dlq_notify.clone()];
        Ok(scripts::run_int(&scripts::LARAVEL_DEAD_LETTER, &self.client, keys, args).await? == 1)
    }

    /// Moves lapsed reservations (and, on Laravel, due delayed messages) back to the ready
    /// list, at most one sweep batch each; returns how many moved. Safe when several
    /// consumers run it at once: each entry moves once.
    pub async fn recover(&self) -> Result<i64> {
        let now = Value::from(now_secs());
        let batch = Value::from(i64::from(self.options.batch()));
        let k = &self.keys;
        if self.legacy() {
            return scripts::run_int(
                &scripts::LEGACY_RECOVER,
                &self.client,
                self.legacy_keys(),
                vec![now, batch],
            )
            .await;
        }
        let recover = if self.options.retry_after_secs().is_some() {
            "1"
        } else {
            "0"
        };
        let keys = vec![
            k.ready.clone(),
            k.in_flight.clone(),
            k.notify.clone(),
            k.timers.clone(),
        ];
        scripts::run_int(
            &scripts::LARAVEL_RECOVER,
            &self.client,
            keys,
            vec![now, batch, Value::from(recover)],
        )
        .await
    }

    /// Closes the consumer's own blocking connection, without waiting for it: a `BLPOP`
    /// whose caller gave up (the host stopped) still holds it until Redis answers, up to
    /// the wait's timeout, and `QUIT` would queue behind it, so an idle host's shutdown
    /// took up to a second. The connection closes when the block ends.
    pub async fn close(&self) -> Result<()> {
        if let Some(waiter) = &self.waiter {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                if let Err(e) = waiter.quit().await {
                    tracing::debug!(error = %e, "closing the wake-up connection failed");
                }
            });
        }
        Ok(())
    }
}

fn into_array(v: Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}
