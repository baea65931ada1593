//! The cost of the hot path (docs/redis-layout.md, docs/performance.md): reserving and
//! acknowledging a batch of fresh envelopes runs a handful of commands per batch inside
//! Redis (one lease), none per message; a stale receipt still changes nothing.

mod common;

use bus_core::transport::ConsumerExt;
use bus_core::transport::Placement;
use bus_core::transport::{ConsumerOptions, Held, Outgoing, Receipt, Source};
use bus_core::{Bus, BusConfig, MessageId, Transport};
use bus_test_redis::TestRedis;
use common::{transport, Counts, Work};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};
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

    let held = consumer.take(500, &CancellationToken::new()).await.unwrap();
    assert_eq!(held.len(), 500);
    let receipts: Vec<Receipt> = held.iter().map(|d| d.receipt.clone()).collect();
    consumer.ack(&receipts).await.unwrap();

    let calls = command_calls(&redis);
    let call = |name: &str| calls.get(name).copied().unwrap_or(0);
    // No per-message bookkeeping: the batch is one lease (one list, one lock, one holder),
    // acked by one SET of its indices' bits.
    for per_message in ["hget", "hincrby", "hexists", "zscore", "zmscore", "zcard"] {
        assert_eq!(call(per_message), 0, "{per_message}: {calls:?}");
    }
    // One HMGET of the (absent) flow hash per reserve call; the lease's holder recorded
    // once and forgotten once.
    for once in [
        "lpop", "rpush", "zadd", "set", "bitcount", "zrem", "hmget", "hset", "hdel",
    ] {
        assert_eq!(call(once), 1, "{once}: {calls:?}");
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
    // reserve: TIME, ZRANGEBYSCORE delayed, HMGET flow, LLEN suspects, LPOP, INCR seq,
    // RPUSH lease, ZADD leases, HSET holders, INCRBY leased; ack: EXISTS kbusy (does any
    // lease hold keyed messages?), LLEN, SET, BITCOUNT, DEL, ZREM, HDEL holders, DECRBY (and
    // DEL of the counter, back to 0).
    assert!(inside <= 19, "{inside} calls inside the scripts: {calls:?}");
    assert_eq!(redis.counts("work"), Counts::default());
    assert_eq!(leases(&redis), 0);
}

/// Leases left, and any key of a lease left behind.
fn leases(redis: &TestRedis) -> i64 {
    let mut c = redis.client();
    let ns = redis.namespace();
    let left = c
        .cmd(&["ZCARD", &format!("{ns}:{{work}}:leases")])
        .unwrap()
        .as_int()
        .unwrap();
    let keys = c
        .cmd(&["KEYS", &format!("{ns}:{{work}}:leases:*")])
        .unwrap();
    let found = keys.as_array().map_or(0, |k| k.len() as i64);
    assert!(found <= 2 * left, "{keys:?}");
    left
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
    let held = consumer.take(4, &CancellationToken::new()).await.unwrap();
    assert_eq!(held.len(), 4);
    let receipts: Vec<Receipt> = held.iter().map(|d| d.receipt.clone()).collect();
    // All but the second, with receipts nobody holds: a lease that does not exist and a
    // storage id that does not.
    let mut some = vec![
        receipts[0].clone(),
        receipts[2].clone(),
        receipts[3].clone(),
    ];
    some.push(Receipt::leased(bytes::Bytes::from_static(b"~L999"), 0));
    some.push(Receipt::stored(bytes::Bytes::from_static(b"~999"), 1));
    consumer.ack(&some).await.unwrap();
    let c = redis.counts("work");
    assert_eq!((c.inflight, c.msgs), (1, 0), "{c:?}");
    assert_eq!(leases(&redis), 1);
    // An index past the lease's end is a stale receipt: alone, it changes nothing.
    let mut past = receipts[1].clone();
    let Held::Leased { index, .. } = &mut past.held else {
        panic!("a sent message is leased: {past:?}");
    };
    *index = 4;
    consumer.ack(std::slice::from_ref(&past)).await.unwrap();
    assert_eq!(redis.counts("work").inflight, 1);
    // Beside the right receipt it is skipped, and the lease is gone with its last message.
    consumer.ack(&[receipts[1].clone(), past]).await.unwrap();
    assert_eq!(redis.counts("work"), Counts::default());
    assert_eq!(leases(&redis), 0);
    // A re-sent ack (fred re-sends a command in flight when a connection drops) changes
    // nothing, and the count of leased messages does not go below zero.
    consumer.ack(&receipts).await.unwrap();
    assert_eq!(redis.counts("work"), Counts::default());
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
            .send(
                "work",
                Placement::now().due(Some(SystemTime::now())),
                vec![message],
            )
            .await;
        assert!(sent.is_err(), "{id:?} was accepted");
    }
    assert_eq!(redis.counts("work"), Counts::default());
}
