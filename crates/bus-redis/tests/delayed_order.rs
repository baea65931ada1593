//! In which order messages sent for one due time become ready (issue #10, point 17):
//! the order they were sent, through the Rust client and for a foreign producer's batch
//! (`send_at.lua` with ids of its own choosing). Against a real redis-server.
//!
//! Both tests failed when written: `send_at.lua` gives every message of a due time the
//! same score, and Redis orders equal scores by member, so messages due together are
//! promoted in the byte order of their ids (see docs/wire-format.md, "Order"). Reported
//! for a fix in the scripts (or in the ids the client draws), not worked around here.

mod common;

use bus_core::transport::ConsumerExt;
use bus_core::transport::Placement;
use bus_core::transport::{ConsumerOptions, Outgoing, Source};
use bus_core::{Bus, BusConfig, Transport};
use bus_redis::RedisTransport;
use bus_test_redis::TestRedis;
use common::Work;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

const MESSAGES: u64 = 50;

/// Far enough ahead that every send of the test is stored before it is due.
fn due_soon() -> SystemTime {
    SystemTime::now() + Duration::from_millis(500)
}

/// Reserves until `MESSAGES` bodies were received (acking them); their `n`s in the order
/// reserve returned them.
async fn received_order(transport: &RedisTransport) -> Vec<u64> {
    let source = Source::queue("work").unwrap();
    let options = ConsumerOptions::new(Duration::from_secs(30), 5);
    let consumer = transport.consumer(&source, options).await.unwrap();
    let stop = CancellationToken::new();
    let order = Mutex::new(Vec::new());
    let all = common::eventually(Duration::from_secs(20), || async {
        // Fewer than the whole batch per call, so promotion across calls is covered.
        let deliveries = consumer.take(7, &stop).await.unwrap();
        let receipts: Vec<_> = deliveries.iter().map(|d| d.receipt.clone()).collect();
        consumer.ack(&receipts).await.unwrap();
        let mut order = order.lock().unwrap();
        for delivery in &deliveries {
            let envelope: serde_json::Value = serde_json::from_slice(&delivery.payload).unwrap();
            order.push(envelope["body"]["n"].as_u64().unwrap());
        }
        order.len() as u64 >= MESSAGES
    });
    let arrived = all.await;
    let order = order.into_inner().unwrap();
    assert!(arrived, "only {} of {MESSAGES} arrived", order.len());
    consumer.close().await.unwrap();
    order
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_for_one_due_time_arrive_in_the_order_sent() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let due = due_soon();
    for n in 0..MESSAGES {
        bus.send_at(&Work { n }, due).await.unwrap();
    }
    let order = received_order(&transport).await;
    assert_eq!(order, (0..MESSAGES).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_batch_for_one_due_time_arrives_in_the_order_sent() {
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    let sent = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    // Ids as a foreign producer might number them: "m-10" sorts before "m-2".
    let batch: Vec<Outgoing> = (0..MESSAGES)
        .map(|n| {
            let id = format!("m-{n}");
            let envelope = format!(
                r#"{{"v":1,"id":"{id}","type":"work","sent":{},"body":{{"n":{n}}}}}"#,
                sent.as_millis()
            );
            Outgoing {
                id: id.into(),
                payload: envelope.into(),
            }
        })
        .collect();
    transport
        .send("work", Placement::now().due(Some(due_soon())), batch)
        .await
        .unwrap();
    let order = received_order(&transport).await;
    assert_eq!(order, (0..MESSAGES).collect::<Vec<_>>());
}
