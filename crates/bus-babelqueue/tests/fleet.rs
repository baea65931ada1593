//! A mixed fleet: Python SDK workers and the Rust adapter on one queue, with either side
//! killed mid-message and recovered by the other after `retry_after`.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bus_babelqueue::Options;
use bus_core::records::ErrorRecord;
use bus_test_redis::TestRedis;
use common::{bq, consumer, receive, run_py, rust_worker, settle, size, transport, URN};
use serde_json::Value;

const FLEET: usize = 2000;
const WAIT: Duration = Duration::from_secs(20);

fn options(layout: &str) -> Options {
    common::options(layout).retry_after(Some(Duration::from_secs(2)))
}

fn id_of(delivery: &bus_core::transport::Delivery) -> String {
    let envelope = delivery.decoded.as_deref().expect("read by the adapter");
    envelope.id.to_string()
}

async fn mixed_fleet(layout: &str) {
    let redis = TestRedis::start().expect("redis-server");
    let url = redis.url();
    let base = [
        "--url",
        url.as_str(),
        "--layout",
        layout,
        "--queue",
        "orders",
    ];
    let mut worker = bq().spawn(&[&["worker"][..], &base[..]].concat());
    assert_eq!(
        worker.next(WAIT).await.expect("worker starts")["ready"],
        true
    );
    // Both sides are ready before the first message exists, so that neither drains the
    // queue while the other is still connecting.
    let transport = transport(&url, options(layout)).await;
    let consumer = consumer(&transport, "orders", Duration::from_secs(30), 3).await;
    // Rust consumes while Python publishes, as the Python worker does.
    let publish: Vec<String> = [&["publish", "--count", &FLEET.to_string()][..], &base[..]]
        .concat()
        .iter()
        .map(|a| a.to_string())
        .collect();
    let publishing = tokio::spawn(async move {
        let args: Vec<&str> = publish.iter().map(String::as_str).collect();
        run_py(&args).await
    });
    let keys = transport.babel_queue().keys("orders");
    let mut ours = Vec::new();
    let deadline = Instant::now() + WAIT;
    while !publishing.is_finished() || size(&redis, &keys.ready) + size(&redis, &keys.in_flight) > 0
    {
        assert!(
            Instant::now() < deadline,
            "the fleet did not drain the queue"
        );
        // One at a time, so the Python worker gets its share.
        for delivery in receive(&*consumer, 1).await {
            ours.push(id_of(&delivery));
            settle(&*consumer, &delivery, &[URN], 3, Ok(())).await;
        }
    }
    let (published, _) = publishing.await.expect("the publisher ran");
    let all: HashSet<String> = published
        .iter()
        .map(|p| p["id"].as_str().expect("id").to_owned())
        .collect();
    let theirs: Vec<String> = worker
        .stop()
        .await
        .iter()
        .filter_map(|v| v["id"].as_str().map(str::to_owned))
        .collect();
    let handled: HashSet<String> = ours.iter().chain(&theirs).cloned().collect();
    assert_eq!(handled, all, "messages were lost");
    assert_eq!(
        ours.len() + theirs.len(),
        FLEET,
        "a message was handled twice"
    );
    assert!(
        !ours.is_empty() && !theirs.is_empty(),
        "rust {} python {}",
        ours.len(),
        theirs.len()
    );
    assert_eq!(size(&redis, &keys.dlq), 0);
}

bus_test_redis::per_layout!(mixed_fleet => python_worker_and_rust_consumer_share_a_queue);

/// A Python worker SIGKILLed mid-message: the Rust consumer recovers the message after
/// `retry_after` (2 s, whole seconds: 1-2 s).
async fn python_killed(layout: &str) {
    let redis = TestRedis::start().expect("redis-server");
    let url = redis.url();
    let base = [
        "--url",
        url.as_str(),
        "--layout",
        layout,
        "--queue",
        "orders",
        "--retry-after",
        "2",
    ];
    let mut worker = bq().spawn(&[&["worker", "--hang-at", "1"][..], &base[..]].concat());
    assert_eq!(
        worker.next(WAIT).await.expect("worker starts")["ready"],
        true
    );
    let (published, _) = run_py(&[&["publish"][..], &base[..]].concat()).await;
    let hung = worker
        .next(WAIT)
        .await
        .expect("the worker takes the message");
    assert_eq!(hung["hang"], published[0]["id"]);
    worker.kill().await;
    let killed_at = Instant::now();

    let transport = transport(&url, options(layout)).await;
    let consumer = consumer(&transport, "orders", Duration::from_secs(2), 3).await;
    let delivery = loop {
        assert!(killed_at.elapsed() < WAIT, "the message was not recovered");
        if let Some(d) = receive(&*consumer, 10).await.pop() {
            break d;
        }
    };
    assert_eq!(Value::from(id_of(&delivery)), published[0]["id"]);
    // The crash counts as a delivery: Laravel's recovery writes it into the reserved
    // member; on legacy our sweep counts it out of band (the element is unchanged).
    assert_eq!(delivery.delivery_count, 2);
    settle(&*consumer, &delivery, &[URN], 3, Ok(())).await;
    let keys = transport.babel_queue().keys("orders");
    for key in [&keys.ready, &keys.in_flight, &keys.dlq] {
        assert_eq!(size(&redis, key), 0, "{key} is not empty");
    }
    if !keys.recoveries.is_empty() {
        let exists = redis
            .client()
            .cmd(&["EXISTS", &keys.recoveries])
            .expect("EXISTS");
        assert_eq!(exists.as_int(), Some(0), "the ack left the recovery count");
    }
}

bus_test_redis::per_layout!(python_killed => python_worker_killed_mid_message_is_recovered_by_rust);

/// The Rust side dies mid-message (its reservation is abandoned: no ack, no renewal); a
/// Python worker recovers it after `retry_after`. The dead side's late ack, retry and
/// dead-letter then change nothing of the Python worker's reservation.
async fn rust_killed(layout: &str) {
    let redis = TestRedis::start().expect("redis-server");
    let url = redis.url();
    let base = [
        "--url",
        url.as_str(),
        "--layout",
        layout,
        "--queue",
        "orders",
        "--retry-after",
        "2",
    ];
    let (published, _) = run_py(&[&["publish"][..], &base[..]].concat()).await;
    let transport = transport(&url, options(layout)).await;
    let keys = transport.babel_queue().keys("orders");
    let dead = consumer(&transport, "orders", Duration::from_secs(2), 3).await;
    let stale = receive(&*dead, 10)
        .await
        .pop()
        .expect("the Rust side takes the message");

    let mut worker = bq().spawn(&[&["worker", "--hang-at", "1"][..], &base[..]].concat());
    assert_eq!(
        worker.next(WAIT).await.expect("worker starts")["ready"],
        true
    );
    let hung = worker
        .next(WAIT)
        .await
        .expect("the worker recovers the message");
    assert_eq!(hung["hang"], published[0]["id"]);

    let before = (
        size(&redis, &keys.ready),
        size(&redis, &keys.in_flight),
        size(&redis, &keys.timers),
    );
    dead.ack(std::slice::from_ref(&stale.receipt))
        .await
        .expect("late ack");
    dead.retry(&stale.receipt, Duration::ZERO, &ErrorRecord::now("late"))
        .await
        .expect("late retry");
    dead.dead_letter(
        &stale.receipt,
        bus_core::transport::DeadLetterReason::Rejected,
        None,
    )
    .await
    .expect("late dead-letter");
    let after = (
        size(&redis, &keys.ready),
        size(&redis, &keys.in_flight),
        size(&redis, &keys.timers),
    );
    assert_eq!(after, before, "a late settle changed the queue");
    assert_eq!(size(&redis, &keys.dlq), 0);
    assert_eq!(
        size(&redis, &keys.in_flight),
        1,
        "the Python reservation is gone"
    );

    // The Python worker dies too; a live Rust consumer finishes the message.
    worker.kill().await;
    let live = consumer(&transport, "orders", Duration::from_secs(2), 5).await;
    let started = Instant::now();
    let delivery = loop {
        assert!(started.elapsed() < WAIT, "the message was not recovered");
        if let Some(d) = receive(&*live, 10).await.pop() {
            break d;
        }
    };
    assert_eq!(Value::from(id_of(&delivery)), published[0]["id"]);
    settle(&*live, &delivery, &[URN], 5, Ok(())).await;
    for key in [&keys.ready, &keys.in_flight, &keys.timers, &keys.dlq] {
        assert_eq!(size(&redis, key), 0, "{key} is not empty");
    }
}

bus_test_redis::per_layout!(rust_killed => abandoned_rust_reservation_recovered_by_python_late_settles_change_nothing);

/// A Rust worker process SIGKILLed mid-message: a Python worker recovers the message
/// after `retry_after`.
async fn rust_process_killed(layout: &str) {
    let redis = TestRedis::start().expect("redis-server");
    let url = redis.url();
    let base = [
        "--url",
        url.as_str(),
        "--layout",
        layout,
        "--queue",
        "orders",
        "--retry-after",
        "2",
    ];
    let (published, _) = run_py(&[&["publish"][..], &base[..]].concat()).await;
    let mut rust = rust_worker(&[&["--hang-at", "1"][..], &base[..]].concat());
    assert_eq!(rust.next(WAIT).await.expect("worker starts")["ready"], true);
    let hung = rust
        .next(WAIT)
        .await
        .expect("the Rust worker takes the message");
    assert_eq!(hung["hang"], published[0]["id"]);
    rust.kill().await;

    let mut python = bq().spawn(&[&["worker"][..], &base[..]].concat());
    assert_eq!(
        python.next(WAIT).await.expect("worker starts")["ready"],
        true
    );
    let handled = python
        .next(WAIT)
        .await
        .expect("the Python worker recovers the message");
    assert_eq!(handled["id"], published[0]["id"]);
    assert!(python.stop().await.is_empty(), "handled more than once");
    let keys = bus_babelqueue::QueueKeys::new(
        &if layout == "laravel" {
            bus_babelqueue::Layout::laravel()
        } else {
            bus_babelqueue::Layout::Legacy
        },
        "orders",
    );
    for key in [&keys.ready, &keys.in_flight, &keys.dlq] {
        assert_eq!(size(&redis, key), 0, "{key} is not empty");
    }
}

bus_test_redis::per_layout!(rust_process_killed => rust_worker_process_killed_mid_message_is_recovered_by_python);
