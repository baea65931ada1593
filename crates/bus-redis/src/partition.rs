//! Partitioned queues: one command queue over N shards, each a queue of its own with its
//! own hash tag, so that one hot queue spreads over the masters of a cluster. A layer over
//! the single-queue consumer: every script and guarantee holds per shard, unchanged
//! (docs/redis-layout.md, "Partitioned queues").

use std::collections::{BTreeMap, HashMap};
use std::hash::Hasher;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::records::ErrorRecord;
use bus_core::transport::{
    Consumer, ConsumerExtras, ConsumerOptions, DeadLetterReason, Delivery, ErrorHistory,
    FleetBreaker, Hold, Receipt, Received, Want,
};
use bus_core::Result;
use fred::prelude::{Client, HashesInterface};
use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use crate::consume::consumer::RedisConsumer;
use crate::keys::{self, QueueKeys};
use crate::{Error, RedisConfig};

/// The most shards a queue may have.
pub const MAX_PARTITIONS: u16 = 256;

/// The shard of a partition key among `shards`: FNV-1a (64-bit) of the key's bytes,
/// modulo `shards`. Documented so that producers in other languages agree
/// (docs/redis-layout.md); `shards` of 0 counts as 1.
///
/// ```
/// assert_eq!(bus_redis::shard_of_key(b"customer-42", 3), bus_redis::shard_of_key(b"customer-42", 3));
/// assert_eq!(bus_redis::shard_of_key(b"a", 1), 0);
/// ```
pub fn shard_of_key(key: &[u8], shards: u16) -> u16 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(key);
    // The remainder is below `shards`, so it fits.
    u16::try_from(hasher.finish() % u64::from(shards.max(1))).unwrap_or(0)
}

/// The producer side: which shard each send goes to.
#[derive(Debug, Default)]
pub(crate) struct Spread {
    queues: HashMap<String, Shards>,
}

#[derive(Debug)]
struct Shards {
    count: u16,
    /// Round robin over sends without a partition key.
    next: AtomicUsize,
    /// Whether this producer recorded the shard count in Redis already.
    recorded: AtomicBool,
}

impl Spread {
    pub(crate) fn new(partitions: &BTreeMap<String, u16>) -> Self {
        let queues = partitions
            .iter()
            .filter(|(_, &count)| count > 1)
            .map(|(queue, &count)| {
                let (next, recorded) = (AtomicUsize::new(0), AtomicBool::new(false));
                (
                    queue.clone(),
                    Shards {
                        count,
                        next,
                        recorded,
                    },
                )
            })
            .collect();
        Spread { queues }
    }

    /// The shard count of `queue` the first time this is asked for it, `None` after
    /// that and for an unpartitioned queue: a producer records it once, so that
    /// management knows the shards before any consumer started.
    pub(crate) fn first_send(&self, queue: &str) -> Option<u16> {
        if self.queues.is_empty() {
            return None;
        }
        let shards = self.queues.get(queue)?;
        let first = !shards.recorded.load(Ordering::Relaxed)
            && !shards.recorded.swap(true, Ordering::Relaxed);
        first.then_some(shards.count)
    }

    /// The shard a send to `queue` goes to, `None` for an unpartitioned queue: by its
    /// partition key when there is one, else the next in turn.
    pub(crate) fn shard(&self, queue: &str, key: Option<&str>) -> Option<u16> {
        if self.queues.is_empty() {
            return None; // the common case costs no lookup
        }
        let shards = self.queues.get(queue)?;
        Some(match key {
            Some(key) => shard_of_key(key.as_bytes(), shards.count),
            None => {
                let turn = shards.next.fetch_add(1, Ordering::Relaxed);
                u16::try_from(turn % usize::from(shards.count)).unwrap_or(0)
            }
        })
    }
}

/// A consumer of every shard of a partitioned queue.
#[derive(Debug)]
pub(crate) struct PartitionedConsumer {
    shards: Vec<RedisConsumer>,
    /// Which shard comes first in the next receive's shares.
    turn: AtomicUsize,
    /// Always cancelled: a receive with it never waits.
    no_wait: CancellationToken,
}

impl PartitionedConsumer {
    /// One consumer per shard of `queue`, each with a waiter connection of its own, after
    /// recording the number of shards for management and foreign producers (best effort,
    /// as the other registries: a full Redis refuses the write).
    pub(crate) async fn connect(
        client: &Client,
        config: &RedisConfig,
        queue: &str,
        shards: u16,
        options: ConsumerOptions,
    ) -> Result<Self> {
        let prefix = config.key_prefix();
        record(client, prefix, queue, shards).await;
        let mut consumers = Vec::with_capacity(usize::from(shards));
        for shard in 0..shards {
            // Blocking waits stall a connection: each shard waits on its own.
            let waiter = config.connect_client().await?;
            consumers.push(RedisConsumer::new(
                client.clone(),
                waiter,
                QueueKeys::shard(prefix, queue, shard),
                options.clone(),
            ));
        }
        Ok(Self::new(consumers))
    }

    fn new(shards: Vec<RedisConsumer>) -> Self {
        let no_wait = CancellationToken::new();
        no_wait.cancel();
        PartitionedConsumer {
            shards,
            turn: AtomicUsize::new(0),
            no_wait,
        }
    }

    /// Asks every shard at once, without waiting, for its fair share of `max`: `max / N`
    /// each, the remainder to the shards first in a rotation that moves on every call,
    /// so a flooded shard never takes the whole capacity while another has messages.
    /// Capacity the shares left unused then goes, in the same rotation, to the shards
    /// that may hold more (those that filled their share or had none), so a single busy
    /// shard still fills a receive.
    async fn take(&self, want: Want) -> Result<Received> {
        let n = self.shards.len();
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % n;
        let (share, extra) = (want.max / n, want.max % n);
        let calls = (0..n).map(|k| {
            let shard = (start + k) % n;
            let max = share + usize::from(k < extra);
            async move {
                // (A shard asked for none still says what holds it back.)
                let taken = self.shards[shard]
                    .receive(Want::new(max).now(want.now), &self.no_wait)
                    .await;
                (shard, max, taken)
            }
        });
        let mut out = Taken::default();
        let mut more = Vec::new();
        for (shard, asked, taken) in join_all(calls).await {
            // A shard that filled its share (or was asked for none) may hold more.
            if matches!(&taken, Ok(received) if received.deliveries.len() == asked) {
                more.push(shard);
            }
            out.add(shard, taken);
        }
        for shard in more {
            let left = want.max - out.deliveries.len();
            if left == 0 || out.hold == Hold::Isolation {
                break;
            }
            let taken = self.shards[shard]
                .receive(Want::new(left).now(want.now), &self.no_wait)
                .await;
            out.add(shard, taken);
        }
        out.handed_on()
    }

    /// Waits until any shard has a ready message, a delayed one falls due, `stop` fires,
    /// or the shards' idle bound passes, and returns what the waking shards reserved
    /// (each at most `max / N`; none when that is 0, and the caller takes after). The
    /// first shard to return ends the others' waits (a shard's wait ends on its token,
    /// and unblocks its connection).
    async fn wait_any(&self, want: Want, stop: &CancellationToken) -> Result<Received> {
        let share = want.max / self.shards.len();
        let woken = stop.child_token();
        let waits = self.shards.iter().enumerate().map(|(shard, consumer)| {
            let woken = &woken;
            async move {
                let waited = consumer
                    .receive(Want::new(share).now(want.now), woken)
                    .await;
                woken.cancel();
                (shard, waited)
            }
        });
        let mut out = Taken::default();
        for (shard, waited) in join_all(waits).await {
            out.add(shard, waited);
        }
        out.handed_on()
    }

    /// The next recovered message of any shard to run alone, the shards asked in turn.
    async fn take_alone(&self) -> Result<Received> {
        let n = self.shards.len();
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % n;
        let mut held = Hold::None;
        for shard in (0..n).map(|k| (start + k) % n) {
            let received = self.shards[shard]
                .receive(Want::alone(), &self.no_wait)
                .await?;
            if !received.deliveries.is_empty() {
                let deliveries = received
                    .deliveries
                    .into_iter()
                    .map(|d| tagged(shard, d))
                    .collect();
                return Ok(Received::new(deliveries, received.hold));
            }
            held = combine(held, received.hold);
        }
        Ok(Received::new(Vec::new(), held))
    }

    /// The shard and the shard's own receipt of a receipt this consumer handed out.
    fn split(&self, receipt: &Receipt) -> Result<(usize, Receipt)> {
        let shard = usize::from(receipt.shard);
        if shard >= self.shards.len() {
            return Err(Error::Protocol {
                script: "partition",
                detail: format!("a receipt that no shard of this queue handed out: {receipt:?}"),
            }
            .into());
        }
        let own = Receipt {
            shard: 0,
            held: receipt.held.clone(),
        };
        Ok((shard, own))
    }

    /// The receipts grouped by shard, each with its position in `receipts`.
    fn group(&self, receipts: &[Receipt]) -> Result<Vec<Group>> {
        let mut groups: Vec<(Vec<usize>, Vec<Receipt>)> =
            vec![Default::default(); self.shards.len()];
        for (position, receipt) in receipts.iter().enumerate() {
            let (shard, own) = self.split(receipt)?;
            groups[shard].0.push(position);
            groups[shard].1.push(own);
        }
        Ok(groups
            .into_iter()
            .enumerate()
            .filter(|(_, (_, receipts))| !receipts.is_empty())
            .map(|(shard, (positions, receipts))| (shard, positions, receipts))
            .collect())
    }
}

/// The receipts of one shard: the shard, their positions in the caller's list, and the
/// shard's own receipts.
type Group = (usize, Vec<usize>, Vec<Receipt>);

/// Records `queue`'s shard count in `<prefix>:registry:partitions`, for management and
/// foreign producers, and warns when another count was recorded. Best effort, as the
/// other registries: a full Redis refuses the write, and sending or consuming goes on.
pub(crate) async fn record(client: &Client, prefix: &str, queue: &str, shards: u16) {
    let registry = keys::partition_registry(prefix);
    let recorded: Result<Option<i64>, _> = client.hget(&registry, queue).await;
    if let Ok(Some(recorded)) = recorded {
        if recorded != i64::from(shards) {
            tracing::warn!(
                queue,
                recorded,
                configured = shards,
                "this queue was recorded with another number of partitions: messages in \
                 shards this process does not use wait for one that does \
                 (docs/operations.md, \"Partitioned queues\")"
            );
        }
    }
    let written: Result<i64, _> = client.hset(&registry, (queue, i64::from(shards))).await;
    if let Err(e) = written {
        tracing::warn!(key = registry, queue, error = %bus_core::Error::from(Error::from(e)),
            "could not record the partitions in Redis; going on");
    }
}

/// A delivery of shard `shard`, its receipt marked with the shard.
fn tagged(shard: usize, mut delivery: Delivery) -> Delivery {
    // Shards are fewer than MAX_PARTITIONS (a u16).
    delivery.receipt.shard = u16::try_from(shard).unwrap_or(u16::MAX);
    delivery
}

/// What several shards' receives took and saw.
#[derive(Default)]
struct Taken {
    deliveries: Vec<Delivery>,
    hold: Hold,
    failure: Option<bus_core::Error>,
}

impl Taken {
    fn add(&mut self, shard: usize, received: Result<Received>) {
        match received {
            Ok(received) => {
                self.deliveries
                    .extend(received.deliveries.into_iter().map(|d| tagged(shard, d)));
                self.hold = combine(self.hold, received.hold);
            }
            Err(e) => self.failure = Some(e),
        }
    }

    /// What shards reserved, even when another shard failed: dropping it would strand it
    /// in flight until its lock expires. The error is returned only when nothing was
    /// reserved (a shard that keeps failing fails again on the next call).
    fn handed_on(self) -> Result<Received> {
        match self.failure {
            Some(e) if self.deliveries.is_empty() => Err(e),
            Some(e) => {
                tracing::warn!(error = %bus_core::ErrorChain(&e),
                    "a shard of a partitioned queue failed to reserve; the others' messages go on");
                Ok(Received::new(self.deliveries, self.hold))
            }
            None => Ok(Received::new(self.deliveries, self.hold)),
        }
    }
}

/// What holds a partitioned queue back, from its shards': flow control and a fleet
/// breaker are set on every shard at once (`Admin::pause`, a trip), so any shard's says it;
/// a probe from any shard is a probe (one per shard at most); suspects on any shard wait.
fn combine(a: Hold, b: Hold) -> Hold {
    let rank = |hold: Hold| match hold {
        Hold::Isolation => 6,
        Hold::Probe => 5,
        Hold::BreakerOpen { .. } => 4,
        Hold::Paused => 3,
        Hold::RateLimited => 2,
        Hold::Full => 1,
        _ => 0,
    };
    match (a, b) {
        (Hold::BreakerOpen { until_ms: x }, Hold::BreakerOpen { until_ms: y }) => {
            Hold::BreakerOpen { until_ms: x.max(y) }
        }
        (a, b) if rank(b) > rank(a) => b,
        (a, _) => a,
    }
}

/// The first error of several concurrent calls, after all of them ran.
fn first_error<T>(results: impl IntoIterator<Item = Result<T>>) -> Result<Vec<T>> {
    results.into_iter().collect()
}

#[async_trait]
impl Consumer for PartitionedConsumer {
    async fn receive(&self, want: Want, stop: &CancellationToken) -> Result<Received> {
        if want.alone {
            return self.take_alone().await;
        }
        let taken = self.take(want).await?;
        if !taken.deliveries.is_empty()
            || want.max == 0
            || stop.is_cancelled()
            || taken.hold == Hold::Isolation
        {
            return Ok(taken);
        }
        let woken = self.wait_any(want, stop).await?;
        if !woken.deliveries.is_empty() || stop.is_cancelled() {
            return Ok(woken);
        }
        self.take(want).await
    }

    async fn ack(&self, receipts: &[Receipt]) -> Result<()> {
        let groups = self.group(receipts)?;
        let calls = groups
            .iter()
            .map(|(shard, _, own)| self.shards[*shard].ack(own));
        first_error(join_all(calls).await)?;
        Ok(())
    }

    async fn renew(&self, receipts: &[Receipt]) -> Result<Vec<bool>> {
        let groups = self.group(receipts)?;
        let calls = groups
            .iter()
            .map(|(shard, _, own)| self.shards[*shard].renew(own));
        let renewed = first_error(join_all(calls).await)?;
        let mut flags = vec![false; receipts.len()];
        for ((_, positions, _), renewed) in groups.iter().zip(renewed) {
            for (&position, held) in positions.iter().zip(renewed) {
                flags[position] = held;
            }
        }
        Ok(flags)
    }

    async fn retry(&self, receipt: &Receipt, delay: Duration, error: &ErrorRecord) -> Result<()> {
        let (shard, own) = self.split(receipt)?;
        self.shards[shard].retry(&own, delay, error).await
    }

    async fn dead_letter(
        &self,
        receipt: &Receipt,
        reason: DeadLetterReason,
        error: Option<&ErrorRecord>,
    ) -> Result<()> {
        let (shard, own) = self.split(receipt)?;
        self.shards[shard].dead_letter(&own, reason, error).await
    }

    async fn release(&self, receipts: &[Receipt]) -> Result<()> {
        let groups = self.group(receipts)?;
        let calls = groups
            .iter()
            .map(|(shard, _, own)| self.shards[*shard].release(own));
        first_error(join_all(calls).await)?;
        Ok(())
    }

    async fn recover(&self) -> Result<usize> {
        let swept = join_all(self.shards.iter().map(Consumer::recover)).await;
        Ok(first_error(swept)?.into_iter().sum())
    }

    async fn close(&self) -> Result<()> {
        first_error(join_all(self.shards.iter().map(Consumer::close)).await)?;
        Ok(())
    }

    fn extras(&self) -> ConsumerExtras<'_> {
        ConsumerExtras::default()
            .fleet_breaker(self)
            .error_history(self)
    }
}

#[async_trait]
impl FleetBreaker for PartitionedConsumer {
    /// A trip is stored on every shard.
    async fn trip(&self, cool_down: Duration) -> Result<()> {
        let calls = self.shards.iter().map(|s| FleetBreaker::trip(s, cool_down));
        first_error(join_all(calls).await)?;
        Ok(())
    }
}

#[async_trait]
impl ErrorHistory for PartitionedConsumer {
    async fn errors(&self, receipt: &Receipt) -> Result<Vec<ErrorRecord>> {
        let (shard, own) = self.split(receipt)?;
        ErrorHistory::errors(&self.shards[shard], &own).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hash_with_fnv1a_64() {
        // The published FNV-1a 64-bit test vectors: foreign producers compute the same.
        let fnv = |key: &[u8]| {
            let mut hasher = fnv::FnvHasher::default();
            hasher.write(key);
            hasher.finish()
        };
        assert_eq!(fnv(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(
            shard_of_key(b"a", 3),
            (0xaf63_dc4c_8601_ec8c_u64 % 3) as u16
        );
        assert_eq!(
            shard_of_key(b"foobar", 7),
            (0x8594_4171_f739_67e8_u64 % 7) as u16
        );
    }

    #[test]
    fn sends_spread_round_robin_or_by_key() {
        let spread = Spread::new(&BTreeMap::from([
            ("orders".to_owned(), 3),
            ("single".to_owned(), 1),
        ]));
        let turns: Vec<_> = (0..6).map(|_| spread.shard("orders", None)).collect();
        assert_eq!(turns, [0, 1, 2, 0, 1, 2].map(Some));
        assert_eq!(spread.shard("single", None), None);
        assert_eq!(spread.shard("other", Some("k")), None);
        let keyed = spread.shard("orders", Some("customer-7"));
        assert_eq!(keyed, Some(shard_of_key(b"customer-7", 3)));
        assert!((0..10).all(|_| spread.shard("orders", Some("customer-7")) == keyed));
        assert_eq!(Spread::default().shard("orders", None), None);
        // The count is recorded once per queue.
        assert_eq!(spread.first_send("orders"), Some(3));
        assert_eq!(spread.first_send("orders"), None);
        assert_eq!(spread.first_send("single"), None);
    }
}
