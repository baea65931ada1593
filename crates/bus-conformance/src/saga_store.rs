//! The saga store conformance suite (SPEC §5.2, §5.4), written once and run against
//! every [`SagaStore`]: bus-core's tests run it on [`MemorySagaStore`](bus_core::MemorySagaStore),
//! bus-redis-saga's on a real redis-server.
//!
//! Each case uses fresh ids in the partition [`PARTITION`] and returns `Err` with a
//! description of the first broken rule (this is library code: it never panics).
//!
//! ```no_run
//! # async fn demo() {
//! use std::sync::Arc;
//! use bus_conformance::saga_store as conformance;
//! use bus_core::MemorySagaStore;
//! let store = MemorySagaStore::new();
//! conformance::create_and_get(&store).await.unwrap();
//! conformance::concurrent_increments(Arc::new(store), 16, 20).await.unwrap();
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use bus_core::Error;
use bus_core::{SagaStore, Stamp};

/// What a case returns: `Err` describes the first broken rule.
pub type Outcome<T = ()> = std::result::Result<T, String>;

/// The partition every case uses.
pub const PARTITION: &str = "conformance";

/// A time to live long enough never to expire during a case.
const LONG: Duration = Duration::from_secs(600);
/// The time to live of the expiry cases.
const SHORT: Duration = Duration::from_millis(300);
/// How long the expiry cases wait for a saga to disappear.
const EXPIRY_LIMIT: Duration = Duration::from_secs(5);

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

/// A saga id no other case (or run) uses.
pub fn fresh_id() -> String {
    format!("id-{}", ulid::Ulid::new().to_string().to_lowercase())
}

fn failed(what: &str, error: Error) -> String {
    format!("{what} failed: {error}")
}

/// The error's kind and key, when it is one of the saga errors.
fn saga_error(error: &Error) -> Option<(&'static str, &str)> {
    match error {
        Error::SagaNotFound { key } => Some(("SagaNotFound", key)),
        Error::SagaExists { key } => Some(("SagaExists", key)),
        Error::SagaConflict { key } => Some(("SagaConflict", key)),
        Error::NotASaga { key, .. } => Some(("NotASaga", key)),
        _ => None,
    }
}

/// Checks that `result` failed with the saga error `kind` naming `id`.
pub fn expect_saga_error<T: std::fmt::Debug>(
    what: &str,
    result: bus_core::Result<T>,
    kind: &str,
    id: &str,
) -> Outcome {
    match result {
        Ok(value) => Err(format!("{what}: expected {kind}, got Ok({value:?})")),
        Err(error) => match saga_error(&error) {
            Some((found, key)) if found == kind && key.contains(id) => Ok(()),
            _ => Err(format!(
                "{what}: expected {kind} naming `{id}`, got {error:?}"
            )),
        },
    }
}

/// Create, then read the same data and stamp back.
pub async fn create_and_get(store: &dyn SagaStore) -> Outcome {
    let id = fresh_id();
    let stamp = store
        .create(PARTITION, &id, Bytes::from_static(b"{\"n\":1}"), LONG)
        .await
        .map_err(|e| failed("create", e))?;
    let (data, read) = store
        .get(PARTITION, &id)
        .await
        .map_err(|e| failed("get", e))?;
    ensure!(
        data == b"{\"n\":1}"[..],
        "get returned {data:?}, not the created data"
    );
    ensure!(
        read == stamp,
        "get returned stamp {read}, create returned {stamp}"
    );
    // An update changes data and stamp; the new stamp is the one read back.
    let next = store
        .update(PARTITION, &id, Bytes::from_static(b"{\"n\":2}"), &stamp)
        .await
        .map_err(|e| failed("update", e))?;
    ensure!(next != stamp, "update kept the stamp {stamp}");
    let (data, read) = store
        .get(PARTITION, &id)
        .await
        .map_err(|e| failed("get", e))?;
    ensure!(
        data == b"{\"n\":2}"[..],
        "after update, get returned {data:?}"
    );
    ensure!(
        read == next,
        "after update, get returned stamp {read}, update returned {next}"
    );
    Ok(())
}

/// A second create of the same saga fails with `SagaExists` and changes nothing.
pub async fn create_existing_fails(store: &dyn SagaStore) -> Outcome {
    let id = fresh_id();
    let stamp = store
        .create(PARTITION, &id, Bytes::from_static(b"first"), LONG)
        .await
        .map_err(|e| failed("create", e))?;
    let again = store
        .create(PARTITION, &id, Bytes::from_static(b"second"), LONG)
        .await;
    expect_saga_error("second create", again, "SagaExists", &id)?;
    let (data, read) = store
        .get(PARTITION, &id)
        .await
        .map_err(|e| failed("get", e))?;
    ensure!(
        data == b"first"[..] && read == stamp,
        "a failed create changed the saga"
    );
    Ok(())
}

/// Get, update and complete of a saga that never existed fail with `SagaNotFound`, even
/// with a stamp that could never match (not found is reported before conflict); delete
/// succeeds.
pub async fn missing_is_not_found(store: &dyn SagaStore) -> Outcome {
    let id = fresh_id();
    let bogus = Stamp::new("no-such-stamp");
    expect_saga_error("get", store.get(PARTITION, &id).await, "SagaNotFound", &id)?;
    let update = store
        .update(PARTITION, &id, Bytes::from_static(b"x"), &bogus)
        .await;
    expect_saga_error("update", update, "SagaNotFound", &id)?;
    let complete = store.complete(PARTITION, &id, &bogus).await;
    expect_saga_error("complete", complete, "SagaNotFound", &id)?;
    store
        .delete(PARTITION, &id)
        .await
        .map_err(|e| failed("delete of a missing saga", e))?;
    expect_saga_error(
        "get after all that",
        store.get(PARTITION, &id).await,
        "SagaNotFound",
        &id,
    )
}

/// Polls until the saga is gone; returns when (measured from `since`).
async fn wait_until_gone(store: &dyn SagaStore, id: &str, since: Instant) -> Outcome<Duration> {
    let deadline = since + EXPIRY_LIMIT;
    loop {
        match store.get(PARTITION, id).await {
            Err(Error::SagaNotFound { .. }) => return Ok(since.elapsed()),
            Err(e) => return Err(failed("get while waiting for expiry", e)),
            Ok(_) if Instant::now() >= deadline => {
                return Err(format!(
                    "saga {id} still there {EXPIRY_LIMIT:?} after a {SHORT:?} ttl"
                ))
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// A saga disappears after its time to live (not before), and can then be created again.
pub async fn expired_is_not_found_and_can_be_created_again(store: &dyn SagaStore) -> Outcome {
    let id = fresh_id();
    let before = Instant::now();
    let stamp = store
        .create(PARTITION, &id, Bytes::from_static(b"short"), SHORT)
        .await
        .map_err(|e| failed("create", e))?;
    let found = store.get(PARTITION, &id).await;
    ensure!(
        found.is_ok() || before.elapsed() >= SHORT,
        "saga gone at once after create: {found:?}"
    );
    let gone_after = wait_until_gone(store, &id, before).await?;
    ensure!(
        gone_after + Duration::from_millis(2) >= SHORT,
        "saga expired after {gone_after:?}, before its {SHORT:?} ttl"
    );
    let update = store
        .update(PARTITION, &id, Bytes::from_static(b"x"), &stamp)
        .await;
    expect_saga_error("update of an expired saga", update, "SagaNotFound", &id)?;
    let again = store
        .create(PARTITION, &id, Bytes::from_static(b"again"), LONG)
        .await
        .map_err(|e| failed("create after expiry", e))?;
    ensure!(again != stamp, "the re-created saga reuses the old stamp");
    let (data, _) = store
        .get(PARTITION, &id)
        .await
        .map_err(|e| failed("get", e))?;
    ensure!(data == b"again"[..], "re-created saga reads {data:?}");
    Ok(())
}

/// An update neither removes nor restarts the expiry set at creation.
pub async fn update_keeps_expiry(store: &dyn SagaStore) -> Outcome {
    let id = fresh_id();
    let before = Instant::now();
    let stamp = store
        .create(PARTITION, &id, Bytes::from_static(b"v1"), SHORT)
        .await
        .map_err(|e| failed("create", e))?;
    // Update late in the ttl: a store that reset the expiry would keep the saga until
    // 2/3 + 1 ttl after creation.
    tokio::time::sleep(SHORT * 2 / 3).await;
    match store
        .update(PARTITION, &id, Bytes::from_static(b"v2"), &stamp)
        .await
    {
        Ok(_) => {}
        // Only acceptable if the machine stalled past the whole ttl.
        Err(Error::SagaNotFound { .. }) if before.elapsed() >= SHORT => return Ok(()),
        Err(e) => return Err(failed("update", e)),
    }
    let gone_after = wait_until_gone(store, &id, before).await?;
    ensure!(
        gone_after < SHORT + SHORT * 2 / 3,
        "saga expired only after {gone_after:?}: the update extended its {SHORT:?} ttl"
    );
    Ok(())
}

/// Complete deletes the saga; a second complete reports `SagaNotFound`.
pub async fn complete_deletes(store: &dyn SagaStore) -> Outcome {
    let id = fresh_id();
    let stamp = store
        .create(PARTITION, &id, Bytes::from_static(b"done soon"), LONG)
        .await
        .map_err(|e| failed("create", e))?;
    store
        .complete(PARTITION, &id, &stamp)
        .await
        .map_err(|e| failed("complete", e))?;
    expect_saga_error(
        "get after complete",
        store.get(PARTITION, &id).await,
        "SagaNotFound",
        &id,
    )?;
    let again = store.complete(PARTITION, &id, &stamp).await;
    expect_saga_error("second complete", again, "SagaNotFound", &id)?;
    store
        .create(PARTITION, &id, Bytes::from_static(b"new"), LONG)
        .await
        .map_err(|e| failed("create after complete", e))?;
    Ok(())
}

/// Delete removes the saga whatever its stamp.
pub async fn delete_deletes(store: &dyn SagaStore) -> Outcome {
    let id = fresh_id();
    let stamp = store
        .create(PARTITION, &id, Bytes::from_static(b"v1"), LONG)
        .await
        .map_err(|e| failed("create", e))?;
    store
        .update(PARTITION, &id, Bytes::from_static(b"v2"), &stamp)
        .await
        .map_err(|e| failed("update", e))?;
    store
        .delete(PARTITION, &id)
        .await
        .map_err(|e| failed("delete", e))?;
    expect_saga_error(
        "get after delete",
        store.get(PARTITION, &id).await,
        "SagaNotFound",
        &id,
    )?;
    store
        .delete(PARTITION, &id)
        .await
        .map_err(|e| failed("second delete", e))?;
    Ok(())
}

/// Update and complete with a stamp that was replaced fail with `SagaConflict` and
/// change nothing.
pub async fn stale_stamp_conflicts(store: &dyn SagaStore) -> Outcome {
    let id = fresh_id();
    let old = store
        .create(PARTITION, &id, Bytes::from_static(b"v1"), LONG)
        .await
        .map_err(|e| failed("create", e))?;
    let current = store
        .update(PARTITION, &id, Bytes::from_static(b"v2"), &old)
        .await
        .map_err(|e| failed("update", e))?;
    let stale = store
        .update(PARTITION, &id, Bytes::from_static(b"lost"), &old)
        .await;
    expect_saga_error("update with a stale stamp", stale, "SagaConflict", &id)?;
    let stale = store.complete(PARTITION, &id, &old).await;
    expect_saga_error("complete with a stale stamp", stale, "SagaConflict", &id)?;
    let (data, stamp) = store
        .get(PARTITION, &id)
        .await
        .map_err(|e| failed("get", e))?;
    ensure!(
        data == b"v2"[..],
        "a refused write changed the data to {data:?}"
    );
    ensure!(stamp == current, "a refused write changed the stamp");
    Ok(())
}

/// What [`concurrent_increments`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contention {
    /// Increments that were written.
    pub successes: u64,
    /// Writes refused with `SagaConflict` (and retried).
    pub conflicts: u64,
}

/// Most attempts one increment may take before the case gives up.
const MAX_ATTEMPTS: u64 = 100_000;

/// `tasks` tasks each add 1 to one saga's counter `per_task` times (read, yield, write
/// with the stamp read, retry on conflict). The counter must end equal to the number of
/// successful writes, which must be `tasks × per_task`: no lost update.
pub async fn concurrent_increments(
    store: Arc<dyn SagaStore>,
    tasks: usize,
    per_task: usize,
) -> Outcome<Contention> {
    let id = fresh_id();
    store
        .create(PARTITION, &id, Bytes::from_static(b"0"), LONG)
        .await
        .map_err(|e| failed("create", e))?;
    let mut handles = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let (store, id) = (Arc::clone(&store), id.clone());
        handles.push(tokio::spawn(async move {
            increment(&*store, &id, per_task).await
        }));
    }
    let mut seen = Contention {
        successes: 0,
        conflicts: 0,
    };
    for handle in handles {
        let one = handle
            .await
            .map_err(|e| format!("an incrementing task failed: {e}"))??;
        seen.successes += one.successes;
        seen.conflicts += one.conflicts;
    }
    let (data, _) = store
        .get(PARTITION, &id)
        .await
        .map_err(|e| failed("final get", e))?;
    let counter = parse_counter(&data)?;
    ensure!(
        counter == seen.successes,
        "lost update: counter is {counter} after {} successful increments",
        seen.successes
    );
    let expected = (tasks * per_task) as u64;
    ensure!(
        seen.successes == expected,
        "{} increments succeeded, expected {expected}",
        seen.successes
    );
    Ok(seen)
}

async fn increment(store: &dyn SagaStore, id: &str, times: usize) -> Outcome<Contention> {
    let mut seen = Contention {
        successes: 0,
        conflicts: 0,
    };
    for _ in 0..times {
        loop {
            ensure!(
                seen.conflicts < MAX_ATTEMPTS,
                "too many conflicts: livelock?"
            );
            let (data, stamp) = store
                .get(PARTITION, id)
                .await
                .map_err(|e| failed("get", e))?;
            let next = parse_counter(&data)? + 1;
            // Let the other tasks run between the read and the write.
            tokio::task::yield_now().await;
            match store
                .update(PARTITION, id, Bytes::from(next.to_string()), &stamp)
                .await
            {
                Ok(_) => {
                    seen.successes += 1;
                    break;
                }
                Err(Error::SagaConflict { .. }) => seen.conflicts += 1,
                Err(e) => return Err(failed("update", e)),
            }
        }
    }
    Ok(seen)
}

fn parse_counter(data: &[u8]) -> Outcome<u64> {
    std::str::from_utf8(data)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| format!("counter {data:?} is not a number"))
}

/// Every case above, in order (16 tasks × 20 increments for the concurrency case).
pub async fn run_all(store: Arc<dyn SagaStore>) -> Outcome {
    create_and_get(&*store).await?;
    create_existing_fails(&*store).await?;
    missing_is_not_found(&*store).await?;
    complete_deletes(&*store).await?;
    delete_deletes(&*store).await?;
    stale_stamp_conflicts(&*store).await?;
    expired_is_not_found_and_can_be_created_again(&*store).await?;
    update_keeps_expiry(&*store).await?;
    concurrent_increments(store, 16, 20).await.map(drop)
}
