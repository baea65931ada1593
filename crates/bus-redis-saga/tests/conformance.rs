//! The saga store conformance suite on a real redis-server (SPEC §5.2), plus what only
//! Redis can show: the key's own expiry, re-sent scripts, SCAN listing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bus_conformance::saga_store as conformance;
use bus_core::{Error, SagaStore, Stamp};
use bus_test_redis::{eventually, Resp};
use bytes::Bytes;

#[tokio::test]
async fn create_and_get() {
    let (_redis, store) = common::store().await;
    conformance::create_and_get(&store).await.unwrap();
}

#[tokio::test]
async fn create_when_it_exists_fails() {
    let (_redis, store) = common::store().await;
    conformance::create_existing_fails(&store).await.unwrap();
}

#[tokio::test]
async fn get_update_and_complete_of_a_missing_saga_are_not_found() {
    let (_redis, store) = common::store().await;
    conformance::missing_is_not_found(&store).await.unwrap();
}

#[tokio::test]
async fn an_expired_saga_is_not_found_and_can_be_created_again() {
    let (_redis, store) = common::store().await;
    conformance::expired_is_not_found_and_can_be_created_again(&store)
        .await
        .unwrap();
}

#[tokio::test]
async fn update_keeps_the_expiry() {
    let (_redis, store) = common::store().await;
    conformance::update_keeps_expiry(&store).await.unwrap();
}

#[tokio::test]
async fn complete_deletes() {
    let (_redis, store) = common::store().await;
    conformance::complete_deletes(&store).await.unwrap();
}

#[tokio::test]
async fn delete_deletes() {
    let (_redis, store) = common::store().await;
    conformance::delete_deletes(&store).await.unwrap();
}

#[tokio::test]
async fn a_stale_stamp_is_a_conflict() {
    let (_redis, store) = common::store().await;
    conformance::stale_stamp_conflicts(&store).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_incrementers_lose_no_update() {
    let (_redis, store) = common::store().await;
    let seen = conformance::concurrent_increments(Arc::new(store), 16, 25)
        .await
        .unwrap();
    assert_eq!(seen.successes, 16 * 25);
    assert!(
        seen.conflicts > 0,
        "no conflict was ever detected: {seen:?}"
    );
}

#[tokio::test]
async fn the_whole_suite_runs_in_one_go() {
    let (_redis, store) = common::store().await;
    conformance::run_all(Arc::new(store)).await.unwrap();
}

fn pttl(redis: &bus_test_redis::TestRedis, key: &str) -> i64 {
    redis
        .client()
        .cmd(&["PTTL", key])
        .unwrap()
        .as_int()
        .unwrap()
}

#[tokio::test]
async fn the_ttl_is_the_keys_expiry_and_updates_keep_it() {
    let (redis, store) = common::store().await;
    let stamp = store
        .create(
            "order",
            "1",
            Bytes::from_static(b"{}"),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let key = store.key("order", "1");
    let after_create = pttl(&redis, &key);
    assert!(
        after_create > 50_000 && after_create <= 60_000,
        "PTTL {after_create}"
    );
    // Let the expiry visibly run down first, so that a restarted one would show.
    let ran_down = eventually(Duration::from_secs(5), || pttl(&redis, &key) < after_create);
    assert!(ran_down.await, "the expiry does not run down");
    store
        .update("order", "1", Bytes::from_static(b"{\"a\":1}"), &stamp)
        .await
        .unwrap();
    let after_update = pttl(&redis, &key);
    assert!(
        after_update > 0,
        "the update removed the expiry (PTTL {after_update})"
    );
    assert!(
        after_update < after_create,
        "the update restarted the expiry"
    );
    // The layout is the documented one.
    let mut c = redis.client();
    assert_eq!(c.cmd(&["TYPE", &key]).unwrap().as_str(), Some("hash"));
    let data = c.cmd(&["HGET", &key, "data"]).unwrap();
    assert_eq!(data.as_bytes(), Some(&b"{\"a\":1}"[..]));
    assert_eq!(key, format!("{}:sagas:order:1", redis.namespace()));
}

/// Runs one saga script by its source, as a client that re-sends it would.
fn eval(redis: &bus_test_redis::TestRedis, script: &str, key: &str, args: &[&str]) -> Vec<String> {
    let source = format!("{}{}", include_str!("../lua/common.lua"), script);
    let mut command = vec!["EVAL", &source, "1", key];
    command.extend_from_slice(args);
    let reply = redis.client().cmd(&command).unwrap();
    let Resp::Array(Some(items)) = reply else {
        panic!("unexpected reply {reply:?}")
    };
    items
        .iter()
        .map(|i| i.as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn scripts_sent_twice_report_their_first_success() {
    let (redis, store) = common::store().await;
    let key = store.key("order", "twice");
    let create = include_str!("../lua/create.lua");
    let update = include_str!("../lua/update.lua");
    assert_eq!(eval(&redis, create, &key, &["d1", "s1", "60000"]), ["OK"]);
    assert_eq!(eval(&redis, create, &key, &["d1", "s1", "60000"]), ["OK"]);
    assert_eq!(
        eval(&redis, create, &key, &["d1", "other", "60000"]),
        ["EXISTS"]
    );
    assert_eq!(eval(&redis, update, &key, &["d2", "s1", "s2"]), ["OK"]);
    assert_eq!(eval(&redis, update, &key, &["d2", "s1", "s2"]), ["OK"]);
    assert_eq!(
        eval(&redis, update, &key, &["d3", "s1", "s3"]),
        ["CONFLICT"]
    );
    let (data, stamp) = store.get("order", "twice").await.unwrap();
    assert_eq!((&data[..], stamp), (&b"d2"[..], Stamp::new("s2")));
}

#[tokio::test]
async fn scan_lists_a_partitions_sagas_without_keys() {
    let (redis, store) = common::store().await;
    for id in ["1", "2", "x:y"] {
        store
            .create("a", id, Bytes::from_static(b"{}"), Duration::from_secs(60))
            .await
            .unwrap();
    }
    store
        .create("b", "1", Bytes::from_static(b"{}"), Duration::from_secs(60))
        .await
        .unwrap();
    redis.client().set(&redis.key("unrelated"), "x").unwrap();
    let found = store.scan(Some("a")).await.unwrap();
    let ids: Vec<(&str, &str)> = found.iter().map(|k| (k.partition(), k.id())).collect();
    assert_eq!(ids, [("a", "1"), ("a", "2"), ("a", "x:y")]);
    assert_eq!(found[0].key(), store.key("a", "1"));
    assert_eq!(store.scan(None).await.unwrap().len(), 4);
    assert!(store.scan(Some("none")).await.unwrap().is_empty());
    // Deleting what was listed leaves the rest.
    for key in &found {
        store.delete(key.partition(), key.id()).await.unwrap();
    }
    assert_eq!(redis.keys().len(), 2, "{:?}", redis.keys());
}

#[tokio::test]
async fn scan_walks_many_pages() {
    let (_redis, store) = common::store().await;
    let creates = (0..2500).map(|i| {
        let store = store.clone();
        async move {
            store
                .create(
                    "many",
                    &i.to_string(),
                    Bytes::from_static(b"{}"),
                    Duration::from_secs(60),
                )
                .await
        }
    });
    for result in futures::future::join_all(creates).await {
        result.unwrap();
    }
    assert_eq!(store.scan(Some("many")).await.unwrap().len(), 2500);
}

#[tokio::test]
async fn redis_failures_are_transport_errors() {
    let (mut redis, store) = common::store().await;
    let Some(server) = redis.server_mut() else {
        return;
    }; // a shared server: cannot kill it
    server.kill();
    let error = tokio::time::timeout(Duration::from_secs(30), store.get("order", "1"))
        .await
        .expect("a bounded failure");
    assert!(matches!(error, Err(Error::Transport(_))), "{error:?}");
}

#[tokio::test]
async fn scripts_are_reloaded_after_a_script_flush() {
    let (redis, store) = common::store().await;
    let stamp = store
        .create(
            "order",
            "1",
            Bytes::from_static(b"{}"),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    // As after a restart of Redis without persistence: the script cache is empty.
    assert!(redis.client().cmd(&["SCRIPT", "FLUSH"]).unwrap().is_ok());
    store
        .update("order", "1", Bytes::from_static(b"{\"n\":1}"), &stamp)
        .await
        .unwrap();
    store.delete("order", "1").await.unwrap();
}
