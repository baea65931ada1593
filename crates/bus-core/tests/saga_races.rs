//! Races around one saga: steps that arrive during a slow start, and two hosts writing
//! the same saga (each with its own cache of what it wrote last).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{
    Backoff, Context, ContinueSaga, Host, MemorySagaStore, MemoryTransport, ProcessError,
    ProcessingSettings, RedisCommand, Saga, SagaData, StartSaga,
};
use bus_test_redis::eventually;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "race-start")]
struct Begin {
    id: String,
    expected: u32,
}

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "race-step")]
struct Step {
    id: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Progress {
    expected: u32,
    done: u32,
}

#[derive(Default)]
struct Race {
    completed: AtomicU32,
}

impl Saga for Race {
    type State = Progress;
    const PARTITION_KEY: &'static str = "race";
}

#[async_trait]
impl StartSaga<Begin> for Race {
    fn saga_id(&self, message: &Begin) -> String {
        message.id.clone()
    }
    async fn start(
        &self,
        message: Begin,
        saga: &mut SagaData<Progress>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        // A slow start: the steps arrive while it runs.
        tokio::time::sleep(Duration::from_millis(300)).await;
        saga.state_mut().expected = message.expected;
        Ok(())
    }
}

#[async_trait]
impl ContinueSaga<Step> for Race {
    fn saga_id(&self, message: &Step) -> String {
        message.id.clone()
    }
    async fn handle(
        &self,
        _: Step,
        saga: &mut SagaData<Progress>,
        _: &Context,
    ) -> Result<(), ProcessError> {
        let progress = saga.state_mut();
        progress.done += 1;
        if progress.done == progress.expected {
            saga.complete();
            self.completed.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(1)
            .dead_letter_delivery_limit(100)
            .retry(Backoff::fixed(Duration::from_millis(20)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_that_arrive_during_a_slow_start_wait_for_it() {
    let store = MemorySagaStore::new();
    let race = Arc::new(Race::default());
    let host = Host::builder()
        .transport(MemoryTransport::new())
        .saga_store(store.clone())
        .saga_start::<Begin, _>(Arc::clone(&race))
        .saga_continue::<Step, _>(Arc::clone(&race))
        .build()
        .unwrap();
    let bus = host.bus();
    let stop = CancellationToken::new();
    let signal = stop.clone();
    let running = tokio::spawn(host.run(async move { signal.cancelled().await }));
    bus.send(&Begin {
        id: "r1".into(),
        expected: 5,
    })
    .await
    .unwrap();
    let steps: Vec<Step> = (0..5).map(|_| Step { id: "r1".into() }).collect();
    bus.send_batch(&steps).await.unwrap();
    let completed = eventually(Duration::from_secs(20), || {
        race.completed.load(Ordering::SeqCst) > 0
    });
    let completed = completed.await;
    stop.cancel();
    running.await.unwrap().unwrap();
    assert!(
        completed,
        "the saga never completed: the start's state was lost"
    );
    assert_eq!(
        race.completed.load(Ordering::SeqCst),
        1,
        "the saga never completed: the start's state was lost"
    );
    assert!(store.is_empty(), "the completed saga was not deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_stepping_one_saga_lose_no_update() {
    const STEPS: u32 = 60;
    let (transport, store) = (MemoryTransport::new(), MemorySagaStore::new());
    let race = Arc::new(Race::default());
    let mut hosts = Vec::new();
    for _ in 0..2 {
        let host = Host::builder()
            .transport(transport.clone())
            .saga_store(store.clone())
            .saga_start::<Begin, _>(Arc::clone(&race))
            .saga_continue::<Step, _>(Arc::clone(&race))
            .build()
            .unwrap();
        hosts.push(host.start().await.unwrap());
    }
    let bus = hosts[0].bus();
    bus.send(&Begin {
        id: "shared".into(),
        expected: STEPS,
    })
    .await
    .unwrap();
    let steps: Vec<Step> = (0..STEPS)
        .map(|_| Step {
            id: "shared".into(),
        })
        .collect();
    bus.send_batch(&steps).await.unwrap();
    let completed = eventually(Duration::from_secs(30), || {
        race.completed.load(Ordering::SeqCst) > 0
    });
    let completed = completed.await;
    for host in hosts {
        host.shutdown().await.unwrap();
    }
    assert!(completed, "the saga did not complete");
    // Completion needs exactly STEPS counted increments: a lost update never gets there,
    // a double-counted one completes early and leaves steps that find no saga.
    assert_eq!(
        race.completed.load(Ordering::SeqCst),
        1,
        "the saga did not complete"
    );
    assert!(store.is_empty());
    let queue = bus_core::transport::Source::queue("race-step").unwrap();
    let stats = transport.stats(&queue);
    assert_eq!(
        (
            stats.ready,
            stats.in_flight,
            stats.delayed,
            stats.dead_letters
        ),
        (0, 0, 0, 0),
        "{stats:?}"
    );
}
