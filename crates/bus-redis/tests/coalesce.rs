//! Concurrent sends to one queue share `RPUSH`es, each send staying whole and in order,
//! and every send gets its push's reply (a real redis-server).

mod common;

use std::collections::HashMap;

use bus_core::transport::Source;
use bus_core::{Bus, BusConfig, Envelope};
use bus_test_redis::TestRedis;
use bytes::Bytes;
use common::{transport, Work};
use fred::prelude::ListInterface;
use futures::{FutureExt, StreamExt};

fn rpush_calls(redis: &TestRedis) -> i64 {
    let info = redis.client().info("commandstats").unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_rpush:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_share_pushes_and_each_stays_whole_and_in_order() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let bus = Bus::new(transport.clone(), BusConfig::default());
    assert!(redis
        .client()
        .cmd(&["CONFIG", "RESETSTAT"])
        .unwrap()
        .is_ok());
    // 2,000 single sends and 200 batches of three, 1,000 in flight.
    let singles = futures::stream::iter(0..2_000u64).map(|n| {
        let bus = bus.clone();
        async move { bus.send(&Work { n }).await.map(|_| ()) }.boxed()
    });
    let batches = futures::stream::iter(0..200u64).map(|b| {
        let bus = bus.clone();
        async move {
            let batch: Vec<Work> = (0..3)
                .map(|i| Work {
                    n: 10_000 + b * 3 + i,
                })
                .collect();
            bus.send_batch(&batch).await.map(|_| ())
        }
        .boxed()
    });
    let results: Vec<_> = futures::stream::select(singles, batches)
        .buffer_unordered(1_000)
        .collect()
        .await;
    assert!(results.iter().all(Result::is_ok), "a send failed");
    let pushes = rpush_calls(&redis);
    assert!(
        pushes <= 2_200 / 5,
        "{pushes} RPUSHes for 2,200 concurrent sends: they were not coalesced"
    );

    let ready = transport.keys(&Source::queue("work").unwrap()).ready;
    let stored: Vec<Bytes> = transport.client().lrange(&ready, 0, -1).await.unwrap();
    let numbers: Vec<u64> = stored
        .iter()
        .map(|e| {
            let envelope = Envelope::decode(e).unwrap();
            serde_json::from_slice::<Work>(&envelope.body).unwrap().n
        })
        .collect();
    assert_eq!(numbers.len(), 2_600, "every message stored once");
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (position, n) in numbers.iter().enumerate() {
        assert!(seen.insert(*n, position).is_none(), "{n} stored twice");
    }
    for b in 0..200u64 {
        let first = seen[&(10_000 + b * 3)];
        assert_eq!(
            &numbers[first..first + 3],
            &[10_000 + b * 3, 10_001 + b * 3, 10_002 + b * 3],
            "a batch was split or reordered"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_coalesced_send_gets_the_refusal_of_a_full_redis() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let mut admin = redis.client();
    for command in [
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"][..],
        &["CONFIG", "SET", "maxmemory", "1"],
    ] {
        assert!(admin.cmd(command).unwrap().is_ok(), "{command:?}");
    }
    let results: Vec<_> = futures::stream::iter(0..500u64)
        .map(|n| {
            let bus = bus.clone();
            async move { bus.send(&Work { n }).await }
        })
        .buffer_unordered(500)
        .collect()
        .await;
    for result in &results {
        let error = result
            .as_ref()
            .expect_err("a full Redis refuses every send");
        let text = bus_core::ErrorChain(error).to_string();
        assert!(text.contains("OOM"), "{text}");
    }
    assert!(admin
        .cmd(&["CONFIG", "SET", "maxmemory", "0"])
        .unwrap()
        .is_ok());
    let ready = transport.keys(&Source::queue("work").unwrap()).ready;
    let stored: Vec<Bytes> = transport.client().lrange(&ready, 0, -1).await.unwrap();
    assert!(
        stored.is_empty(),
        "{} refused sends were stored",
        stored.len()
    );
}
