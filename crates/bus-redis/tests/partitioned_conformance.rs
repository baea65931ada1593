//! The transport conformance suite on partitioned queues: every queue the suite uses is
//! spread over three shards, and the probe reads them summed over the shards.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use bus_core::conformance::{self, Probe, SeenDeadLetter};
use bus_core::Source;
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::TestRedis;
use fred::prelude::{HashesInterface, KeysInterface, ListInterface, SortedSetsInterface};

/// The queues of `bus_core::conformance`.
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

#[async_trait]
impl Probe for Shards {
    async fn dead_letters(&self, source: &Source) -> Vec<SeenDeadLetter> {
        let client = self.0.client();
        let mut dead = Vec::new();
        let shards = self.0.shard_keys(source);
        if matches!(source, Source::Queue(_)) {
            assert_eq!(shards.len(), 3, "{source} is partitioned");
        }
        for keys in shards {
            let ids: Vec<String> = client.lrange(&keys.dead, 0, -1).await.unwrap();
            for id in ids {
                let info: String = client.hget(&keys.dead_info, &id).await.unwrap();
                let info: serde_json::Value = serde_json::from_str(&info).unwrap();
                let errors: Option<String> = client.hget(&keys.errors, &id).await.unwrap();
                let errors: Vec<serde_json::Value> =
                    serde_json::from_str(errors.as_deref().unwrap_or("[]")).unwrap();
                dead.push(SeenDeadLetter {
                    reason: info["reason"].as_str().unwrap().to_owned(),
                    errors: errors
                        .iter()
                        .map(|e| e["message"].as_str().unwrap().to_owned())
                        .collect(),
                });
            }
        }
        dead
    }

    async fn counts(&self, source: &Source) -> [usize; 4] {
        let client = self.0.client();
        let mut sum = [0; 4];
        let shards = self.0.shard_keys(source);
        if matches!(source, Source::Queue(_)) {
            assert_eq!(shards.len(), 3, "{source} is partitioned");
        }
        for keys in shards {
            let ready: usize = client.llen(&keys.ready).await.unwrap();
            let suspects: usize = client.llen(&keys.suspects).await.unwrap();
            let in_flight: usize = client.zcard(&keys.inflight).await.unwrap();
            // Messages held in leases (one lock per reserved batch: the `redisperf`
            // layout's `<base>:leased` counter), when the layout has them; named from the
            // ready key so this probe reads both layouts.
            let leased_key = format!("{}leased", keys.ready.trim_end_matches("ready"));
            let leased: Option<usize> = client.get(&leased_key).await.unwrap();
            let in_flight = in_flight + leased.unwrap_or(0);
            let delayed: usize = client.zcard(&keys.delayed).await.unwrap();
            let dead: usize = client.llen(&keys.dead).await.unwrap();
            for (total, n) in sum
                .iter_mut()
                .zip([ready + suspects, in_flight, delayed, dead])
            {
                *total += n;
            }
        }
        sum
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
