//! `Bus::send_with` on BabelQueue queues returns the `trace_id` stored in the BabelQueue
//! envelope: the one given, or one the bus made when none was given: a UUID, as the SDKs
//! mint (the one of the W3C trace the send carries, else a random one).

use bus_core::transport::ConsumerExt;
use std::time::Duration;

use bus_babelqueue::{unframe, BabelTransport, Options};
use bus_core::transport::{ConsumerOptions, Source};
use bus_core::{Bus, BusConfig, RedisCommand, SendOptions, Transport};
use bus_redis::RedisConfig;
use bus_test_redis::TestRedis;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "orders", urn = "urn:babel:orders:created")]
struct OrderCreated {
    id: u32,
}

/// The `trace_id` of the next element of `orders`, as stored.
async fn stored_trace_id(transport: &BabelTransport) -> String {
    let consumer = transport
        .consumer(
            &Source::queue("orders").unwrap(),
            ConsumerOptions::new(Duration::from_secs(30), 3),
        )
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let delivery = consumer
        .take(1, &stop)
        .await
        .unwrap()
        .pop()
        .expect("a message");
    consumer
        .ack(std::slice::from_ref(&delivery.receipt))
        .await
        .unwrap();
    // Unframed: a legacy element with headers besides the trace id is framed.
    let element: Value = serde_json::from_slice(&unframe(&delivery.payload).0).unwrap();
    element["trace_id"].as_str().expect("a trace_id").to_owned()
}

#[tokio::test]
async fn send_with_returns_the_trace_id_stored_in_the_babelqueue_envelope() {
    let redis = TestRedis::start().expect("redis-server");
    for options in [Options::default(), Options::laravel()] {
        let config = RedisConfig::from_url(&redis.url()).unwrap();
        let transport = BabelTransport::connect(&config, options).await.unwrap();
        let bus = Bus::new(transport.clone(), BusConfig::default());

        let given = bus
            .send_with(
                &OrderCreated { id: 1 },
                &SendOptions::new().trace_id("t-given"),
            )
            .await
            .unwrap();
        assert_eq!(given.trace_id.as_deref(), Some("t-given"));
        assert_eq!(stored_trace_id(&transport).await, "t-given");

        let made = bus
            .send_with(&OrderCreated { id: 2 }, &SendOptions::new())
            .await
            .unwrap();
        let made = made
            .trace_id
            .expect("the bus makes one for a BabelQueue queue");
        assert_eq!(stored_trace_id(&transport).await, made);
        let uuid = uuid::Uuid::parse_str(&made).expect("a UUID");
        assert_eq!(
            (uuid.get_version_num(), uuid.hyphenated().to_string()),
            (4, made)
        );

        let traced = SendOptions::new().header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        );
        let made = bus
            .send_with(&OrderCreated { id: 3 }, &traced)
            .await
            .unwrap();
        let trace = "4bf92f35-77b3-4da6-a3ce-929d0e0e4736";
        assert_eq!(made.trace_id.as_deref(), Some(trace));
        assert_eq!(stored_trace_id(&transport).await, trace);
    }
}
