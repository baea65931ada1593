//! A key at a saga's name that is not a saga (SPEC §5.3): every call fails with
//! `NotASaga` naming the key, and the key is never changed or deleted.

mod common;

use std::time::Duration;

use bus_core::{Error, SagaStore, Stamp};
use bus_redis_saga::RedisSagaStore;
use bus_test_redis::{Resp, TestRedis};
use bytes::Bytes;

/// Every store call on (partition, id) fails with `NotASaga` naming `key` and `what`.
async fn every_call_is_refused(store: &RedisSagaStore, id: &str, what: &str) {
    let key = store.key("order", id);
    let stamp = Stamp::new("any");
    let data = || Bytes::from_static(b"{}");
    let ttl = Duration::from_secs(60);
    let results = [
        ("get", store.get("order", id).await.map(drop)),
        (
            "create",
            store.create("order", id, data(), ttl).await.map(drop),
        ),
        (
            "update",
            store.update("order", id, data(), &stamp).await.map(drop),
        ),
        ("complete", store.complete("order", id, &stamp).await),
        ("delete", store.delete("order", id).await),
    ];
    for (call, result) in results {
        match result {
            Err(Error::NotASaga { key: named, reason }) => {
                assert_eq!(named, key, "{call}");
                assert!(reason.contains(what), "{call}: {reason}");
                let text = Error::NotASaga { key: named, reason }.to_string();
                assert!(text.contains(&key) && text.contains("not a saga"), "{text}");
            }
            other => panic!("{call} on {what}: expected NotASaga, got {other:?}"),
        }
    }
}

fn raw(redis: &TestRedis, args: &[&str]) -> Resp {
    redis.client().cmd(args).unwrap()
}

#[tokio::test]
async fn a_legacy_string_is_refused_and_left_unchanged() {
    let (redis, store) = common::store().await;
    let key = store.key("order", "legacy");
    redis.client().set(&key, "an old layout's value").unwrap();
    every_call_is_refused(&store, "legacy", "string").await;
    assert_eq!(
        redis.client().get(&key).unwrap().as_deref(),
        Some(&b"an old layout's value"[..])
    );
    assert_eq!(
        raw(&redis, &["PTTL", &key]).as_int(),
        Some(-1),
        "an expiry was added"
    );
}

#[tokio::test]
async fn a_hash_without_a_stamp_is_refused_and_left_unchanged() {
    let (redis, store) = common::store().await;
    let key = store.key("order", "foreign");
    raw(
        &redis,
        &["HSET", &key, "data", "{\"x\":1}", "owner", "someone else"],
    );
    every_call_is_refused(&store, "foreign", "without a stamp").await;
    let all = raw(&redis, &["HGETALL", &key]);
    let Resp::Array(Some(fields)) = all else {
        panic!("{all:?}")
    };
    assert_eq!(fields.len(), 4, "the hash was changed: {fields:?}");
    assert_eq!(
        raw(&redis, &["HGET", &key, "data"]).as_bytes(),
        Some(&b"{\"x\":1}"[..])
    );
}

#[tokio::test]
async fn a_list_is_refused_and_left_unchanged() {
    let (redis, store) = common::store().await;
    let key = store.key("order", "list");
    raw(&redis, &["RPUSH", &key, "a", "b"]);
    every_call_is_refused(&store, "list", "list").await;
    assert_eq!(raw(&redis, &["LLEN", &key]).as_int(), Some(2));
}

#[tokio::test]
async fn a_hash_with_a_stamp_but_no_data_cannot_be_read() {
    let (redis, store) = common::store().await;
    let key = store.key("order", "half");
    raw(&redis, &["HSET", &key, "stamp", "s1"]);
    match store.get("order", "half").await {
        Err(Error::NotASaga { key: named, reason }) => {
            assert_eq!(named, key);
            assert!(reason.contains("data"), "{reason}");
        }
        other => panic!("expected NotASaga, got {other:?}"),
    }
}
