//! The in-memory transport's own rules, beyond the conformance suite: a repeated id is a
//! message of its own, as in Redis (an `RPUSH` per send), even while the first is held.

use bus_core::transport::ConsumerExt;
use bus_core::transport::Placement;
use bus_core::transport::{ConsumerOptions, Outgoing, Source};
use bus_core::{MemoryTransport, MessageId, Transport};
use bytes::Bytes;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn element(id: &str, n: u8) -> Outgoing {
    Outgoing {
        id: MessageId::from(id.to_owned()),
        payload: Bytes::from(vec![b'{', b'0' + n, b'}']),
    }
}

#[tokio::test]
async fn a_repeated_id_is_delivered_twice_with_receipts_of_its_own() {
    let transport = MemoryTransport::new();
    let queue = Source::queue("q").unwrap();
    let options = ConsumerOptions::new(Duration::from_secs(30), 5);
    let consumer = transport.consumer(&queue, options).await.unwrap();
    let stop = CancellationToken::new();
    transport
        .send("q", Placement::now(), vec![element("same", 1)])
        .await
        .unwrap();
    let first = consumer.take(10, &stop).await.unwrap();
    // Sent again while the first copy is held.
    transport
        .send("q", Placement::now(), vec![element("same", 2)])
        .await
        .unwrap();
    let second = consumer.take(10, &stop).await.unwrap();
    assert_eq!((first.len(), second.len()), (1, 1));
    assert_eq!(&first[0].payload[..], b"{1}");
    assert_eq!(&second[0].payload[..], b"{2}");
    assert_ne!(first[0].receipt.key(), second[0].receipt.key());
    assert_eq!(transport.stats(&queue).in_flight, 2);
    consumer.ack(&[second[0].receipt.clone()]).await.unwrap();
    assert_eq!(transport.stats(&queue).in_flight, 1);
    // The first copy's receipt still holds its own reservation.
    assert_eq!(
        consumer.renew(&[first[0].receipt.clone()]).await.unwrap(),
        [true]
    );
    consumer.ack(&[first[0].receipt.clone()]).await.unwrap();
    let stats = transport.stats(&queue);
    assert_eq!((stats.ready, stats.in_flight), (0, 0));
}
