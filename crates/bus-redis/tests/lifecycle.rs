//! A message's life on the Redis transport (a real redis-server), on a plain queue and on
//! one of three partitions: the hook before a dead letter (with the error history read
//! from Redis), expiry, and deduplication at send (with concurrent senders), and delayed
//! messages read, cancelled and rescheduled by id, and recurring messages' ticks.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use bus_conformance::{self as conformance, Probe, SeenDeadLetter};
use bus_core::transport::Source;
use bus_redis::admin::Admin;
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::TestRedis;

/// The queues of `bus_conformance`'s lifecycle checks.
const QUEUE: &str = "conformance-hooked";
const UNIQUE: &str = "conformance-unique";
const LATER: &str = "conformance-later";
const BEAT: &str = "conformance-beat";

struct Redis(RedisTransport);

/// Reads as an operator's tools do (bus-redis's admin), summed over partitions.
#[async_trait]
impl Probe for Redis {
    async fn dead_letters(&self, source: &Source) -> Vec<SeenDeadLetter> {
        let admin = Admin::new(self.0.clone());
        let dead = admin.dead_letters(source, u64::MAX).await.unwrap();
        dead.iter().map(Into::into).collect()
    }

    async fn counts(&self, source: &Source) -> [usize; 4] {
        let stats = Admin::new(self.0.clone()).stats(source).await.unwrap();
        [
            stats.ready,
            stats.in_flight,
            stats.delayed,
            stats.dead_letters,
        ]
        .map(|n| n as usize)
    }
}

async fn partitioned(redis: &TestRedis) -> RedisTransport {
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace())
        .partitions(QUEUE, 3)
        .partitions(UNIQUE, 3)
        .partitions(LATER, 3)
        .partitions(BEAT, 3);
    RedisTransport::connect(&config).await.unwrap()
}

macro_rules! with_probe {
    ($($check:ident / $partitioned:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() {
            let redis = TestRedis::start().unwrap();
            let transport = common::transport(&redis).await;
            conformance::$check(Arc::new(transport.clone()), &Redis(transport)).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $partitioned() {
            let redis = TestRedis::start().unwrap();
            let transport = partitioned(&redis).await;
            conformance::$check(Arc::new(transport.clone()), &Redis(transport)).await;
            // The check's queue was sent to as partitioned (its producer recorded the
            // shards), and no key of the plain queue was ever left.
            let registry = bus_redis::keys::partition_registry(redis.namespace());
            let recorded = [QUEUE, UNIQUE, LATER, BEAT].map(|q| redis.client().cmd(&["HGET", registry.as_str(), q]).unwrap());
            assert!(recorded.iter().any(|r| r.as_str() == Some("3")), "{recorded:?}");
            let keys = redis.keys();
            let plain = [QUEUE, UNIQUE, LATER, BEAT].map(|q| format!("{{{q}}}"));
            assert!(!keys.iter().any(|k| plain.iter().any(|p| k.contains(p))), "{keys:?}");
        }
    )*};
}
with_probe!(
    the_hook_before_a_dead_letter_sees_why_and_never_stops_it
        / the_hook_sees_the_history_on_a_partitioned_queue,
    expired_messages_are_dead_lettered_unhandled / expiry_holds_on_a_partitioned_queue,
    expired_messages_can_be_dropped / expired_messages_are_dropped_on_a_partitioned_queue,
    a_dedup_key_stores_one_message_per_window / dedup_holds_on_a_partitioned_queue,
    a_batch_with_dedup_keys_stores_each_key_once / batched_dedup_holds_on_a_partitioned_queue,
    delayed_commands_can_be_read_cancelled_and_rescheduled
        / delayed_commands_are_found_in_any_partition,
    a_tick_is_stored_once_and_only_when_newer / ticks_are_stored_once_on_a_partitioned_queue
);

macro_rules! on_redis {
    ($($check:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() {
            let redis = TestRedis::start().unwrap();
            let transport = common::transport(&redis).await;
            conformance::$check(Arc::new(transport)).await;
        }
    )*};
}
on_redis!(
    three_hosts_with_skewed_clocks_send_each_tick_once,
    missed_ticks_are_skipped_or_caught_up_once
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_publish_reaches_each_subscription_at_its_time() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_delayed_publish_reaches_each_subscription_at_its_time(
        Arc::new(transport.clone()),
        &Redis(transport),
    )
    .await;
}

#[derive(Debug, serde::Serialize, serde::Deserialize, bus_core::RedisCommand)]
#[bus(queue = "orders")]
struct PlaceOrder {
    n: u32,
}

/// Senders on four connections race to send with one deduplication key: exactly one
/// stores a message, every other send names it; the key lives under the queue's hash
/// tag with the window as its TTL, and the queue holds one message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_senders_store_one_message_per_key() {
    let redis = TestRedis::start().unwrap();
    let mut buses = Vec::new();
    for _ in 0..4 {
        let transport = common::transport(&redis).await;
        buses.push(bus_core::Bus::new(
            transport,
            bus_core::BusConfig::default(),
        ));
    }
    let window = std::time::Duration::from_secs(120);
    let sends = (0..40u32).map(|n| {
        let bus = buses[n as usize % 4].clone();
        tokio::spawn(async move {
            let options = bus_core::SendOptions::new()
                .dedup_key("order-7")
                .dedup_window(window);
            bus.send_with(&PlaceOrder { n }, &options).await.unwrap()
        })
    });
    let sent: Vec<bus_core::Sent> = futures::future::join_all(sends)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let stored: Vec<_> = sent.iter().filter(|s| !s.duplicate).collect();
    assert_eq!(stored.len(), 1, "{sent:?}");
    assert!(sent.iter().all(|s| s.id == stored[0].id), "{sent:?}");
    let mut client = redis.client();
    let key = format!("{}:{{orders}}:dedup:order-7", redis.namespace());
    assert_eq!(
        client.get(&key).unwrap().as_deref(),
        Some(stored[0].id.as_str().as_bytes())
    );
    let ttl = client.int(&["PTTL", key.as_str()]).unwrap();
    assert!(ttl > 100_000 && ttl <= 120_000, "PTTL {ttl}");
    assert_eq!(redis.counts("orders").ready, 1);
}

/// Concurrent single deduplicated sends on one connection share script calls (far fewer
/// `EVALSHA` than sends), and each still gets its own answer: per key one message stored,
/// every other send of the key names it, whichever call carried it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deduplicated_sends_share_calls_and_keep_their_answers() {
    use futures::StreamExt;
    let redis = TestRedis::start().unwrap();
    let bus = bus_core::Bus::new(
        common::transport(&redis).await,
        bus_core::BusConfig::default(),
    );
    let mut client = redis.client();
    client.cmd(&["CONFIG", "RESETSTAT"]).unwrap();
    let sends = (0..2_000u32).map(|n| {
        let bus = bus.clone();
        async move {
            let options = bus_core::SendOptions::new().dedup_key(format!("k{}", n % 500));
            (n, bus.send_with(&PlaceOrder { n }, &options).await.unwrap())
        }
    });
    let sent: Vec<(u32, bus_core::Sent)> = futures::stream::iter(sends)
        .buffer_unordered(1_000)
        .collect()
        .await;
    let mut firsts = std::collections::HashMap::new();
    for (n, s) in sent.iter().filter(|(_, s)| !s.duplicate) {
        assert!(
            firsts.insert(n % 500, s.id.clone()).is_none(),
            "key {} stored twice",
            n % 500
        );
    }
    assert_eq!(firsts.len(), 500, "one stored per key");
    for (n, s) in &sent {
        assert_eq!(s.id, firsts[&(n % 500)], "#{n} names its key's first");
    }
    assert_eq!(redis.counts("orders").ready, 500);
    let info = client.cmd(&["INFO", "commandstats"]).unwrap();
    let info = String::from_utf8_lossy(info.as_bytes().unwrap()).into_owned();
    let calls: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{info}"));
    assert!(
        calls < 1_000,
        "{calls} script calls for 2,000 sends: not shared"
    );
}
