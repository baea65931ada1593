//! The saga store conformance suite on the in-memory store (SPEC §5.4).

use std::sync::Arc;
use std::time::Duration;

use bus_conformance::saga_store as conformance;
use bus_core::{MemorySagaStore, SagaStore};
use bytes::Bytes;

#[tokio::test]
async fn create_and_get() {
    conformance::create_and_get(&MemorySagaStore::new())
        .await
        .unwrap();
}

#[tokio::test]
async fn create_when_it_exists_fails() {
    conformance::create_existing_fails(&MemorySagaStore::new())
        .await
        .unwrap();
}

#[tokio::test]
async fn get_update_and_complete_of_a_missing_saga_are_not_found() {
    conformance::missing_is_not_found(&MemorySagaStore::new())
        .await
        .unwrap();
}

#[tokio::test]
async fn an_expired_saga_is_not_found_and_can_be_created_again() {
    conformance::expired_is_not_found_and_can_be_created_again(&MemorySagaStore::new())
        .await
        .unwrap();
}

#[tokio::test]
async fn update_keeps_the_expiry() {
    conformance::update_keeps_expiry(&MemorySagaStore::new())
        .await
        .unwrap();
}

#[tokio::test]
async fn complete_deletes() {
    conformance::complete_deletes(&MemorySagaStore::new())
        .await
        .unwrap();
}

#[tokio::test]
async fn delete_deletes() {
    conformance::delete_deletes(&MemorySagaStore::new())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_stale_stamp_is_a_conflict() {
    conformance::stale_stamp_conflicts(&MemorySagaStore::new())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_incrementers_lose_no_update() {
    let seen = conformance::concurrent_increments(Arc::new(MemorySagaStore::new()), 16, 25)
        .await
        .unwrap();
    assert_eq!(seen.successes, 16 * 25);
    // The tasks yield between read and write, so they do interleave.
    assert!(
        seen.conflicts > 0,
        "no conflict was ever detected: {seen:?}"
    );
}

#[tokio::test]
async fn the_whole_suite_runs_in_one_go() {
    conformance::run_all(Arc::new(MemorySagaStore::new()))
        .await
        .unwrap();
}

/// Expiry follows tokio's clock, so a paused-time test can skip a day.
#[tokio::test(start_paused = true)]
async fn expiry_follows_the_tokio_clock() {
    let store = MemorySagaStore::new();
    let day = Duration::from_secs(24 * 3600);
    store
        .create("p", "a", Bytes::from_static(b"1"), day)
        .await
        .unwrap();
    tokio::time::advance(day - Duration::from_secs(1)).await;
    assert!(store.get("p", "a").await.is_ok());
    assert_eq!(store.len(), 1);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(matches!(
        store.get("p", "a").await,
        Err(bus_core::Error::SagaNotFound { .. })
    ));
    assert!(store.is_empty());
}

/// A time to live too long to represent never expires (and does not panic).
#[tokio::test]
async fn an_enormous_ttl_means_never() {
    let store = MemorySagaStore::new();
    store
        .create("p", "a", Bytes::from_static(b"1"), Duration::MAX)
        .await
        .unwrap();
    assert!(store.get("p", "a").await.is_ok());
}
