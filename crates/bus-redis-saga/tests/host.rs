//! A saga in a host with the Redis store: a start, ten updates, a completion, over the
//! in-memory transport and over the Redis transport; saga timeouts over the Redis transport.

mod common;

use bus_test_redis::eventually;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::Source;
use bus_core::{
    Backoff, Context, ContinueSaga, Host, MemoryTransport, ProcessError, ProcessingSettings,
    RedisCommand, Saga, SagaData, SagaStore, StartSaga,
};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "trip-booked")]
struct BookTrip {
    trip: String,
}

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "trip-leg-confirmed")]
struct ConfirmLeg {
    trip: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Trip {
    booked: bool,
    legs: u32,
}

const LEGS: u32 = 10;

#[derive(Default)]
struct TripSaga {
    completed_with: AtomicU32,
}

impl Saga for TripSaga {
    type State = Trip;
    const PARTITION_KEY: &'static str = "trip";
}

fn settings() -> ProcessingSettings {
    ProcessingSettings::default()
        .max_concurrent_calls(4)
        .dead_letter_delivery_limit(200)
        .retry(Backoff::fixed(Duration::from_millis(10)))
}

#[async_trait]
impl StartSaga<BookTrip> for TripSaga {
    fn saga_id(&self, message: &BookTrip) -> String {
        message.trip.clone()
    }
    async fn start(
        &self,
        _: BookTrip,
        saga: &mut SagaData<Trip>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        saga.state_mut().booked = true;
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        settings()
    }
}

#[async_trait]
impl ContinueSaga<ConfirmLeg> for TripSaga {
    fn saga_id(&self, message: &ConfirmLeg) -> String {
        message.trip.clone()
    }
    async fn handle(
        &self,
        _: ConfirmLeg,
        saga: &mut SagaData<Trip>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        if !saga.state().booked {
            return Err("still booking".into());
        }
        let trip = saga.state_mut();
        trip.legs += 1;
        if trip.legs == LEGS {
            self.completed_with.store(trip.legs, Ordering::SeqCst);
            saga.complete();
        }
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        settings()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_then_ten_updates_then_complete_leaves_no_key() {
    let (redis, store) = common::store().await;
    let transport = MemoryTransport::new();
    let saga = Arc::new(TripSaga::default());
    let host = Host::builder()
        .transport(transport.clone())
        .saga_store(store.clone())
        .saga_start::<BookTrip, _>(Arc::clone(&saga))
        .saga_continue::<ConfirmLeg, _>(Arc::clone(&saga))
        .build()
        .unwrap();
    let bus = host.bus();
    let stop = CancellationToken::new();
    let signal = stop.clone();
    let handle = tokio::spawn(host.run(async move { signal.cancelled().await }));

    bus.send(&BookTrip { trip: "t-1".into() }).await.unwrap();
    let key = store.key("trip", "t-1");
    let booked = eventually(Duration::from_secs(10), || {
        let data = redis.client().cmd(&["HGET", &key, "data"]).unwrap();
        data.as_bytes()
            .is_some_and(|d| d.starts_with(b"{\"booked\":true"))
    });
    assert!(booked.await, "the start did not write the saga at {key}");
    let legs: Vec<ConfirmLeg> = (0..LEGS)
        .map(|_| ConfirmLeg { trip: "t-1".into() })
        .collect();
    bus.send_batch(&legs).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || saga
            .completed_with
            .load(Ordering::SeqCst)
            == LEGS)
        .await,
        "the saga never reached {LEGS} legs: an update was lost"
    );
    let gone = eventually(Duration::from_secs(10), || redis.keys().is_empty());
    assert!(gone.await, "keys left behind: {:?}", redis.keys());
    assert!(matches!(
        store.get("trip", "t-1").await,
        Err(bus_core::Error::SagaNotFound { .. })
    ));
    let queue = Source::queue("trip-leg-confirmed").unwrap();
    assert!(
        eventually(Duration::from_secs(10), || transport
            .stats(&queue)
            .is_empty())
        .await
    );
    stop.cancel();
    handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_saga_over_the_redis_transport_leaves_only_bookkeeping() {
    let redis = bus_test_redis::TestRedis::start().unwrap();
    let config = bus_redis::RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace());
    let transport = bus_redis::RedisTransport::connect(&config).await.unwrap();
    let store = bus_redis_saga::RedisSagaStore::for_transport(&transport);
    let saga = Arc::new(TripSaga::default());
    let running = Host::builder()
        .transport(transport.clone())
        .saga_store(store.clone())
        .saga_start::<BookTrip, _>(Arc::clone(&saga))
        .saga_continue::<ConfirmLeg, _>(Arc::clone(&saga))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let bus = running.bus();
    bus.send(&BookTrip { trip: "t-2".into() }).await.unwrap();
    let legs: Vec<ConfirmLeg> = (0..LEGS)
        .map(|_| ConfirmLeg { trip: "t-2".into() })
        .collect();
    bus.send_batch(&legs).await.unwrap();
    let completed = eventually(Duration::from_secs(30), || {
        saga.completed_with.load(Ordering::SeqCst) == LEGS
    });
    assert!(completed.await, "the saga never reached {LEGS} legs");
    running.shutdown().await.unwrap();
    // The saga's key is gone; what remains is the queues' bookkeeping (registry, id
    // counters, the protocol version) and the hosts' per-type timing (operator keys that
    // expire on their own): no message, lock or saga.
    let key = store.key("trip", "t-2");
    assert!(key.starts_with(redis.namespace()), "{key}");
    let left: Vec<String> = redis.keys();
    assert!(
        left.iter().all(|k| k.ends_with(":seq")
            || k.contains(":registry:")
            || k.ends_with(":protocol")
            || k.contains(":{:timing}:")),
        "left behind: {left:?}"
    );
}

/// Saga timeouts with the Redis store, over the Redis transport: a
/// timeout is handled only while the saga is as its step left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saga_timeouts_fire_only_for_the_state_that_asked() {
    let redis = bus_test_redis::TestRedis::start().unwrap();
    let config = bus_redis::RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace());
    let transport = bus_redis::RedisTransport::connect(&config).await.unwrap();
    let store = bus_redis_saga::RedisSagaStore::for_transport(&transport);
    bus_conformance::saga_timeouts_fire_only_for_the_state_that_asked(
        Arc::new(transport),
        Arc::new(store),
    )
    .await;
}
