//! What the relay's sweep does with member settles whose confirmation a crash lost, on
//! Redis (the store that can ask its transport where a member is): confirmed when the
//! member's ack was stored, dropped when it was not (the member runs again), dead when
//! recovery dead-lettered a member whose run ended its process at its delivery limit.

use std::sync::Arc;
use std::time::Duration;

use bus_conformance::workflows::{Done, Item};
use bus_core::transport::{ConsumerExt, ConsumerOptions, Source, Transport};
use bus_core::{Bus, BusConfig, Envelope};
use bus_redis::RedisTransport;
use bus_test_redis::{eventually_async, TestRedis};
use bus_workflows::store::{Mark, Outcome, Settle};
use bus_workflows::{Batch, BatchState, RedisWorkflowStore, RelaySettings, Workflows};
use tokio_util::sync::CancellationToken;

struct Setup {
    redis: TestRedis,
    transport: RedisTransport,
    workflows: Workflows,
    bus: Bus,
}

async fn setup() -> Setup {
    let redis = TestRedis::start().unwrap();
    let transport = RedisTransport::connect(&bus_test_redis::bus::config(&redis))
        .await
        .unwrap();
    let settings = RelaySettings::default()
        .stale_after(Duration::ZERO)
        .sweep_every(Duration::ZERO);
    let workflows =
        Workflows::new(RedisWorkflowStore::for_transport(&transport)).relay_settings(settings);
    let bus = Bus::new(transport.clone(), BusConfig::default());
    Setup {
        redis,
        transport,
        workflows,
        bus,
    }
}

async fn one_member_batch(s: &Setup) -> Batch {
    let batch = s
        .workflows
        .batch(&s.bus)
        .on_success(&Done {
            what: "success".into(),
        })
        .unwrap()
        .on_death(&Done {
            what: "death".into(),
        })
        .unwrap()
        .open()
        .await
        .unwrap();
    batch
        .send(&Item {
            n: 1,
            die: false,
            fail: false,
        })
        .await
        .unwrap();
    batch.close().await.unwrap();
    batch
}

fn source() -> Source {
    Source::queue("wf-items").unwrap()
}

fn mark(delivery: &bus_core::transport::Delivery, outcome: Outcome) -> Mark {
    let id = Envelope::decode_shared(&delivery.payload).unwrap().id;
    Mark::new(0, outcome, id, source(), delivery.receipt.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_whose_confirmation_was_lost_is_confirmed_once() {
    let s = setup().await;
    let batch = one_member_batch(&s).await;
    let options = ConsumerOptions::new(Duration::from_secs(30), 5);
    let consumer = s.transport.consumer(&source(), options).await.unwrap();
    let delivery = consumer
        .take(1, &CancellationToken::new())
        .await
        .unwrap()
        .remove(0);
    let store = s.workflows.store();
    let ok = Outcome::Succeeded { result: None };
    store
        .mark(batch.id(), &[mark(&delivery, ok)])
        .await
        .unwrap();
    let relay = s.workflows.relay(s.transport.clone());
    let swept = relay.sweep().await.unwrap();
    assert_eq!(
        swept.settles, 0,
        "the member is held: its ack may still come"
    );
    consumer
        .ack(std::slice::from_ref(&delivery.receipt))
        .await
        .unwrap();
    // The process "died" here: no confirmation. The sweep finds the member gone.
    assert_eq!(batch.status().await.unwrap().pending(), 1);
    let swept = relay.sweep().await.unwrap();
    assert_eq!(swept.settles, 1);
    assert_eq!(
        s.redis.counts("wf-done").ready,
        1,
        "the success callback, once"
    );
    for _ in 0..3 {
        relay.sweep().await.unwrap();
    }
    let status = batch.status().await.unwrap();
    assert_eq!((status.succeeded, status.pending()), (1, 0));
    assert_eq!(s.redis.counts("wf-done").ready, 1, "still once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_whose_ack_never_came_is_dropped_and_the_member_settles_again() {
    let s = setup().await;
    let batch = one_member_batch(&s).await;
    let options = ConsumerOptions::new(Duration::from_millis(300), 5);
    let consumer = s.transport.consumer(&source(), options).await.unwrap();
    let delivery = consumer
        .take(1, &CancellationToken::new())
        .await
        .unwrap()
        .remove(0);
    let store = s.workflows.store();
    store
        .mark(
            batch.id(),
            &[mark(&delivery, Outcome::Succeeded { result: None })],
        )
        .await
        .unwrap();
    // The process "died" before its ack: the lock expires and recovery stores it again.
    assert!(
        eventually_async(Duration::from_secs(10), || async {
            consumer.recover().await.unwrap() > 0
        })
        .await
    );
    let relay = s.workflows.relay(s.transport.clone());
    assert_eq!(
        relay.sweep().await.unwrap().settles,
        1,
        "the mark is dropped"
    );
    assert_eq!(batch.status().await.unwrap().pending(), 1, "not counted");
    assert_eq!(s.redis.counts("wf-done").ready, 0, "no callback yet");
    // Its next delivery settles it (its holder lives: it is an ordinary message again).
    let again = consumer
        .take(1, &CancellationToken::new())
        .await
        .unwrap()
        .remove(0);
    store
        .mark(
            batch.id(),
            &[mark(&again, Outcome::Succeeded { result: None })],
        )
        .await
        .unwrap();
    consumer
        .ack(std::slice::from_ref(&again.receipt))
        .await
        .unwrap();
    let fired = store
        .settle(
            batch.id(),
            &[Settle::Confirm {
                index: 0,
                receipt: None,
            }],
        )
        .await
        .unwrap();
    assert_eq!(fired.callbacks.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_ends_its_process_at_its_limit_is_settled_dead() {
    let s = setup().await;
    let batch = one_member_batch(&s).await;
    let wrapped: Arc<dyn Transport> = Arc::new(s.workflows.transport(s.transport.clone()));
    let options = ConsumerOptions::new(Duration::from_millis(300), 2)
        .recovery_interval(Duration::from_millis(100));
    let items = source();
    let consumer = || wrapped.consumer(&items, options.clone());
    let (first, sweeper) = (consumer().await.unwrap(), consumer().await.unwrap());
    // First delivery: its process "dies" (nothing settled, it goes silent); once its lock
    // expired and its holder counts as gone, recovery sets the member aside to run alone.
    assert_eq!(
        first
            .take(1, &CancellationToken::new())
            .await
            .unwrap()
            .len(),
        1
    );
    let recovered = || async { sweeper.recover().await.unwrap() > 0 };
    assert!(eventually_async(Duration::from_secs(10), recovered).await);
    // Second delivery, alone and at the limit: it is marked dead when received, then its
    // process "dies" again and recovery dead-letters it with no host watching.
    let second = consumer().await.unwrap();
    let alone = second
        .take_alone()
        .await
        .unwrap()
        .expect("the recovered member");
    assert_eq!(alone.delivery_count, 2);
    assert!(eventually_async(Duration::from_secs(10), recovered).await);
    assert_eq!(s.redis.counts("wf-items").dead, 1);
    let relay = s.workflows.relay(s.transport.clone());
    relay.sweep().await.unwrap();
    let status = batch.status().await.unwrap();
    assert_eq!((status.dead, status.pending()), (1, 0));
    assert_eq!(status.dead_members[0].reason, "delivery_limit");
    // The consumers' own relay sweeps too: wait for whichever sends the callback.
    let done = || async { batch.status().await.unwrap().state == BatchState::Done };
    assert!(eventually_async(Duration::from_secs(10), done).await);
    assert_eq!(
        s.redis.counts("wf-done").ready,
        1,
        "the death callback, once"
    );
    sweeper.close().await.unwrap();
}
