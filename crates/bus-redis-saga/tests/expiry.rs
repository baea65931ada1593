//! A saga that expired is gone for the host too (issue #10, point 14): the host's cache
//! of what it wrote must not outlive the key, so a continue message that arrives after
//! the time to live reaches `on_not_found`, never the handler. Over the Redis store on a
//! real redis-server and over the in-memory store.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{
    Context, ContinueSaga, Error, Host, MemorySagaStore, MemoryTransport, ProcessError,
    RedisCommand, Saga, SagaData, SagaStore, StartSaga,
};
use bus_test_redis::{eventually, eventually_async};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "lease-started")]
struct StartLease {
    lease: String,
}

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "lease-poked")]
struct Poke {
    lease: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Lease {
    started: bool,
    pokes: u32,
}

/// Long enough for the start to finish on a loaded machine, short enough to wait out.
const TTL: Duration = Duration::from_secs(2);

#[derive(Default)]
struct LeaseSaga {
    handled: AtomicU32,
    not_found: AtomicU32,
}

impl Saga for LeaseSaga {
    type State = Lease;
    const PARTITION_KEY: &'static str = "lease";
    fn time_to_live(&self) -> Duration {
        TTL
    }
}

#[async_trait]
impl StartSaga<StartLease> for LeaseSaga {
    fn saga_id(&self, message: &StartLease) -> String {
        message.lease.clone()
    }
    async fn start(
        &self,
        _: StartLease,
        saga: &mut SagaData<Lease>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        saga.state_mut().started = true;
        Ok(())
    }
}

#[async_trait]
impl ContinueSaga<Poke> for LeaseSaga {
    fn saga_id(&self, message: &Poke) -> String {
        message.lease.clone()
    }
    async fn handle(
        &self,
        _: Poke,
        saga: &mut SagaData<Lease>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        // The side effect that must not happen after the time to live.
        self.handled.fetch_add(1, Ordering::SeqCst);
        saga.state_mut().pokes += 1;
        Ok(())
    }
    async fn on_not_found(&self, _: Poke, error: Error, _: &Context) -> Result<(), ProcessError> {
        assert!(matches!(error, Error::SagaNotFound { .. }), "{error:?}");
        self.not_found.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

async fn state(store: &dyn SagaStore, id: &str) -> Option<Lease> {
    let (data, _) = store.get("lease", id).await.ok()?;
    serde_json::from_slice(&data).ok()
}

/// Starts a saga in a host, waits until its key has expired in `store`, then sends a
/// continue message: it must reach `on_not_found`, not the handler.
async fn a_poke_after_expiry_finds_no_saga(store: Arc<dyn SagaStore>) {
    let saga = Arc::new(LeaseSaga::default());
    let running = Host::builder()
        .transport(MemoryTransport::new())
        .saga_store(Arc::clone(&store))
        .saga_start::<StartLease, _>(Arc::clone(&saga))
        .saga_continue::<Poke, _>(Arc::clone(&saga))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let bus = running.bus();
    bus.send(&StartLease { lease: "s1".into() }).await.unwrap();
    let started = eventually_async(TTL, || async {
        state(&*store, "s1").await.is_some_and(|s| s.started)
    });
    assert!(started.await, "the start never wrote the saga");

    let expired = eventually_async(Duration::from_secs(10), || async {
        matches!(
            store.get("lease", "s1").await,
            Err(Error::SagaNotFound { .. })
        )
    });
    assert!(expired.await, "the saga never expired in the store");
    bus.send(&Poke { lease: "s1".into() }).await.unwrap();
    let settled = eventually(Duration::from_secs(10), || {
        saga.not_found.load(Ordering::SeqCst) + saga.handled.load(Ordering::SeqCst) > 0
    });
    assert!(settled.await, "the poke was never processed");
    running.shutdown().await.unwrap();
    assert_eq!(
        saga.handled.load(Ordering::SeqCst),
        0,
        "the handler ran on a saga that had expired"
    );
    assert_eq!(saga.not_found.load(Ordering::SeqCst), 1);
    assert!(
        state(&*store, "s1").await.is_none(),
        "the expired saga came back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_redis_store_an_expired_saga_reaches_on_not_found() {
    let (_redis, store) = common::store().await;
    a_poke_after_expiry_finds_no_saga(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_memory_store_an_expired_saga_reaches_on_not_found() {
    a_poke_after_expiry_finds_no_saga(Arc::new(MemorySagaStore::new())).await;
}
