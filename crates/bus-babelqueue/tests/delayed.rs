//! Delays on the Laravel layout: a delayed publish from the Python SDK arrives after its
//! due time and not before; a Rust retry with a delay lands in `:delayed`.

mod common;

use bus_core::transport::Placement;
use std::time::{Duration, Instant};

use bus_babelqueue::{BabelQueue, Envelope, Options};
use bus_core::records::ErrorRecord;
use bus_core::transport::{Outgoing, WireFormat};
use bus_core::{Format, MessageId, Transport};
use bus_test_redis::TestRedis;
use common::{consumer, receive, run_py, transport, URN};
use serde_json::{json, Value};

fn now_secs_f64() -> f64 {
    bus_core::transport::now_ms() as f64 / 1000.0
}

#[tokio::test]
async fn a_delayed_publish_from_python_arrives_after_its_due_time() {
    let redis = TestRedis::start().expect("redis-server");
    let url = redis.url();
    let transport = transport(&url, Options::laravel()).await;
    let consumer = consumer(&transport, "orders", Duration::from_secs(30), 3).await;
    let (out, _) = run_py(&[
        "publish-delayed",
        "--url",
        &url,
        "--layout",
        "laravel",
        "--queue",
        "orders",
        "--delay",
        "2",
    ])
    .await;
    // BabelQueue's due time: floor(now) + ceil(delay), in whole seconds, with its `now`
    // read inside the call: between the helper's two readings, which can straddle a second.
    let seconds = |field: &str| out[0][field].as_f64().expect("time").floor() + 2.0;
    let (due, latest_due) = (seconds("published_after"), seconds("published_before"));
    let started = Instant::now();
    let delivery = loop {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never delivered"
        );
        let batch = receive(&*consumer, 10).await;
        let now = now_secs_f64();
        if let Some(d) = batch.into_iter().next() {
            assert!(
                now >= due,
                "delivered {:.3} s before its due time",
                due - now
            );
            assert!(
                now < latest_due + 2.0,
                "delivered {:.3} s late",
                now - latest_due
            );
            break d;
        }
    };
    let native = delivery.decoded.as_deref().expect("read by the adapter");
    assert_eq!(Value::from(native.id.to_string()), out[0]["id"]);
    consumer.ack(&[delivery.receipt]).await.expect("ack");
}

#[tokio::test]
async fn a_rust_retry_with_a_delay_lands_in_delayed() {
    let redis = TestRedis::start().expect("redis-server");
    let transport = transport(&redis.url(), Options::laravel()).await;
    let mut native = bus_core::Envelope::new(URN, Format::Json, &br#"{"order_id":7}"#[..]);
    native.id = MessageId::generate();
    let outgoing = Outgoing {
        id: native.id.clone(),
        payload: transport
            .format("orders")
            .encode(&native)
            .expect("encode")
            .into(),
    };
    transport
        .send("orders", Placement::now(), vec![outgoing])
        .await
        .expect("send");
    let consumer = consumer(&transport, "orders", Duration::from_secs(30), 3).await;
    let delivery = receive(&*consumer, 1).await.pop().expect("a delivery");
    let error = ErrorRecord::now("try later");
    let before = now_secs_f64().floor() as i64;
    consumer
        .retry(&delivery.receipt, Duration::from_secs(30), &error)
        .await
        .expect("retry");

    let mut c = redis.client();
    let reserved = c.cmd(&["ZCARD", "queues:orders:reserved"]).expect("ZCARD");
    assert_eq!(reserved.as_int(), Some(0));
    let delayed = c
        .cmd(&["ZRANGE", "queues:orders:delayed", "0", "-1", "WITHSCORES"])
        .expect("ZRANGE");
    let items = delayed.as_array().expect("array");
    assert_eq!(items.len(), 2, "one delayed member");
    let member = Envelope::decode(items[0].as_bytes().expect("member")).expect("an envelope");
    assert_eq!(member.attempts(), 1);
    assert_eq!(member.meta().id.as_deref(), Some(native.id.as_str()));
    let score: i64 = items[1]
        .as_str()
        .expect("score")
        .parse()
        .expect("integer score");
    assert!(
        (before + 30..=before + 31).contains(&score),
        "due at {score}, now {before}"
    );
    // Not delivered now.
    assert!(receive(&*consumer, 10).await.is_empty());
}

#[tokio::test]
async fn the_legacy_layout_refuses_delays() {
    let redis = TestRedis::start().expect("redis-server");
    let bq = BabelQueue::connect(
        &bus_redis::RedisConfig::from_url(&redis.url()).expect("url"),
        Options::legacy(),
    )
    .await
    .expect("connect");
    let err = bq
        .publish_delayed("orders", URN, &json!({}), Duration::from_secs(5))
        .await
        .expect_err("legacy has no delayed set");
    assert!(err.to_string().contains("legacy"), "{err}");
}
