//! Flow control (docs/redis-layout.md, "Flow control"): the queue's `flow`
//! hash, which every reserve reads. Each change is one command per shard (`HSET` or
//! `HDEL`); a partitioned queue's shards are changed one after the other, and each
//! shard's limits apply to that shard (a limit cannot span hash tags atomically).

use std::time::Duration;

use async_trait::async_trait;
use bus_core::flow::{check_concurrency, Flow, FlowControl, PerKey, RateLimit};
use bus_core::transport::Source;
use fred::prelude::{HashesInterface, KeysInterface};
use fred::types::Value;

use super::Admin;
use crate::{RedisTransport, Result};

/// The `flow` hash's fields (docs/wire-format.md, "Flow control").
const PAUSED: &str = "paused";
const CONCURRENCY: &str = "concurrency";
const RATE: &str = "rate";
const PER_MS: &str = "per_ms";
/// Per-key ordering: the most messages of one key in flight ("0": ordering
/// switched off, waiting keyed messages drain), and `block` if a dead letter keeps its
/// key's slot.
const PER_KEY: &str = "per_key";
const ON_DEAD: &str = "on_dead";
/// The per-key rate limit: at most `key_rate` starts of one key per
/// `key_per_ms`.
const KEY_RATE: &str = "key_rate";
const KEY_PER_MS: &str = "key_per_ms";
/// The fleet circuit breaker: open until (ms, Redis's clock), and the probe's
/// slot (ms) while a probe runs.
const BREAKER_UNTIL: &str = "breaker_until";
const BREAKER_PROBE: &str = "breaker_probe";
/// The cool-down a fleet breaker was tripped for (breaker_judge.lua): goes with a close.
const BREAKER_COOL: &str = "breaker_cool_ms";

/// When a fleet breaker lets the next probe go, from its two fields; `None`: not set.
fn breaker_until(until: Option<u64>, probe: Option<u64>) -> Option<u64> {
    until.map(|until| probe.map_or(until, |probe| probe.max(until)))
}

impl Admin {
    /// The flow-control settings of `source` (of its first shard: every operation here
    /// sets all shards alike), `paused` if any shard is.
    pub async fn flow(&self, source: &Source) -> Result<Flow> {
        let mut flow = Flow::default();
        for (i, shard) in self.shards(source).await?.into_iter().enumerate() {
            let fields: Vec<Option<String>> = self
                .client()
                .hmget(
                    &shard.keys.flow,
                    vec![
                        PAUSED,
                        CONCURRENCY,
                        RATE,
                        PER_MS,
                        PER_KEY,
                        ON_DEAD,
                        KEY_RATE,
                        KEY_PER_MS,
                        BREAKER_UNTIL,
                        BREAKER_PROBE,
                    ],
                )
                .await?;
            let field = |n: usize| {
                fields
                    .get(n)
                    .and_then(|f| f.as_deref())
                    .and_then(|f| f.parse::<u64>().ok())
            };
            flow.paused |= field(0) == Some(1);
            // A trip is stored on every shard; shown: the latest.
            flow.breaker_until_ms = flow.breaker_until_ms.max(breaker_until(field(8), field(9)));
            if i == 0 {
                flow.concurrency = field(1).and_then(|n| u32::try_from(n).ok());
                let rate = |starts: Option<u64>, per: Option<u64>| {
                    let starts = u32::try_from(starts?).ok()?;
                    RateLimit::new(starts, Duration::from_millis(per?)).ok()
                };
                flow.rate = rate(field(2), field(3));
                let blocks = fields.get(5).and_then(|f| f.as_deref()) == Some("block");
                flow.per_key = field(4)
                    .and_then(|n| u32::try_from(n).ok())
                    .and_then(|n| PerKey::new(n).ok())
                    .map(|order| {
                        order
                            .dead_letter_blocks(blocks)
                            .rate(rate(field(6), field(7)))
                    });
            }
        }
        Ok(flow)
    }

    /// Whether `keys`' queue (or shard) is paused, and until when a fleet circuit breaker
    /// holds it: one `HMGET`.
    pub(super) async fn paused_at(&self, flow_key: &str) -> Result<(bool, Option<u64>)> {
        let fields: Vec<Option<String>> = self
            .client()
            .hmget(flow_key, vec![PAUSED, BREAKER_UNTIL, BREAKER_PROBE])
            .await?;
        let field = |n: usize| fields.get(n).and_then(|f| f.as_deref());
        let number = |n: usize| field(n).and_then(|f| f.parse::<u64>().ok());
        Ok((field(0) == Some("1"), breaker_until(number(1), number(2))))
    }

    /// Pauses `source`: no consumer reserves from it until
    /// [`Admin::resume`]; sends still enqueue, running handlers finish.
    pub async fn pause(&self, source: &Source) -> Result<()> {
        self.set(source, vec![(PAUSED, Value::from(1))]).await
    }

    /// Resumes `source`.
    pub async fn resume(&self, source: &Source) -> Result<()> {
        self.unset(source, vec![PAUSED]).await
    }

    /// Closes the fleet circuit breaker of `source` by hand (every shard): consumers
    /// reserve again at their next call, with no probe, as after a successful probe.
    pub async fn close_breaker(&self, source: &Source) -> Result<()> {
        self.unset(source, vec![BREAKER_UNTIL, BREAKER_PROBE, BREAKER_COOL])
            .await
    }

    /// Sets or removes the global concurrency limit of `source` (per shard).
    pub async fn limit_concurrency(&self, source: &Source, limit: Option<u32>) -> Result<()> {
        check_concurrency(limit)?;
        match limit {
            Some(n) => {
                self.set(source, vec![(CONCURRENCY, Value::from(i64::from(n)))])
                    .await
            }
            None => self.unset(source, vec![CONCURRENCY]).await,
        }
    }

    /// Sets or removes the rate limit of `source` (per shard).
    pub async fn limit_rate(&self, source: &Source, rate: Option<RateLimit>) -> Result<()> {
        match rate {
            Some(rate) => {
                let per = i64::try_from(rate.per().as_millis()).unwrap_or(i64::MAX);
                let fields = vec![
                    (RATE, Value::from(i64::from(rate.starts()))),
                    (PER_MS, Value::from(per)),
                ];
                self.set(source, fields).await
            }
            None => {
                self.unset(source, vec![RATE, PER_MS]).await?;
                for shard in self.shards(source).await? {
                    let _: i64 = self.client().del(&shard.keys.flow_starts).await?;
                }
                Ok(())
            }
        }
    }

    /// Orders the keyed messages of `source` per key, or stops ordering them (`None`:
    /// `per_key` becomes `0`, so that keyed messages still waiting drain without a limit;
    /// new keyed sends are plain sends). One `HSET` per shard, and an `HDEL` of the
    /// per-key rate's fields when it has none.
    pub async fn order_per_key(&self, source: &Source, order: Option<PerKey>) -> Result<()> {
        let mut fields = match order {
            Some(order) => vec![
                (PER_KEY, Value::from(i64::from(order.limit()))),
                (
                    ON_DEAD,
                    Value::from(if order.blocks_on_dead_letter() {
                        "block"
                    } else {
                        "unblock"
                    }),
                ),
            ],
            None => vec![(PER_KEY, Value::from(0))],
        };
        match order.and_then(|o| o.rate_limit()) {
            Some(rate) => {
                let per = i64::try_from(rate.per().as_millis()).unwrap_or(i64::MAX);
                fields.push((KEY_RATE, Value::from(i64::from(rate.starts()))));
                fields.push((KEY_PER_MS, Value::from(per)));
            }
            None => self.unset(source, vec![KEY_RATE, KEY_PER_MS]).await?,
        }
        self.set(source, fields).await
    }

    async fn set(&self, source: &Source, fields: Vec<(&str, Value)>) -> Result<()> {
        for shard in self.shards(source).await? {
            let _: i64 = self.client().hset(&shard.keys.flow, fields.clone()).await?;
        }
        Ok(())
    }

    async fn unset(&self, source: &Source, fields: Vec<&str>) -> Result<()> {
        for shard in self.shards(source).await? {
            let _: i64 = self.client().hdel(&shard.keys.flow, fields.clone()).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl FlowControl for Admin {
    async fn flow(&self, source: &Source) -> bus_core::Result<Flow> {
        Ok(Admin::flow(self, source).await?)
    }

    async fn pause(&self, source: &Source) -> bus_core::Result<()> {
        Ok(Admin::pause(self, source).await?)
    }

    async fn resume(&self, source: &Source) -> bus_core::Result<()> {
        Ok(Admin::resume(self, source).await?)
    }

    async fn close_breaker(&self, source: &Source) -> bus_core::Result<()> {
        Ok(Admin::close_breaker(self, source).await?)
    }

    async fn limit_concurrency(&self, source: &Source, limit: Option<u32>) -> bus_core::Result<()> {
        Ok(Admin::limit_concurrency(self, source, limit).await?)
    }

    async fn limit_rate(&self, source: &Source, rate: Option<RateLimit>) -> bus_core::Result<()> {
        Ok(Admin::limit_rate(self, source, rate).await?)
    }

    async fn order_per_key(&self, source: &Source, order: Option<PerKey>) -> bus_core::Result<()> {
        Ok(Admin::order_per_key(self, source, order).await?)
    }
}

/// The transport controls its own queues' flow (what a host's operator actions reach
/// through [`bus_core::transport::TransportExtras::flow`]), through an [`Admin`] over itself.
#[async_trait]
impl FlowControl for RedisTransport {
    async fn flow(&self, source: &Source) -> bus_core::Result<Flow> {
        FlowControl::flow(&Admin::new(self.clone()), source).await
    }

    async fn pause(&self, source: &Source) -> bus_core::Result<()> {
        FlowControl::pause(&Admin::new(self.clone()), source).await
    }

    async fn resume(&self, source: &Source) -> bus_core::Result<()> {
        FlowControl::resume(&Admin::new(self.clone()), source).await
    }

    async fn close_breaker(&self, source: &Source) -> bus_core::Result<()> {
        FlowControl::close_breaker(&Admin::new(self.clone()), source).await
    }

    async fn limit_concurrency(&self, source: &Source, limit: Option<u32>) -> bus_core::Result<()> {
        FlowControl::limit_concurrency(&Admin::new(self.clone()), source, limit).await
    }

    async fn limit_rate(&self, source: &Source, rate: Option<RateLimit>) -> bus_core::Result<()> {
        FlowControl::limit_rate(&Admin::new(self.clone()), source, rate).await
    }

    async fn order_per_key(&self, source: &Source, order: Option<PerKey>) -> bus_core::Result<()> {
        FlowControl::order_per_key(&Admin::new(self.clone()), source, order).await
    }
}
