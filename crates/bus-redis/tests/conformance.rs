//! The transport conformance suite on the Redis transport (a real redis-server).

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use bus_core::conformance::{self, Probe, SeenDeadLetter};
use bus_core::Source;
use bus_redis::RedisTransport;
use bus_test_redis::TestRedis;
use fred::prelude::{HashesInterface, KeysInterface, ListInterface, SortedSetsInterface};

struct Redis(RedisTransport);

#[async_trait]
impl Probe for Redis {
    async fn dead_letters(&self, source: &Source) -> Vec<SeenDeadLetter> {
        let keys = self.0.keys(source);
        let client = self.0.client();
        let ids: Vec<String> = client.lrange(&keys.dead, 0, -1).await.unwrap();
        let mut dead = Vec::new();
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
        dead
    }

    async fn counts(&self, source: &Source) -> [usize; 4] {
        let keys = self.0.keys(source);
        let client = self.0.client();
        let ready: usize = client.llen(&keys.ready).await.unwrap();
        let suspects: usize = client.llen(&keys.suspects).await.unwrap();
        let in_flight: usize = client.zcard(&keys.inflight).await.unwrap();
        let leased: Option<usize> = client.get(&keys.leased).await.unwrap();
        let in_flight = in_flight + leased.unwrap_or(0);
        let delayed: usize = client.zcard(&keys.delayed).await.unwrap();
        let dead: usize = client.llen(&keys.dead).await.unwrap();
        [ready + suspects, in_flight, delayed, dead]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_start_on_time() {
    let redis = TestRedis::start().unwrap();
    conformance::retries_start_on_time(Arc::new(common::transport(&redis).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_sends_start_on_time() {
    let redis = TestRedis::start().unwrap();
    conformance::delayed_sends_start_on_time(Arc::new(common::transport(&redis).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_body_decoder_dead_letters_the_message() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_panicking_body_decoder_dead_letters_the_message(
        Arc::new(transport.clone()),
        &Redis(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_work_in_spawn_blocking_keeps_its_locks() {
    let redis = TestRedis::start().unwrap();
    conformance::blocking_work_in_spawn_blocking_keeps_its_locks(Arc::new(
        common::transport(&redis).await,
    ))
    .await;
}

macro_rules! with_probe {
    ($($check:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() {
            let redis = TestRedis::start().unwrap();
            let transport = common::transport(&redis).await;
            conformance::$check(Arc::new(transport.clone()), &Redis(transport)).await;
        }
    )*};
}
with_probe!(
    failures_end_in_one_dead_letter_with_their_history,
    oversized_messages_are_refused_at_send,
    shutdown_releases_prefetched_messages,
    concurrency_stays_within_max_concurrent_calls,
    an_event_reaches_each_subscription_once,
    shutdown_is_prompt_when_idle_and_bounded_by_the_grace
);
