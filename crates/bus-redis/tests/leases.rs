//! Leases (docs/redis-layout.md): the fresh envelopes of one reserve share one lock and an
//! implicit delivery count of 1; leaving a lease other than by ack stores the message
//! with that count, so counts, tokens and crash recovery hold as before.

mod common;

use bus_core::records::ErrorRecord;
use bus_core::transport::ConsumerExt;
use bus_core::transport::{Consumer, ConsumerOptions, DeadLetterReason, Receipt, Source};
use bus_core::{Bus, BusConfig, Transport};
use bus_redis::RedisTransport;
use bus_test_redis::TestRedis;
use common::{eventually, transport, Counts, Work};
use fred::prelude::{HashesInterface, ListInterface, SortedSetsInterface};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn work() -> Source {
    Source::queue("work").unwrap()
}

async fn setup(redis: &TestRedis, n: u64, lock: Duration) -> (RedisTransport, Box<dyn Consumer>) {
    let transport = transport(redis).await;
    let bus = Bus::new(std::sync::Arc::new(transport.clone()), BusConfig::default());
    let batch: Vec<Work> = (0..n).map(|n| Work { n }).collect();
    bus.send_batch(&batch).await.unwrap();
    let consumer = transport
        .consumer(&work(), ConsumerOptions::new(lock, 5))
        .await
        .unwrap();
    (transport, consumer)
}

fn receipts(deliveries: &[bus_core::transport::Delivery]) -> Vec<Receipt> {
    deliveries.iter().map(|d| d.receipt.clone()).collect()
}

fn body(delivery: &bus_core::transport::Delivery) -> u64 {
    let envelope = bus_core::Envelope::decode(&delivery.payload).unwrap();
    serde_json::from_slice::<Work>(envelope.body.as_ref())
        .unwrap()
        .n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_leased_message_keeps_its_count_and_its_place_in_the_order() {
    let redis = TestRedis::start().unwrap();
    let (transport, consumer) = setup(&redis, 3, Duration::from_secs(60)).await;
    let stop = CancellationToken::new();
    let held = consumer.take(3, &stop).await.unwrap();
    assert_eq!(
        held.iter().map(|d| d.delivery_count).collect::<Vec<_>>(),
        [1, 1, 1]
    );
    let error = ErrorRecord::now("boom");
    consumer
        .retry(&held[1].receipt, Duration::ZERO, &error)
        .await
        .unwrap();
    // A re-sent retry finds the message gone from the lease and changes nothing.
    consumer
        .retry(&held[1].receipt, Duration::ZERO, &error)
        .await
        .unwrap();
    let keys = transport.keys(&work());
    let ready: Vec<String> = transport.client().lrange(&keys.ready, 0, -1).await.unwrap();
    assert_eq!(ready.len(), 1, "{ready:?}");
    assert!(
        ready[0].starts_with('~'),
        "stored under a storage id: {ready:?}"
    );
    let count: u32 = transport
        .client()
        .hget(&keys.deliveries, &ready[0])
        .await
        .unwrap();
    assert_eq!(
        count, 1,
        "its first delivery, written when it left the lease"
    );
    assert_eq!(redis.counts("work").inflight, 2);

    // A message sent after it comes after it, and its next delivery is its second.
    let bus = Bus::new(std::sync::Arc::new(transport.clone()), BusConfig::default());
    bus.send(&Work { n: 9 }).await.unwrap();
    let again = consumer.take(10, &stop).await.unwrap();
    assert_eq!(again.iter().map(body).collect::<Vec<_>>(), [1, 9]);
    assert_eq!(
        again.iter().map(|d| d.delivery_count).collect::<Vec<_>>(),
        [2, 1]
    );
    let mut all = receipts(&again);
    all.extend([held[0].receipt.clone(), held[2].receipt.clone()]);
    consumer.ack(&all).await.unwrap();
    assert_eq!(redis.counts("work"), Counts::default());
    let left: i64 = transport.client().zcard(&keys.leases).await.unwrap();
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_leased_message_is_fresh_again_at_the_head() {
    let redis = TestRedis::start().unwrap();
    let (transport, consumer) = setup(&redis, 4, Duration::from_secs(60)).await;
    let stop = CancellationToken::new();
    let held = consumer.take(3, &stop).await.unwrap();
    consumer.release(&receipts(&held[1..])).await.unwrap();
    // A re-sent release finds them gone from the lease: nothing is pushed twice.
    consumer.release(&receipts(&held[1..])).await.unwrap();
    let keys = transport.keys(&work());
    let ready: i64 = transport.client().llen(&keys.ready).await.unwrap();
    assert_eq!(ready, 3);
    let again = consumer.take(10, &stop).await.unwrap();
    assert_eq!(again.iter().map(body).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(
        again.iter().map(|d| d.delivery_count).collect::<Vec<_>>(),
        [1, 1, 1]
    );
    let mut all = receipts(&again);
    all.push(held[0].receipt.clone());
    consumer.ack(&all).await.unwrap();
    assert_eq!(redis.counts("work"), Counts::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_leased_message_is_kept_unchanged_with_its_count() {
    let redis = TestRedis::start().unwrap();
    let (transport, consumer) = setup(&redis, 2, Duration::from_secs(60)).await;
    let held = consumer.take(2, &CancellationToken::new()).await.unwrap();
    let error = ErrorRecord::now("no");
    consumer
        .dead_letter(&held[0].receipt, DeadLetterReason::Rejected, Some(&error))
        .await
        .unwrap();
    let keys = transport.keys(&work());
    let client = transport.client();
    let dead: Vec<String> = client.lrange(&keys.dead, 0, -1).await.unwrap();
    assert_eq!(dead.len(), 1);
    let kept: bytes::Bytes = client.hget(&keys.msgs, &dead[0]).await.unwrap();
    assert_eq!(kept, held[0].payload);
    let count: u32 = client.hget(&keys.deliveries, &dead[0]).await.unwrap();
    assert_eq!(count, 1);
    consumer.ack(&[held[1].receipt.clone()]).await.unwrap();
    let c = redis.counts("work");
    assert_eq!((c.ready, c.inflight, c.dead, c.msgs), (0, 0, 1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_recovered_once_and_its_receipts_go_stale() {
    let redis = TestRedis::start().unwrap();
    let (transport, consumer) = setup(&redis, 5, Duration::from_millis(300)).await;
    let stop = CancellationToken::new();
    let held = consumer.take(5, &stop).await.unwrap();
    // Renewing holds the lease: the lock moves forward.
    let keys = transport.keys(&work());
    let client = transport.client();
    let before: f64 = client
        .zscore(&keys.leases, held[0].receipt.key().as_ref())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(consumer.renew(&receipts(&held)).await.unwrap(), [true; 5]);
    let after: f64 = client
        .zscore(&keys.leases, held[0].receipt.key().as_ref())
        .await
        .unwrap();
    assert!(after > before, "{before} -> {after}");
    consumer.ack(&receipts(&held[..2])).await.unwrap();

    // Its consumer stops renewing: several sweepers at once recover the rest once.
    let mut sweepers = Vec::new();
    for _ in 0..3 {
        sweepers.push(
            transport
                .consumer(&work(), ConsumerOptions::new(Duration::from_secs(60), 5))
                .await
                .unwrap(),
        );
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            futures::future::try_join_all(sweepers.iter().map(|s| s.recover()))
                .await
                .unwrap();
            redis.counts("work").inflight == 0
        })
        .await
    );
    let suspects: Vec<String> = client.lrange(&keys.suspects, 0, -1).await.unwrap();
    assert_eq!(suspects.len(), 3, "{suspects:?}");
    for id in &suspects {
        let count: u32 = client.hget(&keys.deliveries, id).await.unwrap();
        assert_eq!(count, 1, "the lost delivery is counted");
        let errors: String = client.hget(&keys.errors, id).await.unwrap();
        assert!(errors.contains("lock expired"), "{errors}");
    }
    // The old receipts are stale: ack and retry change nothing.
    consumer.ack(&receipts(&held)).await.unwrap();
    consumer
        .retry(&held[2].receipt, Duration::ZERO, &ErrorRecord::now("late"))
        .await
        .unwrap();
    assert_eq!(client.llen::<i64, _>(&keys.ready).await.unwrap(), 0);
    assert_eq!(client.llen::<i64, _>(&keys.suspects).await.unwrap(), 3);
    // Renew says lost: its consumer is alive after all (a stall, not a crash), so the
    // messages it lost are no crash suspects and go back to the queue as ordinary ones.
    assert_eq!(
        consumer.renew(&receipts(&held[2..])).await.unwrap(),
        [false; 3]
    );
    assert_eq!(client.llen::<i64, _>(&keys.suspects).await.unwrap(), 0);
    assert_eq!(client.llen::<i64, _>(&keys.ready).await.unwrap(), 3);
    // Delivered again as their second delivery, in the order reserved.
    let again = sweepers[0]
        .take(10, &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    assert!(again.iter().all(|d| d.delivery_count == 2));
    let order: Vec<_> = again.iter().map(body).collect();
    assert_eq!(order, [2, 3, 4]);
    sweepers[0].ack(&receipts(&again)).await.unwrap();
    assert_eq!(redis.counts("work"), Counts::default());
}
