//! The consumer side: reserve, wait, ack, renew, retry, dead-letter, release, recover.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::flow::{FleetBreaker, SeenBreaker};
use bus_core::records::ErrorRecord;
use bus_core::transport::{
    now_ms, Consumer, ConsumerOptions, DeadLetterReason, Delivery, Held, Receipt,
};
use bus_core::Result;
use fred::prelude::{Client, ClientLike, HashesInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
use fred::util::redis_keyslot;
use tokio_util::bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::keys::{QueueKeys, ScriptKeys};
use crate::receipts::{merge, receipt_args, receipt_pair, Split};
use crate::scripts;
use crate::Error;

/// Longest an idle consumer blocks before returning empty (and promoting due messages).
const IDLE_WAIT_MS: i64 = 1_000;
/// Expired locks recovered per sweep; bounded so a sweep never blocks Redis for long.
const RECOVER_BATCH: i64 = 100;
/// Most fresh envelopes one reserve leases together (reserve.lua's LEASE_MAX): bounds
/// the recovery of one lease.
const LEASE_MAX: usize = 1_000;
const LOCK_EXPIRED: &str = "lock expired: the consumer stopped or lost its connection";
/// How often a consumer of a paused queue looks whether it was resumed (and one held back
/// by a fleet circuit breaker whether its probe closed it).
const PAUSED_POLL_MS: u64 = 250;
/// How often a consumer of a queue at its concurrency limit looks for a free slot (a
/// limit is a setting of the queue, so no ack of any client can be asked to wake us).
const FULL_POLL_MS: u64 = 50;

/// Why reserve took nothing (its reply's `pending` field): docs/wire-format.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Reserved (or found nothing): 0.
    No,
    /// Recovered messages wait to run alone: 1.
    Isolation,
    /// Flow control: the queue is paused (2), at its concurrency limit (3) or at its
    /// rate limit (4). `wait_ms` is then how long to wait.
    Flow { wait_ms: u64 },
}

impl Hold {
    fn of(pending: Option<i64>, wait: i64) -> Self {
        match pending {
            Some(1) => Hold::Isolation,
            Some(2) => Hold::Flow {
                wait_ms: PAUSED_POLL_MS,
            },
            Some(3) => Hold::Flow {
                wait_ms: FULL_POLL_MS,
            },
            Some(4) => Hold::Flow {
                wait_ms: wait.clamp(1, IDLE_WAIT_MS).unsigned_abs(),
            },
            // A fleet circuit breaker (protocol 4): its cool-down's end, or a probe's
            // success, which may come at any time.
            Some(5) => Hold::Flow {
                wait_ms: wait.clamp(1, PAUSED_POLL_MS as i64).unsigned_abs(),
            },
            _ => Hold::No,
        }
    }
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
    /// The last reserve found recovered messages waiting to run alone.
    isolation_pending: AtomicBool,
    /// The last reserve found the queue paused (flow control): for the host's metrics.
    paused: AtomicBool,
    /// What the last reserve saw of the fleet circuit breaker (protocol 4).
    breaker: SeenBreaker,
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
            options,
            isolation_pending: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            breaker: SeenBreaker::default(),
        }
    }

    /// A command for the node that holds this queue.
    fn on_queue_node(&self, name: &'static str, blocking: bool) -> CustomCommand {
        CustomCommand::new(name, ClusterHash::Custom(self.slot), blocking)
    }

    fn lock_ms(&self) -> i64 {
        i64::try_from(self.options.lock_timeout.as_millis()).unwrap_or(i64::MAX)
    }

    /// Runs reserve.lua; returns the wait hint (ms until the next delayed message is
    /// due, or -1), why nothing was taken if so, and the deliveries.
    async fn reserve(&self, max: usize) -> Result<(i64, Hold, Vec<Delivery>)> {
        let max = max.min(LEASE_MAX);
        let args = vec![Value::from(max as i64), Value::from(self.lock_ms())];
        let script = &scripts::RESERVE;
        let reply = script
            .run(&self.client, self.script_keys.reserve.clone(), args)
            .await
            .map_err(Error::from)?;
        let Value::Array(items) = reply else {
            return Err(script.unexpected(&reply).into());
        };
        let mut items = items.into_iter();
        let wait = items.next().and_then(|v| v.as_i64()).unwrap_or(-1);
        let pending = items.next().and_then(|v| v.as_i64());
        self.paused.store(pending == Some(2), Ordering::Relaxed);
        let held = Hold::of(pending, wait);
        self.isolation_pending
            .store(held == Hold::Isolation, Ordering::Relaxed);
        let token = items.next().and_then(Value::into_bytes);
        let leased = match items.next() {
            Some(Value::Array(envelopes)) => envelopes,
            None | Some(Value::Null) => Vec::new(),
            Some(other) => return Err(script.unexpected(&other).into()),
        };
        let deliveries = merge(script, token, leased, items)?;
        self.saw_breaker(pending, wait, !deliveries.is_empty());
        Ok((wait, held, deliveries))
    }

    /// Records what a reserve's `pending` said of the fleet circuit breaker: 5 open
    /// (`wait` ms left), 6 its cool-down over (`taken`: this reply holds the probe).
    fn saw_breaker(&self, pending: Option<i64>, wait: i64, taken: bool) {
        let until_ms = |wait: i64| now_ms().saturating_add(wait.max(0).unsigned_abs());
        self.breaker.set(match pending {
            Some(5) => FleetBreaker::Open {
                until_ms: until_ms(wait),
            },
            Some(6) if taken => FleetBreaker::Probe,
            Some(6) => FleetBreaker::Open { until_ms: now_ms() },
            // Held back by something else: the breaker is as last seen.
            Some(1..=4) => self.breaker.get(),
            _ => FleetBreaker::Closed,
        });
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
    async fn receive(&self, max: usize, stop: &CancellationToken) -> Result<Vec<Delivery>> {
        let (wait, held, deliveries) = self.reserve(max).await?;
        if let Hold::Flow { wait_ms } = held {
            // Held back by flow control: wait here (the worker renews running handlers'
            // locks meanwhile), then the caller's next receive looks again.
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
            }
            return Ok(Vec::new());
        }
        if !deliveries.is_empty() || stop.is_cancelled() || self.isolation_pending() {
            return Ok(deliveries);
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
                    return Ok(Vec::new());
                }
                woken = self.wait_for_ready(wait) => woken?,
            };
            if !woken && wait == IDLE_WAIT_MS {
                // Nothing arrived and nothing fell due: the caller's next receive looks again.
                return Ok(Vec::new());
            }
        }
        Ok(self.reserve(max).await?.2)
    }

    fn isolation_pending(&self) -> bool {
        self.isolation_pending.load(Ordering::Relaxed)
    }

    fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    fn fleet_breaker(&self) -> FleetBreaker {
        self.breaker.get()
    }

    async fn trip_breaker(&self, cool_down: Duration) -> Result<()> {
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

    async fn extend_probe(&self, _: &Receipt) -> Result<()> {
        scripts::BREAKER_HOLD
            .run(
                &self.client,
                vec![self.keys.flow.as_str()],
                vec![Value::from(self.lock_ms())],
            )
            .await
            .map_err(Error::from)?;
        Ok(())
    }

    async fn close_breaker(&self) -> Result<()> {
        let _: i64 = self
            .client
            .hdel(&self.keys.flow, vec!["breaker_until", "breaker_probe"])
            .await
            .map_err(Error::from)?;
        Ok(())
    }

    async fn receive_isolated(&self) -> Result<Option<Delivery>> {
        let script = &scripts::RESERVE_ALONE;
        let reply = script
            .run(
                &self.client,
                self.script_keys.reserve_alone.clone(),
                vec![Value::from(self.lock_ms())],
            )
            .await
            .map_err(Error::from)?;
        let Value::Array(items) = reply else {
            return Err(script.unexpected(&reply).into());
        };
        let mut items = items.into_iter();
        // (2 to 5: held back by flow control; the next receive waits as it says.)
        let first = items.next().and_then(|v| v.as_i64());
        self.isolation_pending
            .store(first == Some(1), Ordering::Relaxed);
        let (Some(id), Some(count), Some(payload)) = (items.next(), items.next(), items.next())
        else {
            if first == Some(5) {
                self.saw_breaker(first, 0, false);
            }
            return Ok(None);
        };
        // A 5th element, 6: the message is the fleet circuit breaker's probe.
        let probe = items.next().and_then(|v| v.as_i64());
        self.saw_breaker(probe.or(Some(0)), 0, true);
        let (Some(key), Some(count), Some(payload)) =
            (id.into_bytes(), count.as_i64(), payload.into_bytes())
        else {
            return Err(script.unexpected(&Value::from("malformed delivery")).into());
        };
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        Ok(Some(Delivery {
            receipt: Receipt::stored(key, count),
            delivery_count: count,
            payload,
            decoded: None,
        }))
    }

    async fn ack(&self, receipts: &[Receipt]) -> Result<()> {
        let split = Split::new(receipts);
        let mut args = Vec::with_capacity(1 + receipts.len() + 3 * split.leases.len());
        split.stored_args(&mut args);
        for (token, indices) in &split.leases {
            args.push(Value::Bytes((*token).clone()));
            args.push(Value::from(indices.len() as i64));
            args.push(Value::from(i64::from(
                indices.iter().copied().max().unwrap_or_default(),
            )));
            args.extend(indices.iter().map(|&i| Value::from(i64::from(i))));
        }
        scripts::ACK
            .run_int(&self.client, self.script_keys.ack.clone(), args)
            .await?;
        Ok(())
    }

    async fn renew(&self, receipts: &[Receipt]) -> Result<Vec<bool>> {
        let split = Split::new(receipts);
        let mut args = vec![Value::from(self.lock_ms())];
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
        Ok(receipts
            .iter()
            .map(|r| match &r.held {
                Held::Leased { lease, .. } => kept.get(lease).copied().unwrap_or(false),
                Held::Stored { .. } => stored.next().copied().unwrap_or(false),
            })
            .collect())
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
        Ok(())
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
        Ok(())
    }

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

    async fn release(&self, receipts: &[Receipt]) -> Result<()> {
        scripts::RELEASE
            .run_int(
                &self.client,
                self.script_keys.release.clone(),
                receipt_args(receipts).collect(),
            )
            .await?;
        Ok(())
    }

    async fn absolve(&self, receipts: &[Receipt]) -> Result<usize> {
        let moved = scripts::ABSOLVE
            .run_int(
                &self.client,
                self.script_keys.absolve.clone(),
                receipt_args(receipts).collect(),
            )
            .await?;
        Ok(usize::try_from(moved).unwrap_or(0))
    }

    async fn recover(&self) -> Result<usize> {
        let args = vec![
            Value::from(i64::from(self.options.delivery_limit)),
            Value::from(RECOVER_BATCH),
            Value::from(LOCK_EXPIRED),
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
        Ok(())
    }
}
