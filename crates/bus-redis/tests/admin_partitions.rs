//! Administration of a partitioned queue on a real redis-server: listed once, counts
//! summed with a per-shard breakdown, and peek, scheduled, dead letters, requeue, delete,
//! send and purge over every shard; per-key ordering's backlog counted, purged, and freed
//! by deleting, moving or editing the dead letter that blocks it.

mod common;

use bus_core::flow::PerKey;
use bus_core::transport::ConsumerExt;
use bus_core::transport::{Consumer, ConsumerOptions, DeadLetterReason, Source};
use bus_core::{Bus, BusConfig, Envelope, Format, Transport};
use bus_redis::admin::{Admin, Edited, Selection};
use bus_redis::keys::QueueKeys;
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::TestRedis;
use common::Work;
use fred::prelude::{ClientLike, HashesInterface};
use fred::types::{ClusterHash, CustomCommand};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn counts(stats: &bus_core::records::QueueStats) -> [u64; 4] {
    [
        stats.ready,
        stats.in_flight,
        stats.delayed,
        stats.dead_letters,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_queue_is_one_queue_with_a_breakdown_per_shard() {
    let redis = TestRedis::start().unwrap();
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace())
        .partitions("work", 3);
    let transport = RedisTransport::connect(&config).await.unwrap();
    let bus = Bus::new(transport.clone(), BusConfig::default());
    for n in 0..6 {
        bus.send(&Work { n }).await.unwrap();
    }
    let work = Source::queue("work").unwrap();
    let consumer = transport
        .consumer(&work, ConsumerOptions::new(Duration::from_secs(30), 5))
        .await
        .unwrap();
    // An administration that was not told about the partitions reads them from Redis.
    let plain = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace());
    let admin = Admin::new(RedisTransport::connect(&plain).await.unwrap());
    // One from each shard (fair shares of 3): in flight, then dead-lettered with an error.
    let held = consumer.take(3, &CancellationToken::new()).await.unwrap();
    assert_eq!(held.len(), 3);
    let in_flight = admin.in_flight(&work, 10).await.unwrap();
    let held_ids: Vec<String> = in_flight.iter().map(|m| m.storage_id.clone()).collect();
    assert_eq!(held_ids.len(), 3);
    assert!(held_ids.iter().all(|id| id.contains(":~")), "{held_ids:?}");
    let counters = admin.counters(&work).await.unwrap();
    assert_eq!((counters.taken_total, counters.stored), (3, 3));
    for delivery in &held {
        let failure = bus_core::records::ErrorRecord::now("boom");
        consumer
            .dead_letter(
                &delivery.receipt,
                DeadLetterReason::Rejected,
                Some(&failure),
            )
            .await
            .unwrap();
    }
    let errors = admin.errors(&work, &held_ids).await.unwrap();
    assert!(
        errors
            .iter()
            .all(|e| e.len() == 1 && e[0].message == "boom"),
        "{errors:?}"
    );
    for n in 10..13 {
        bus.send_delayed(&Work { n }, Duration::from_secs(3600))
            .await
            .unwrap();
    }
    consumer.close().await.unwrap();

    assert_eq!(admin.queues().await.unwrap(), ["work"]);
    assert!(admin.exists(&work).await.unwrap());
    assert_eq!(admin.partitions(&work).await.unwrap(), 3);
    assert_eq!(counts(&admin.stats(&work).await.unwrap()), [3, 0, 3, 3]);
    let shards = admin.shard_stats(&work).await.unwrap();
    let names: Vec<&str> = shards.iter().map(|s| s.queue.as_str()).collect();
    assert_eq!(names, ["work:0", "work:1", "work:2"]);
    for shard in &shards {
        assert_eq!(counts(shard), [1, 0, 1, 1], "{}", shard.queue);
    }
    let listed = admin.stats_all().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(counts(&listed[0]), [3, 0, 3, 3]);

    assert_eq!(admin.peek(&work, 10).await.unwrap().len(), 3);
    assert_eq!(admin.peek(&work, 2).await.unwrap().len(), 2);
    let scheduled = admin.scheduled(&work, 10).await.unwrap();
    let shard_of = |id: &str| id.split_once(':').unwrap().0.to_owned();
    let scheduled_shards: BTreeSet<String> =
        scheduled.iter().map(|s| shard_of(&s.storage_id)).collect();
    assert_eq!(scheduled_shards.len(), 3, "{scheduled:?}");

    let dead = admin.dead_letters(&work, 10).await.unwrap();
    let ids: Vec<String> = dead.iter().map(|d| d.storage_id.clone()).collect();
    assert_eq!(
        ids.iter()
            .map(|id| shard_of(id))
            .collect::<BTreeSet<_>>()
            .len(),
        3
    );
    assert!(dead.iter().all(|d| d.reason.as_deref() == Some("rejected")));
    let bare = ids[0].split_once(':').unwrap().1.to_owned();
    let requeued = admin
        .requeue(
            &work,
            &Selection::Ids(vec![ids[0].clone(), "7:~1".into(), bare.clone()]),
            None,
        )
        .await
        .unwrap();
    assert_eq!(requeued.requeued, [ids[0].clone()]);
    assert_eq!(requeued.not_found, ["7:~1".to_owned(), bare]);
    assert_eq!(counts(&admin.stats(&work).await.unwrap()), [4, 0, 3, 2]);
    assert!(admin.delete_dead_letter(&work, &ids[1]).await.unwrap());
    assert!(!admin.delete_dead_letter(&work, &ids[1]).await.unwrap());
    let rest = admin.requeue(&work, &Selection::All, None).await.unwrap();
    assert_eq!(rest.requeued, [ids[2].clone()]);
    assert_eq!(counts(&admin.stats(&work).await.unwrap()), [5, 0, 3, 0]);

    // Raw sends spread over the shards (by message id).
    for n in 0..30 {
        let envelope = Envelope::new("work", Format::Json, format!("{{\"n\":{n}}}"));
        admin.send(&work, &envelope).await.unwrap();
    }
    let shards = admin.shard_stats(&work).await.unwrap();
    assert!(shards.iter().all(|s| s.ready > 3), "{shards:?}");
    assert_eq!(admin.stats(&work).await.unwrap().ready, 35);

    let purged = admin.purge(&work).await.unwrap();
    assert_eq!((purged.ready, purged.delayed), (35, 3));
    assert_eq!(counts(&admin.stats(&work).await.unwrap()), [0, 0, 0, 0]);

    // A queue that is not partitioned has no breakdown.
    let other = Source::queue("other").unwrap();
    assert!(admin.shard_stats(&other).await.unwrap().is_empty());
}

/// A queue of 3 shards, ordered one at a time per key, with its bus and an admin.
async fn ordered(redis: &TestRedis, order: PerKey) -> (RedisTransport, Bus, Admin, Source) {
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace())
        .partitions("work", 3);
    let transport = RedisTransport::connect(&config).await.unwrap();
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let admin = Admin::new(transport.clone());
    let work = Source::queue("work").unwrap();
    admin.order_per_key(&work, Some(order)).await.unwrap();
    (transport, bus, admin, work)
}

/// The keys' waiting lists left in Redis (a test's own server: KEYS is fine here).
async fn keyed_lists(transport: &RedisTransport) -> usize {
    let keys = CustomCommand::new_static("KEYS", ClusterHash::Random, false);
    let pattern = format!("{}:*:kq:*", transport.config().key_prefix());
    let found: Vec<String> = transport
        .client()
        .custom(keys, vec![pattern])
        .await
        .unwrap();
    found.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_waiting_for_their_key_are_counted_and_purged() {
    let redis = TestRedis::start().unwrap();
    let (transport, bus, admin, work) = ordered(&redis, PerKey::fifo()).await;
    for n in 0..40 {
        bus.send_keyed(&Work { n }, &format!("key-{}", n % 10))
            .await
            .unwrap();
    }
    let stats = admin.stats(&work).await.unwrap();
    assert_eq!((stats.ready, stats.keyed), (0, 40), "{stats:?}");
    assert_eq!(keyed_lists(&transport).await, 10);
    // Five keys start one message each (their slot taken: they leave `kready`).
    let consumer = transport
        .consumer(&work, ConsumerOptions::new(Duration::from_secs(30), 5))
        .await
        .unwrap();
    let mut held = Vec::new();
    while held.len() < 5 {
        let want = 5 - held.len();
        held.extend(
            consumer
                .take(want, &CancellationToken::new())
                .await
                .unwrap(),
        );
    }
    bus.send_batch(&[Work { n: 100 }, Work { n: 101 }])
        .await
        .unwrap();
    let stats = admin.stats(&work).await.unwrap();
    assert_eq!(
        (stats.ready, stats.keyed, stats.in_flight),
        (2, 35, 5),
        "{stats:?}"
    );
    let shards = admin.shard_stats(&work).await.unwrap();
    assert_eq!(shards.iter().map(|s| s.keyed).sum::<u64>(), 35);
    // Per-key backlogs: the five keys with a message in flight have 3 waiting, the others 4.
    let backlogs = admin.key_backlogs(&work, 20).await.unwrap();
    assert!(backlogs.complete);
    let rows: Vec<(u64, u64)> = backlogs
        .keys
        .iter()
        .map(|k| (k.waiting, k.in_flight))
        .collect();
    assert_eq!(rows, [[(4, 0); 5], [(3, 1); 5]].concat(), "{backlogs:?}");
    assert_eq!(admin.key_backlogs(&work, 2).await.unwrap().keys.len(), 2);

    let purged = admin.purge(&work).await.unwrap();
    assert_eq!((purged.ready, purged.delayed, purged.keyed), (2, 0, 35));
    let stats = admin.stats(&work).await.unwrap();
    assert_eq!(
        (stats.ready, stats.keyed, stats.in_flight),
        (0, 0, 5),
        "{stats:?}"
    );
    assert_eq!(keyed_lists(&transport).await, 0, "every key's list is gone");
    assert_eq!(admin.purge(&work).await.unwrap(), Default::default());

    // The messages in flight keep their slots; once acked, their keys start anew.
    let receipts: Vec<_> = held.iter().map(|d| d.receipt.clone()).collect();
    consumer.ack(&receipts).await.unwrap();
    bus.send_keyed(&Work { n: 200 }, "key-0").await.unwrap();
    assert_eq!(admin.stats(&work).await.unwrap().keyed, 1);
    let next = tokio::time::timeout(
        Duration::from_secs(10),
        consumer.take(1, &CancellationToken::new()),
    )
    .await
    .expect("the purged key runs again")
    .unwrap();
    assert_eq!(next.len(), 1);
    let stats = admin.stats(&work).await.unwrap();
    assert_eq!((stats.keyed, stats.in_flight), (0, 1), "{stats:?}");
    consumer.close().await.unwrap();
}

/// Sends three messages of key "k" to the ordered, blocking queue `work` of `transport`,
/// and dead-letters the first: the key is then blocked (checked). Returns the consumer.
async fn block_key(transport: &RedisTransport, bus: &Bus) -> Box<dyn Consumer> {
    let work = Source::queue("work").unwrap();
    let batch: Vec<Work> = (0..3).map(|n| Work { n }).collect();
    bus.send_batch_keyed(&batch, "k").await.unwrap();
    let consumer = transport
        .consumer(&work, ConsumerOptions::new(Duration::from_secs(30), 5))
        .await
        .unwrap();
    let first = consumer.take(5, &CancellationToken::new()).await.unwrap();
    assert_eq!(first.len(), 1, "one at a time");
    let failure = bus_core::records::ErrorRecord::now("boom");
    consumer
        .dead_letter(
            &first[0].receipt,
            DeadLetterReason::Rejected,
            Some(&failure),
        )
        .await
        .unwrap();
    // Blocked: nothing of the key starts.
    let stop = CancellationToken::new();
    let cancel = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        cancel.cancel();
    });
    assert!(consumer.take(5, &stop).await.unwrap().is_empty());
    let stats = Admin::new(transport.clone()).stats(&work).await.unwrap();
    assert_eq!((stats.keyed, stats.dead_letters), (2, 1), "{stats:?}");
    consumer
}

/// The blocked key moves on: its next message starts (one at a time), and exactly one slot
/// is taken (`kbusy`, the hash of the key's shard, counts that message alone). Returns it.
async fn key_moves_on(
    transport: &RedisTransport,
    consumer: &dyn Consumer,
    kbusy: &str,
) -> bus_core::transport::Delivery {
    let mut next = tokio::time::timeout(
        Duration::from_secs(10),
        consumer.take(5, &CancellationToken::new()),
    )
    .await
    .expect("the key moves on")
    .unwrap();
    assert_eq!(next.len(), 1, "still one at a time");
    let busy: Option<i64> = transport.client().hget(kbusy, "k").await.unwrap();
    assert_eq!(busy, Some(1));
    next.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_dead_letter_that_blocks_its_key_frees_the_key() {
    let redis = TestRedis::start().unwrap();
    let blocking = PerKey::fifo().dead_letter_blocks(true);
    let (transport, bus, admin, work) = ordered(&redis, blocking).await;
    let consumer = block_key(&transport, &bus).await;
    let dead = admin.dead_letters(&work, 10).await.unwrap();
    assert!(admin
        .delete_dead_letter(&work, &dead[0].storage_id)
        .await
        .unwrap());
    let shard = &transport.shard_keys(&work)[usize::from(bus_redis::shard_of_key(b"k", 3))];
    key_moves_on(&transport, consumer.as_ref(), &shard.kbusy).await;
    let stats = admin.stats(&work).await.unwrap();
    assert_eq!((stats.keyed, stats.in_flight), (1, 1), "{stats:?}");
    consumer.close().await.unwrap();
}

/// `bus requeue --to`: a blocking dead letter moved to another queue leaves its key, both
/// when the target is in another slot (copy, then delete) and in the same slot
/// (`admin_move.lua`: a subscription of the topic named like the queue), and arrives there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeuing_a_blocking_dead_letter_to_another_queue_frees_its_key() {
    let redis = TestRedis::start().unwrap();
    let blocking = PerKey::fifo().dead_letter_blocks(true);
    // Partitioned: every move leaves the shard's slot.
    let (transport, bus, admin, work) = ordered(&redis, blocking).await;
    let consumer = block_key(&transport, &bus).await;
    let elsewhere = Source::queue("elsewhere").unwrap();
    let moved = admin
        .requeue(&work, &Selection::All, Some(&elsewhere))
        .await
        .unwrap();
    assert_eq!(moved.requeued.len(), 1, "{moved:?}");
    let shard = &transport.shard_keys(&work)[usize::from(bus_redis::shard_of_key(b"k", 3))];
    key_moves_on(&transport, consumer.as_ref(), &shard.kbusy).await;
    assert_eq!(admin.stats(&elsewhere).await.unwrap().ready, 1);
    consumer.close().await.unwrap();

    // Not partitioned, to a queue of the same hash tag: one script.
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(format!("{}-solo", redis.namespace()));
    let transport = RedisTransport::connect(&config).await.unwrap();
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let admin = Admin::new(transport.clone());
    admin.order_per_key(&work, Some(blocking)).await.unwrap();
    let consumer = block_key(&transport, &bus).await;
    let audit = Source::subscription("work", "audit").unwrap();
    let moved = admin
        .requeue(&work, &Selection::All, Some(&audit))
        .await
        .unwrap();
    assert_eq!(moved.requeued.len(), 1, "{moved:?}");
    let keys = QueueKeys::new(config.key_prefix(), &work);
    key_moves_on(&transport, consumer.as_ref(), &keys.kbusy).await;
    assert_eq!(admin.stats(&audit).await.unwrap().ready, 1);
    consumer.close().await.unwrap();
}

/// A blocking dead letter edited and requeued runs next for its key, holding its slot:
/// the key's later messages wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_blocking_dead_letter_runs_next_for_its_key() {
    let redis = TestRedis::start().unwrap();
    let blocking = PerKey::fifo().dead_letter_blocks(true);
    let (transport, bus, admin, work) = ordered(&redis, blocking).await;
    let consumer = block_key(&transport, &bus).await;
    let dead = admin.dead_letters(&work, 10).await.unwrap();
    let edited = admin
        .edit_and_requeue(
            &work,
            &dead[0].storage_id,
            Default::default(),
            r#"{"n":77}"#,
            "test",
        )
        .await
        .unwrap();
    assert!(matches!(edited, Edited::Requeued { .. }), "{edited:?}");
    let shard = &transport.shard_keys(&work)[usize::from(bus_redis::shard_of_key(b"k", 3))];
    let next = key_moves_on(&transport, consumer.as_ref(), &shard.kbusy).await;
    let payload = String::from_utf8_lossy(&next.payload);
    assert!(
        payload.contains(r#""n":77"#),
        "not the edited one first: {payload}"
    );
    let stats = admin.stats(&work).await.unwrap();
    assert_eq!((stats.keyed, stats.in_flight), (2, 1), "{stats:?}");
    // Acked, it gives its slot back: the key's next message starts.
    consumer
        .ack(std::slice::from_ref(&next.receipt))
        .await
        .unwrap();
    let after = key_moves_on(&transport, consumer.as_ref(), &shard.kbusy).await;
    let payload = String::from_utf8_lossy(&after.payload);
    assert!(
        payload.contains(r#""n":1"#),
        "not the key's next: {payload}"
    );
    consumer.close().await.unwrap();
}
