//! The transport conformance suite on the Redis transport (a real redis-server).

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use bus_conformance::{self as conformance, Probe, SeenDeadLetter};
use bus_core::transport::Source;
use bus_redis::admin::Admin;
use bus_redis::RedisTransport;
use bus_test_redis::TestRedis;
use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand};

struct Redis(RedisTransport);

/// Reads what the transport stored as the bus's tools do (bus-redis's admin, the one
/// reader of the layout), so the suite checks what an operator sees.
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

    async fn reply_inboxes(&self) -> Option<usize> {
        let prefix = self.0.config().key_prefix();
        let keys = CustomCommand::new_static("KEYS", ClusterHash::Random, false);
        // A test's own server: KEYS is fine here.
        let found: Vec<String> = self
            .0
            .client()
            .custom(keys, vec![format!("{prefix}:{{:reply:*")])
            .await
            .unwrap();
        Some(found.len())
    }

    async fn keyed(&self, source: &Source) -> Option<usize> {
        let stats = Admin::new(self.0.clone()).stats(source).await.unwrap();
        Some(stats.keyed as usize)
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
    shutdown_is_prompt_when_idle_and_bounded_by_the_grace,
    a_request_gets_its_reply_and_leaves_no_inbox
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_done_once_is_skipped_by_redeliveries() {
    let redis = TestRedis::start().unwrap();
    conformance::a_step_done_once_is_skipped_by_redeliveries(Arc::new(
        common::transport(&redis).await,
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_reserving_and_resume_restarts() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::pause_stops_reserving_and_resume_restarts(
        Arc::new(transport.clone()),
        &Admin::new(transport.clone()),
        &Redis(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_holds_across_hosts() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_concurrency_limit_holds_across_hosts(
        Arc::new(transport.clone()),
        &Admin::new(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_across_hosts() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_rate_limit_holds_across_hosts(
        Arc::new(transport.clone()),
        &Admin::new(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_messages_run_in_order_per_key() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::keyed_messages_run_in_order_per_key(
        Arc::new(transport.clone()),
        &Admin::new(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_take_turns() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::keys_take_turns(Arc::new(transport.clone()), &Admin::new(transport)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_limit_holds_and_is_reached() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_per_key_limit_holds_and_is_reached(
        Arc::new(transport.clone()),
        &Admin::new(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_unblocks_its_key_unless_set_to_block() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_dead_letter_unblocks_its_key_unless_set_to_block(
        Arc::new(transport.clone()),
        &Admin::new(transport.clone()),
        &Redis(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_keyed_send_joins_its_key_at_its_due_time() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_delayed_keyed_send_joins_its_key_at_its_due_time(
        Arc::new(transport.clone()),
        &Admin::new(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_send_with_a_dedup_key_keeps_its_keys_order() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_keyed_send_with_a_dedup_key_keeps_its_keys_order(
        Arc::new(transport.clone()),
        &Admin::new(transport.clone()),
        &Redis(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_rate_limit_holds() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_per_key_rate_limit_holds(Arc::new(transport.clone()), &Admin::new(transport))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_breaker_holds_every_consumer_and_lets_one_probe_through() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_fleet_breaker_holds_every_consumer_and_lets_one_probe_through(
        Arc::new(transport.clone()),
        &Admin::new(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_closes_a_fleet_breaker_by_hand() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::an_operator_closes_a_fleet_breaker_by_hand(
        Arc::new(transport.clone()),
        &Admin::new(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_breaker_stops_every_host_until_one_probe_closes_it() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_fleet_breaker_stops_every_host_until_one_probe_closes_it(
        Arc::new(transport.clone()),
        &Admin::new(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_singleton_with_a_fleet_breaker_trips_and_closes() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_singleton_with_a_fleet_breaker_trips_and_closes(
        Arc::new(transport.clone()),
        &Admin::new(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_singleton_starts_nothing() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::a_paused_singleton_starts_nothing(
        Arc::new(transport.clone()),
        &Admin::new(transport),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_queue_behind_a_fleet_breaker_keeps_each_keys_order() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    conformance::an_ordered_queue_behind_a_fleet_breaker_keeps_each_keys_order(
        Arc::new(transport.clone()),
        &Admin::new(transport),
    )
    .await;
}
