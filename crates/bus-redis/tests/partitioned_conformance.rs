//! The transport conformance suite on partitioned queues: every queue the suite uses is
//! spread over three shards, and the probe reads them summed over the shards.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use bus_conformance::{self as conformance, Probe, SeenDeadLetter};
use bus_core::transport::Source;
use bus_redis::admin::Admin;
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::TestRedis;

/// The queues of `bus_conformance`.
const QUEUES: [&str; 8] = [
    "conformance-timed",
    "conformance-explosive",
    "conformance-blocking",
    "conformance-doomed",
    "conformance-size",
    "conformance-held",
    "conformance-paced",
    "conformance-stubborn",
];

async fn transport(redis: &TestRedis) -> RedisTransport {
    let config = QUEUES.iter().fold(
        RedisConfig::from_url(&redis.url())
            .unwrap()
            .prefix(redis.namespace()),
        |config, queue| config.partitions(*queue, 3),
    );
    RedisTransport::connect(&config).await.unwrap()
}

struct Shards(RedisTransport);

/// Reads through bus-redis's admin, as conformance.rs does: its counts of a partitioned
/// queue are summed over the shards, its dead letters merged.
#[async_trait]
impl Probe for Shards {
    async fn dead_letters(&self, source: &Source) -> Vec<SeenDeadLetter> {
        let admin = self.admin(source).await;
        let dead = admin.dead_letters(source, u64::MAX).await.unwrap();
        dead.iter().map(Into::into).collect()
    }

    async fn counts(&self, source: &Source) -> [usize; 4] {
        let stats = self.admin(source).await.stats(source).await.unwrap();
        [
            stats.ready,
            stats.in_flight,
            stats.delayed,
            stats.dead_letters,
        ]
        .map(|n| n as usize)
    }
}

impl Shards {
    /// The admin, after checking that a queue of the suite is partitioned.
    async fn admin(&self, source: &Source) -> Admin {
        let admin = Admin::new(self.0.clone());
        if matches!(source, Source::Queue(_)) {
            assert_eq!(admin.partitions(source).await.unwrap(), 3, "{source}");
        }
        admin
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_start_on_time() {
    let redis = TestRedis::start().unwrap();
    conformance::retries_start_on_time(Arc::new(transport(&redis).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_sends_start_on_time() {
    let redis = TestRedis::start().unwrap();
    conformance::delayed_sends_start_on_time(Arc::new(transport(&redis).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_work_in_spawn_blocking_keeps_its_locks() {
    let redis = TestRedis::start().unwrap();
    conformance::blocking_work_in_spawn_blocking_keeps_its_locks(Arc::new(transport(&redis).await))
        .await;
}

macro_rules! with_probe {
    ($($check:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() {
            let redis = TestRedis::start().unwrap();
            let transport = transport(&redis).await;
            conformance::$check(Arc::new(transport.clone()), &Shards(transport)).await;
        }
    )*};
}
with_probe!(
    a_panicking_body_decoder_dead_letters_the_message,
    failures_end_in_one_dead_letter_with_their_history,
    oversized_messages_are_refused_at_send,
    shutdown_releases_prefetched_messages,
    concurrency_stays_within_max_concurrent_calls,
    an_event_reaches_each_subscription_once,
    shutdown_is_prompt_when_idle_and_bounded_by_the_grace
);
