//! Management over leased messages (docs/redis-layout.md): fresh envelopes a consumer
//! reserved are held in one lease per batch, not one lock per message; management
//! still counts them in flight, and never deletes them unasked.

mod common;

use bus_core::transport::ConsumerExt;
use bus_core::transport::{ConsumerOptions, Source};
use bus_core::Transport;
use bus_management::Error;
use common::{setup, Paid};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_messages_count_in_flight_and_keep_a_subscription_from_removal() {
    let s = setup().await;
    let mail = Source::subscription("paid", "mail").unwrap();
    let consumer = s
        .transport
        .consumer(&mail, ConsumerOptions::new(Duration::from_millis(300), 5))
        .await
        .unwrap();
    for n in 0..3 {
        s.bus.publish(&Paid { n }).await.unwrap();
    }
    let held = consumer.take(3, &CancellationToken::new()).await.unwrap();
    assert_eq!(held.len(), 3);
    let stats = s.management.stats(&mail).await.unwrap();
    assert_eq!(
        (stats.ready, stats.in_flight, stats.expired_locks),
        (0, 3, 0)
    );

    // Unasked, a subscription whose messages are leased stays.
    match s
        .management
        .remove_subscription("paid", "mail", false)
        .await
    {
        Err(Error::NotEmpty { in_flight: 3, .. }) => {}
        other => panic!("expected NotEmpty with 3 in flight, got {other:?}"),
    }
    // Once the lease's lock expires, its messages count as expired locks.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let stats = s.management.stats(&mail).await.unwrap();
    assert_eq!((stats.in_flight, stats.expired_locks), (3, 3), "{stats:?}");

    // Forced: every key of the queue goes, the lease's own list and set included.
    s.management
        .remove_subscription("paid", "mail", true)
        .await
        .unwrap();
    let keys = s.redis.client().cmd(&["KEYS", "*"]).unwrap();
    let left: Vec<&str> = keys
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k.as_str())
        .filter(|k| k.contains("s:mail"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    consumer.close().await.unwrap();
}
