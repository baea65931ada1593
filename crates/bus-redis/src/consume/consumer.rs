//! The consumer side: reserve, wait, ack, renew, retry, dead-letter, release, recover.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::records::ErrorRecord;
use bus_core::transport::{
    now_ms, Consumer, ConsumerExtras, ConsumerOptions, DeadLetterReason, Delivery, ErrorHistory,
    FleetBreaker, Held, Hold, Receipt, Received, Want,
};
use bus_core::Result;
use fred::prelude::{Client, ClientLike, HashesInterface, SortedSetsInterface};
use fred::types::{ClusterHash, CustomCommand, Resp3Frame, Value};
use fred::util::redis_keyslot;
use tokio_util::bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::consume::receipts::{
    bytes, int, merge, receipt_args, receipt_pair, unexpected, Split, LEASE_MAX,
};
use crate::keys::{QueueKeys, ScriptKeys};
use crate::scripts;
use crate::Error;

/// Longest an idle consumer blocks before returning empty (and promoting due messages).
const IDLE_WAIT_MS: i64 = 1_000;
/// Expired locks recovered per sweep; bounded so a sweep never blocks Redis for long.
const RECOVER_BATCH: i64 = 100;
const LOCK_EXPIRED: &str = "lock expired: the consumer stopped or lost its connection";
/// How often a consumer of a paused queue looks whether it was resumed (and one held back
/// by a fleet circuit breaker whether its probe closed it).
const PAUSED_POLL_MS: u64 = 250;
/// How often a consumer of a queue at its concurrency limit looks for a free slot (a
/// limit is a setting of the queue, so no ack of any client can be asked to wake us).
const FULL_POLL_MS: u64 = 50;

/// How long a consumer may be silent before its expired locks count as a crash: three
/// recovery intervals (every consumer calls recover once per interval, so a live one is
/// seen at least that often) plus a second for slow calls.
pub(crate) fn presence_window(recovery_interval: Duration) -> Duration {
    recovery_interval.saturating_mul(3) + Duration::from_secs(1)
}

/// What a reserve's `pending` field says (docs/wire-format.md, "The calls"): why it took
/// nothing (or, 6, that what it took is the fleet breaker's probe); `wait` is its wait hint
/// (ms), `taken` whether it took anything.
fn hold_of(pending: Option<i64>, wait: i64, taken: bool) -> Hold {
    let until = |wait: i64| now_ms().saturating_add(wait.max(0).unsigned_abs());
    match pending {
        Some(pending::SUSPECTS) => Hold::Isolation,
        Some(pending::PAUSED) => Hold::Paused,
        Some(pending::FULL) => Hold::Full,
        Some(pending::RATE) => Hold::RateLimited,
        Some(pending::BREAKER) => Hold::BreakerOpen {
            until_ms: until(wait),
        },
        Some(pending::PROBE) if taken => Hold::Probe,
        Some(pending::PROBE) => Hold::BreakerOpen { until_ms: now_ms() },
        _ => Hold::None,
    }
}

/// The `pending` codes of the reserve scripts, as `lua/flow.lua` names them
/// (`PENDING_SUSPECTS`, ...; a test below checks that line).
mod pending {
    pub(super) const SUSPECTS: i64 = 1;
    pub(super) const PAUSED: i64 = 2;
    pub(super) const FULL: i64 = 3;
    pub(super) const RATE: i64 = 4;
    pub(super) const BREAKER: i64 = 5;
    pub(super) const PROBE: i64 = 6;
}

/// How long a consumer held back waits before it looks again (the worker's next receive).
fn held_wait(hold: Hold, wait: i64) -> Option<Duration> {
    let ms = match hold {
        Hold::Paused => PAUSED_POLL_MS,
        Hold::Full => FULL_POLL_MS,
        Hold::RateLimited => wait.clamp(1, IDLE_WAIT_MS).unsigned_abs(),
        // A fleet circuit breaker: its cool-down's end, or a probe's success, which may
        // come at any time.
        Hold::BreakerOpen { .. } => wait.clamp(1, PAUSED_POLL_MS as i64).unsigned_abs(),
        _ => return None,
    };
    Some(Duration::from_millis(ms))
}

/// A consumer of one queue or subscription.
#[derive(Debug)]
pub(crate) struct RedisConsumer {
    client: Client,
    /// A connection of its own for blocking waits.
    waiter: Client,
    /// The waiter's connection id on the node holding the queue (-1: not known yet), so
    /// that `close` can interrupt a pending block instead of waiting for its timeout.
    waiter_id: AtomicI64,
    /// The queue's cluster slot: where the waiter blocks.
    slot: u16,
    keys: QueueKeys,
    /// Each script's KEYS, built once: reserve and ack run on every message.
    script_keys: ScriptKeys,
    options: ConsumerOptions,
    /// This consumer's id, recorded as the holder of every lock it takes, and the mark of
    /// its presence (lua/common.lua, "Holders"): unique per consumer, so per process run.
    holder: String,
    /// A consumer (this one or another) silent for longer than this is gone: its expired
    /// locks are crashes ([`presence_window`]).
    dead_after_ms: i64,
    /// The fleet circuit breaker's probes this consumer took and has not settled: their
    /// settle judges the breaker (breaker_judge.lua), their renewal holds its slot.
    probes: Mutex<Vec<Receipt>>,
}

impl RedisConsumer {
    pub(crate) fn new(
        client: Client,
        waiter: Client,
        keys: QueueKeys,
        options: ConsumerOptions,
    ) -> Self {
        RedisConsumer {
            client,
            waiter,
            waiter_id: AtomicI64::new(-1),
            slot: redis_keyslot(keys.ready.as_bytes()),
            script_keys: ScriptKeys::new(&keys),
            keys,
            holder: ulid::Ulid::new().to_string(),
            dead_after_ms: i64::try_from(presence_window(options.recovery_interval).as_millis())
                .unwrap_or(i64::MAX),
            options,
            probes: Mutex::default(),
        }
    }

    /// A command for the node that holds this queue.
    fn on_queue_node(&self, name: &'static str, blocking: bool) -> CustomCommand {
        CustomCommand::new(name, ClusterHash::Custom(self.slot), blocking)
    }

    fn lock_ms(&self) -> i64 {
        i64::try_from(self.options.lock_timeout.as_millis()).unwrap_or(i64::MAX)
    }

    /// Runs reserve.lua for up to `max` messages, `now` of which would start at once;
    /// returns the wait hint (ms until the next delayed message is due, or -1), what held
    /// the source back, and the deliveries.
    async fn reserve(&self, max: usize, now: usize) -> Result<(i64, Hold, Vec<Delivery>)> {
        let max = max.min(LEASE_MAX);
        let args = vec![
            Value::from(max as i64),
            Value::from(self.lock_ms()),
            Value::from(self.holder.as_str()),
            Value::from(now.min(max) as i64),
        ];
        let script = &scripts::RESERVE;
        let reply = script
            .run_raw(&self.client, self.slot, &self.script_keys.reserve, &args)
            .await
            .map_err(Error::from)?;
        let Resp3Frame::Array { data: items, .. } = reply else {
            return Err(unexpected(script, reply).into());
        };
        let mut items = items.into_iter();
        let wait = items.next().as_ref().and_then(int).unwrap_or(-1);
        let pending = items.next().as_ref().and_then(int);
        let token = items.next().and_then(bytes);
        let leased = match items.next() {
            Some(Resp3Frame::Array {
                data: envelopes, ..
            }) => envelopes,
            None | Some(Resp3Frame::Null) => Vec::new(),
            Some(other) => return Err(unexpected(script, other).into()),
        };
        let deliveries = merge(script, token, leased, items)?;
        let hold = hold_of(pending, wait, !deliveries.is_empty());
        if hold == Hold::Probe {
            self.probes()
                .extend(deliveries.iter().map(|d| d.receipt.clone()));
        }
        Ok((wait, hold, deliveries))
    }

    /// Runs reserve_alone.lua: the next recovered message to run alone, if any.
    async fn reserve_alone(&self) -> Result<Received> {
        let script = &scripts::RESERVE_ALONE;
        let args = vec![
            Value::from(self.lock_ms()),
            Value::from(self.holder.as_str()),
        ];
        let reply = script
            .run(&self.client, self.script_keys.reserve_alone.clone(), args)
            .await
            .map_err(Error::from)?;
        let Value::Array(items) = reply else {
            return Err(script.unexpected(&reply).into());
        };
        let mut items = items.into_iter();
        // 0: no suspect left; 1: more wait; 2 to 5: held back by flow control.
        let pending = items.next().and_then(|v| v.as_i64());
        let (Some(id), Some(count), Some(payload)) = (items.next(), items.next(), items.next())
        else {
            return Ok(Received::new(Vec::new(), hold_of(pending, 0, false)));
        };
        let (Some(key), Some(count), Some(payload)) =
            (id.into_bytes(), count.as_i64(), payload.into_bytes())
        else {
            return Err(script.unexpected(&Value::from("malformed delivery")).into());
        };
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        let delivery = Delivery {
            receipt: Receipt::stored(key, count),
            delivery_count: count,
            payload,
            decoded: None,
        };
        // A 5th element, 6: the message is the fleet circuit breaker's probe.
        let hold = match items.next().and_then(|v| v.as_i64()) {
            Some(6) => {
                self.probes().push(delivery.receipt.clone());
                Hold::Probe
            }
            _ => hold_of(pending, 0, true),
        };
        Ok(Received::new(vec![delivery], hold))
    }

    fn probes(&self) -> MutexGuard<'_, Vec<Receipt>> {
        // A poisoned lock only means a panic elsewhere mid-push: the list is still valid.
        self.probes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Judges the fleet breaker when one of `settled` is a probe this consumer took
    /// (`succeeded`: acknowledged), so that whoever runs a probe judges it.
    async fn judge_probes(&self, settled: &[Receipt], succeeded: bool) -> Result<()> {
        let probe = {
            let mut probes = self.probes();
            if probes.is_empty() {
                return Ok(());
            }
            let before = probes.len();
            probes.retain(|p| !settled.contains(p));
            probes.len() < before
        };
        if probe {
            let outcome = if succeeded { "ok" } else { "failed" };
            scripts::BREAKER_JUDGE
                .run(
                    &self.client,
                    vec![self.keys.flow.as_str()],
                    vec![Value::from(outcome)],
                )
                .await
                .map_err(Error::from)?;
        }
        Ok(())
    }

    /// Blocks until the ready list is non-empty or `ms` pass. `BLMOVE l l LEFT LEFT`
    /// rotates the list onto itself: it changes nothing, it only wakes us.
    /// Returns whether the list became non-empty (false: the wait timed out).
    async fn wait_for_ready(&self, ms: i64) -> Result<bool> {
        if self.waiter_id.load(Ordering::Relaxed) < 0 {
            let id: i64 = self
                .waiter
                .custom(self.on_queue_node("CLIENT", false), vec!["ID"])
                .await
                .map_err(Error::from)?;
            self.waiter_id.store(id, Ordering::Relaxed);
        }
        let timeout = format!("{:.3}", ms as f64 / 1000.0);
        let args: Vec<Value> = vec![
            self.keys.ready.as_str().into(),
            self.keys.ready.as_str().into(),
            "LEFT".into(),
            "LEFT".into(),
            timeout.into(),
        ];
        let blocked = self
            .waiter
            .custom::<Value, _>(self.on_queue_node("BLMOVE", true), args);
        tokio::pin!(blocked);
        // Redis checks blocked clients' timeouts only ~10 times a second (`hz`): when a
        // due time is what we wait for, a local timer ends the wait on time instead.
        let waited = if ms < IDLE_WAIT_MS {
            tokio::select! {
                waited = &mut blocked => waited,
                () = tokio::time::sleep(Duration::from_millis(ms.unsigned_abs())) => {
                    self.unblock_waiter().await;
                    blocked.await
                }
            }
        } else {
            blocked.await
        };
        match waited {
            Ok(value) => Ok(!value.is_null()),
            // A full Redis refuses even this rotation (LMOVE may grow memory): wait
            // without it, so that consumers keep draining a full Redis.
            Err(e) if e.details().starts_with("OOM") => {
                tokio::time::sleep(Duration::from_millis(ms.unsigned_abs())).await;
                Ok(false)
            }
            Err(e) => {
                // Perhaps a reconnect: the connection id may have changed.
                self.waiter_id.store(-1, Ordering::Relaxed);
                Err(Error::from(e).into())
            }
        }
    }
}

impl RedisConsumer {
    /// Ends the waiter's pending block, if any (`CLIENT UNBLOCK` from the main connection).
    async fn unblock_waiter(&self) {
        let id = self.waiter_id.load(Ordering::Relaxed);
        if id >= 0 {
            let unblock = self.on_queue_node("CLIENT", false);
            let _: Result<Value, _> = self
                .client
                .custom(unblock, vec![Value::from("UNBLOCK"), Value::from(id)])
                .await;
        }
    }
}

#[async_trait]
impl Consumer for RedisConsumer {
    async fn receive(&self, want: Want, stop: &CancellationToken) -> Result<Received> {
        if want.alone {
            return self.reserve_alone().await;
        }
        let (wait, hold, deliveries) = self.reserve(want.max, want.now).await?;
        if want.max == 0 || !deliveries.is_empty() || stop.is_cancelled() {
            return Ok(Received::new(deliveries, hold));
        }
        if let Some(pause) = held_wait(hold, wait) {
            // Held back by flow control or a breaker: wait here (the worker renews running
            // handlers' locks meanwhile), then the caller's next receive looks again.
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(pause) => {}
            }
            return Ok(Received::new(Vec::new(), hold));
        }
        if hold == Hold::Isolation {
            return Ok(Received::new(Vec::new(), hold));
        }
        let wait = if wait < 0 {
            IDLE_WAIT_MS
        } else {
            wait.min(IDLE_WAIT_MS)
        };
        if wait > 0 {
            let woken = tokio::select! {
                () = stop.cancelled() => {
                    // Else the block goes on and the next wait queues behind it (a
                    // partitioned consumer ends its shards' waits this way).
                    self.unblock_waiter().await;
                    return Ok(Received::default());
                }
                woken = self.wait_for_ready(wait) => woken?,
            };
            if !woken && wait == IDLE_WAIT_MS {
                // Nothing arrived and nothing fell due: the caller's next receive looks again.
                return Ok(Received::default());
            }
        }
        let (_, hold, deliveries) = self.reserve(want.max, want.now).await?;
        Ok(Received::new(deliveries, hold))
    }

    async fn ack(&self, receipts: &[Receipt]) -> Result<()> {
        let split = Split::new(receipts);
        let mut args = Vec::with_capacity(2 + 2 * (split.stored.len() + split.leases.len()));
        args.push(Value::from(split.stored.len() as i64));
        args.push(Value::from(split.leases.len() as i64));
        split.pairs(&mut args);
        for (token, bits) in split.leases {
            args.push(Value::Bytes(token.clone()));
            args.push(Value::Bytes(Bytes::from(bits)));
        }
        scripts::ACK
            .run_int(&self.client, self.script_keys.ack.clone(), args)
            .await?;
        self.judge_probes(receipts, true).await
    }

    async fn renew(&self, receipts: &[Receipt]) -> Result<Vec<bool>> {
        let split = Split::new(receipts);
        let mut args = vec![
            Value::from(self.lock_ms()),
            Value::from(self.holder.as_str()),
            Value::from(self.dead_after_ms),
        ];
        split.stored_args(&mut args);
        args.extend(
            split
                .leases
                .iter()
                .map(|(token, _)| Value::Bytes((*token).clone())),
        );
        let script = &scripts::RENEW;
        let reply = script
            .run(&self.client, self.script_keys.renew.clone(), args)
            .await
            .map_err(Error::from)?;
        let flags: Vec<bool> = match reply {
            Value::Array(flags) => flags.iter().map(|f| f.as_i64() == Some(1)).collect(),
            // An empty Lua table comes back as an empty array or nil.
            Value::Null => Vec::new(),
            other => return Err(script.unexpected(&other).into()),
        };
        if flags.len() != split.stored.len() + split.leases.len() {
            return Err(script.unexpected(&Value::from(flags.len() as i64)).into());
        }
        // Back in the receipts' order: stored ones in turn, leased ones by their lease.
        let (stored, leases) = flags.split_at(split.stored.len());
        let kept: HashMap<&Bytes, bool> = split
            .leases
            .iter()
            .zip(leases)
            .map(|((token, _), &kept)| (*token, kept))
            .collect();
        let mut stored = stored.iter();
        let kept: Vec<bool> = receipts
            .iter()
            .map(|r| match &r.held {
                Held::Leased { lease, .. } => kept.get(lease).copied().unwrap_or(false),
                Held::Stored { .. } => stored.next().copied().unwrap_or(false),
            })
            .collect();
        self.after_renewal(receipts, &kept).await?;
        Ok(kept)
    }

    async fn retry(&self, receipt: &Receipt, delay: Duration, error: &ErrorRecord) -> Result<()> {
        let mut args = receipt_pair(receipt).to_vec();
        args.push(Value::from(
            i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
        ));
        args.push(Value::from(error.message.as_str()));
        scripts::RETRY
            .run_int(&self.client, self.script_keys.retry.clone(), args)
            .await?;
        self.judge_probes(std::slice::from_ref(receipt), false)
            .await
    }

    async fn dead_letter(
        &self,
        receipt: &Receipt,
        reason: DeadLetterReason,
        error: Option<&ErrorRecord>,
    ) -> Result<()> {
        let mut args = receipt_pair(receipt).to_vec();
        args.push(Value::from(reason.as_str()));
        args.push(Value::from(error.map_or("", |e| e.message.as_str())));
        scripts::DEAD_LETTER
            .run_int(&self.client, self.script_keys.dead_letter.clone(), args)
            .await?;
        self.judge_probes(std::slice::from_ref(receipt), false)
            .await
    }

    async fn release(&self, receipts: &[Receipt]) -> Result<()> {
        scripts::RELEASE
            .run_int(
                &self.client,
                self.script_keys.release.clone(),
                receipt_args(receipts).collect(),
            )
            .await?;
        // A released probe is judged by nobody: its slot frees when its lock timeout ends.
        self.probes().retain(|p| !receipts.contains(p));
        Ok(())
    }

    async fn recover(&self) -> Result<usize> {
        let args = vec![
            Value::from(i64::from(self.options.delivery_limit)),
            Value::from(RECOVER_BATCH),
            Value::from(LOCK_EXPIRED),
            Value::from(self.holder.as_str()),
            Value::from(self.dead_after_ms),
        ];
        let recovered = scripts::RECOVER
            .run_int(&self.client, self.script_keys.recover.clone(), args)
            .await?;
        Ok(usize::try_from(recovered).unwrap_or(0))
    }

    async fn close(&self) -> Result<()> {
        // Interrupt a pending block, so that the QUIT does not wait for its timeout.
        self.unblock_waiter().await;
        self.waiter.quit().await.map_err(Error::from)?;
        // Gone on purpose: its presence goes too (what it held was settled or released).
        let _: i64 = self
            .client
            .zrem(&self.keys.seen, self.holder.as_str())
            .await
            .map_err(Error::from)?;
        let _: i64 = self
            .client
            .hdel(&self.keys.since, self.holder.as_str())
            .await
            .map_err(Error::from)?;
        Ok(())
    }

    fn extras(&self) -> ConsumerExtras<'_> {
        ConsumerExtras::default()
            .fleet_breaker(self)
            .error_history(self)
    }
}

impl RedisConsumer {
    /// After a renewal: the fleet breaker's probe that still runs keeps its slot as long
    /// as its lock (no second probe beside a long one); messages whose locks were lost
    /// while this consumer was alive go back to the queue as ordinary messages if recovery
    /// had set them aside as crash suspects (absolve.lua).
    async fn after_renewal(&self, receipts: &[Receipt], kept: &[bool]) -> Result<()> {
        let running = receipts.iter().zip(kept).filter(|(_, kept)| **kept);
        let lost: Vec<Receipt> = receipts
            .iter()
            .zip(kept)
            .filter(|(_, kept)| !**kept)
            .map(|(r, _)| r.clone())
            .collect();
        let probe = {
            let probes = self.probes();
            !probes.is_empty() && running.clone().any(|(r, _)| probes.contains(r))
        };
        if probe {
            scripts::BREAKER_HOLD
                .run(
                    &self.client,
                    vec![self.keys.flow.as_str()],
                    vec![Value::from(self.lock_ms())],
                )
                .await
                .map_err(Error::from)?;
        }
        if !lost.is_empty() {
            self.probes().retain(|p| !lost.contains(p));
            scripts::ABSOLVE
                .run_int(
                    &self.client,
                    self.script_keys.absolve.clone(),
                    receipt_args(&lost).collect(),
                )
                .await?;
        }
        Ok(())
    }
}

#[async_trait]
impl FleetBreaker for RedisConsumer {
    async fn trip(&self, cool_down: Duration) -> Result<()> {
        let cool_down_ms = i64::try_from(cool_down.as_millis()).unwrap_or(i64::MAX);
        scripts::BREAKER_TRIP
            .run(
                &self.client,
                vec![self.keys.flow.as_str()],
                vec![Value::from(cool_down_ms)],
            )
            .await
            .map_err(Error::from)?;
        Ok(())
    }
}

#[async_trait]
impl ErrorHistory for RedisConsumer {
    async fn errors(&self, receipt: &Receipt) -> Result<Vec<ErrorRecord>> {
        // A leased message is on its first delivery: it has no earlier errors.
        let Held::Stored { key, .. } = &receipt.held else {
            return Ok(Vec::new());
        };
        let raw: Option<Bytes> = self
            .client
            .hget(&self.keys.errors, key.clone())
            .await
            .map_err(Error::from)?;
        Ok(raw
            .as_deref()
            .map(crate::admin::parse_errors)
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::pending;

    /// The codes `lua/flow.lua` defines are the ones `hold_of` reads.
    #[test]
    fn the_scripts_pending_codes_are_the_ones_read_here() {
        let flow = include_str!("../../lua/flow.lua");
        let line = flow
            .lines()
            .find(|line| line.starts_with("local PENDING_SUSPECTS,"))
            .expect("flow.lua names its pending codes on one line");
        let (names, values) = line["local ".len()..].split_once(" = ").unwrap();
        let named: Vec<(&str, i64)> = names
            .split(", ")
            .zip(values.split(", ").map(|v| v.trim().parse().unwrap()))
            .collect();
        let read = [
            ("PENDING_SUSPECTS", pending::SUSPECTS),
            ("PENDING_PAUSED", pending::PAUSED),
            ("PENDING_FULL", pending::FULL),
            ("PENDING_RATE", pending::RATE),
            ("PENDING_BREAKER", pending::BREAKER),
            ("PENDING_PROBE", pending::PROBE),
        ];
        assert_eq!(named, read);
    }
}
