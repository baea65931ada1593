//! The cost of the hot path (docs/redis-layout.md, docs/performance.md): reserving and
//! acknowledging a batch of fresh envelopes runs a handful of bulk commands inside
//! Redis, not one per message; the bulk token check still refuses stale receipts.

mod common;

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use bus_core::transport::{ConsumerOptions, Outgoing, Receipt};
use bus_core::{Bus, BusConfig, MessageId, Source, Transport};
use bus_test_redis::TestRedis;
use common::{counts, transport, Counts, Work};
use tokio_util::sync::CancellationToken;

/// Calls per command since the last `CONFIG RESETSTAT`, scripts' inner calls included.
fn command_calls(redis: &TestRedis) -> HashMap<String, i64> {
    let info = redis.client().info("commandstats").unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

fn options() -> ConsumerOptions {
    ConsumerOptions::new(Duration::from_secs(60), 5)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_fresh_envelopes_costs_a_few_calls_not_one_per_message() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let bus = Bus::new(std::sync::Arc::new(transport.clone()), BusConfig::default());
    let batch: Vec<Work> = (0..500).map(|n| Work { n }).collect();
    bus.send_batch(&batch).await.unwrap();
    let consumer = transport
        .consumer(&Source::queue("work").unwrap(), options())
        .await
        .unwrap();
    redis.client().cmd(&["CONFIG", "RESETSTAT"]).unwrap();

    let held = consumer
        .receive(500, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(held.len(), 500);
    let receipts: Vec<Receipt> = held.iter().map(|d| d.receipt.clone()).collect();
    consumer.ack(&receipts).await.unwrap();

    let calls = command_calls(&redis);
    let call = |name: &str| calls.get(name).copied().unwrap_or(0);
    // No per-message lookups: fresh envelopes are told by their first byte, and the
    // token check of the ack is two bulk reads.
    for per_message in ["hget", "zscore", "hincrby", "hexists"] {
        assert_eq!(call(per_message), 0, "{per_message}: {calls:?}");
    }
    // Two scripts ran (each first refused with NOSCRIPT, loaded, and run again).
    assert_eq!(call("evalsha") - call("script|load"), 2, "{calls:?}");
    let inside: i64 = calls
        .iter()
        .filter(|(name, _)| {
            !matches!(
                name.as_str(),
                "evalsha" | "script|load" | "config|resetstat" | "info"
            )
        })
        .map(|(_, n)| n)
        .sum();
    assert!(inside <= 20, "{inside} calls inside the scripts: {calls:?}");
    assert_eq!(counts(&redis, "work"), Counts::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_ack_removes_only_the_current_reservations() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let bus = Bus::new(std::sync::Arc::new(transport.clone()), BusConfig::default());
    let batch: Vec<Work> = (0..4).map(|n| Work { n }).collect();
    bus.send_batch(&batch).await.unwrap();
    let consumer = transport
        .consumer(&Source::queue("work").unwrap(), options())
        .await
        .unwrap();
    let held = consumer
        .receive(4, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(held.len(), 4);
    let mut receipts: Vec<Receipt> = held.iter().map(|d| d.receipt.clone()).collect();
    // A stale token (an older delivery of the second) and an id nobody holds.
    receipts[1].delivery += 1;
    receipts.push(Receipt {
        key: bytes::Bytes::from_static(b"~999"),
        delivery: 1,
    });
    consumer.ack(&receipts).await.unwrap();
    let c = counts(&redis, "work");
    assert_eq!((c.inflight, c.msgs), (1, 1), "{c:?}");
    // The right token still acks it.
    consumer.ack(&[held[1].receipt.clone()]).await.unwrap();
    assert_eq!(counts(&redis, "work"), Counts::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_at_refuses_ids_that_reserve_would_take_for_envelopes() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let envelope = bus_core::Envelope::new("work", bus_core::Format::Json, &br#"{"n":1}"#[..])
        .encode()
        .unwrap();
    for id in ["{x", "\u{e9}t\u{e9}", "~1"] {
        let message = Outgoing {
            id: MessageId::from(id.to_owned()),
            payload: envelope.clone().into(),
        };
        let sent = transport
            .send_at("work", vec![message], SystemTime::now())
            .await;
        assert!(sent.is_err(), "{id:?} was accepted");
    }
    assert_eq!(counts(&redis, "work"), Counts::default());
}
