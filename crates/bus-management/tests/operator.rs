//! What an operator reads: expired locks told apart from live ones, one saga shown, and
//! only real sagas listed.

mod common;

use std::time::Duration;

use bus_core::transport::now_ms;
use bus_core::{Envelope, Format, SagaStore};
use bus_redis_saga::RedisSagaStore;
use common::{setup, work};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_tell_expired_locks_from_live_ones() {
    let s = setup().await;
    let keys = s.keys(&work());
    let mut redis = s.redis.client();
    // Two reserved messages, as reserve.lua leaves them: one whose consumer was killed an
    // hour ago (its lock long past) and one with a live lock.
    let past = (now_ms() - 3_600_000).to_string();
    let future = (now_ms() + 3_600_000).to_string();
    for (id, deadline) in [("~1", &past), ("~2", &future)] {
        let envelope = Envelope::new("work", Format::Json, &br#"{"n":1}"#[..])
            .encode()
            .unwrap();
        redis
            .cmd(&[
                &b"HSET"[..],
                keys.msgs.as_bytes(),
                id.as_bytes(),
                &envelope[..],
            ])
            .unwrap();
        redis.cmd(&["HSET", &keys.deliveries, id, "1"]).unwrap();
        redis.cmd(&["ZADD", &keys.inflight, deadline, id]).unwrap();
    }
    let stats = s.management.stats(&work()).await.unwrap();
    assert_eq!((stats.in_flight, stats.expired_locks), (2, 1), "{stats:?}");
    assert!(stats.redis_now_ms.abs_diff(now_ms()) < 60_000, "{stats:?}");
    assert_eq!(stats.ready, 0);
    assert_eq!(stats.oldest_sent_at_ms, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_saga_is_shown_and_only_saga_hashes_are_listed() {
    let s = setup().await;
    let ns = s.redis.namespace();
    let store = RedisSagaStore::new(s.transport.client().clone()).prefix(ns);
    let stamp = store
        .create(
            "order",
            "1",
            r#"{"paid":true}"#.into(),
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    // A plain string at a saga's name (an older layout): not a saga.
    s.redis
        .client()
        .cmd(&["SET", &store.key("order", "legacy"), "x"])
        .unwrap();
    let m = s.management.clone().saga_prefix(ns);

    let listed: Vec<String> = m
        .sagas(None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(listed, ["1"]);

    let saga = m.saga("order", "1").await.unwrap().unwrap();
    assert_eq!(saga.data, r#"{"paid":true}"#);
    assert_eq!(saga.stamp, stamp.as_str());
    assert_eq!(saga.key, store.key("order", "1"));
    assert!(saga
        .ttl_ms
        .is_some_and(|ttl| ttl > 500_000 && ttl <= 600_000));
    assert!(m.saga("order", "2").await.unwrap().is_none());
    let err = m.saga("order", "legacy").await.unwrap_err().to_string();
    assert!(err.contains(&store.key("order", "legacy")), "{err}");
}
