//! Features combined, each a layer around the same consumer: a singleton processor with a
//! fleet breaker, a paused singleton, and an ordered queue behind a fleet breaker. Each
//! feature has its own checks; these catch a layer that hides another's part of the
//! contract (a wrapper that does not pass on the fleet breaker, a pause the singleton's
//! lease loop ignores). Checked from the handlers' own records.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::{start_command, wait_until};
use bus_core::flow::{FlowControl, PerKey};
use bus_core::transport::{now_ms, Source};
use bus_core::{
    BreakerScope, CircuitBreaker, CommandProcessor, Context, Message, MessageKind, ProcessError,
    ProcessingSettings, Transport,
};

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    key: u32,
    n: u32,
}
command!(Job, "conformance-combined");

/// One handler run (ms since the epoch).
#[derive(Debug, Clone, Copy)]
struct Run {
    host: u8,
    job: (u32, u32),
    start: u64,
    end: u64,
    failed: bool,
}

/// The runs of every host, and the outage they all see.
#[derive(Default)]
struct Record {
    down: AtomicBool,
    runs: Mutex<Vec<Run>>,
}

impl Record {
    fn runs(&self) -> Vec<Run> {
        let mut runs = self
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        runs.sort_by_key(|r| r.start);
        runs
    }

    fn succeeded(&self) -> usize {
        self.runs().iter().filter(|r| !r.failed).count()
    }
}

const COOL_DOWN_MS: u64 = 500;

/// A processor with the default settings but for the features under test.
struct Worker {
    host: u8,
    record: Arc<Record>,
    singleton: bool,
    fleet_breaker: bool,
    work: Duration,
}

#[async_trait]
impl CommandProcessor<Job> for Worker {
    fn settings(&self) -> ProcessingSettings {
        let breaker = self.fleet_breaker.then(|| {
            CircuitBreaker::default()
                .minimum_calls(4)
                .cool_down(Duration::from_millis(COOL_DOWN_MS))
                .scope(BreakerScope::Fleet)
        });
        ProcessingSettings::default()
            .singleton(self.singleton)
            .circuit_breaker(breaker)
    }

    async fn process(&self, job: Job, _: &Context) -> Result<(), ProcessError> {
        let start = now_ms();
        let failed = self.record.down.load(Ordering::SeqCst);
        tokio::time::sleep(self.work).await;
        self.record
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Run {
                host: self.host,
                job: (job.key, job.n),
                start,
                end: now_ms(),
                failed,
            });
        if failed {
            return Err(ProcessError::retry("the dependency is down"));
        }
        Ok(())
    }
}

/// No two hosts ran the singleton's handlers at the same time.
fn one_host_at_a_time(runs: &[Run]) {
    for a in runs {
        for b in runs.iter().filter(|b| b.host != a.host) {
            assert!(
                b.start >= a.end || a.start >= b.end,
                "two hosts ran a singleton at once: {a:?} {b:?}"
            );
        }
    }
}

fn source() -> Source {
    Source::queue(Job::NAME).expect("valid name")
}

/// Waits until the fleet breaker of the queue reads tripped; when its cool-down ends.
async fn tripped(flow: &dyn FlowControl, within: Duration) -> Option<u64> {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if let Some(until) = flow.flow(&source()).await.expect("flow").breaker_until_ms {
            return Some(until);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// Two hosts of a singleton processor with a fleet breaker: failures trip the breaker
/// fleet-wide (the singleton's wrapper passes the consumer's breaker on), the probe that
/// succeeds closes it, and every message then runs, on one host at a time.
pub async fn a_singleton_with_a_fleet_breaker_trips_and_closes(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
) {
    let record = Arc::new(Record::default());
    record.down.store(true, Ordering::SeqCst);
    let worker = |host| Worker {
        host,
        record: Arc::clone(&record),
        singleton: true,
        fleet_breaker: true,
        work: Duration::from_millis(5),
    };
    let hosts = [
        start_command::<Job, _>(Arc::clone(&transport), worker(0)).await,
        start_command::<Job, _>(Arc::clone(&transport), worker(1)).await,
    ];
    let jobs: Vec<Job> = (0..20).map(|n| Job { key: 0, n }).collect();
    hosts[0].bus().send_batch(&jobs).await.expect("sent");
    let until = tripped(flow, Duration::from_secs(20))
        .await
        .expect("the fleet breaker of a singleton processor never tripped");
    let trip = until - COOL_DOWN_MS;
    record.down.store(false, Ordering::SeqCst);
    assert!(
        wait_until(Duration::from_secs(30), || record.succeeded() == jobs.len()).await,
        "not every message ran after the outage: {} of {}",
        record.succeeded(),
        jobs.len()
    );
    for host in hosts {
        host.shutdown().await.expect("shutdown");
    }
    assert!(
        flow.flow(&source())
            .await
            .expect("flow")
            .breaker_until_ms
            .is_none(),
        "the breaker is still open after every message succeeded"
    );
    let runs = record.runs();
    one_host_at_a_time(&runs);
    // Nothing started during the first cool-down but runs already reserved at the trip.
    assert!(
        runs.iter()
            .all(|r| r.start <= trip + 50 || r.start + 5 >= until),
        "a run started during the cool-down: {runs:?}"
    );
}

/// A singleton processor on a paused queue starts nothing later than a second after the
/// pause (its prefetched messages included), and runs everything after the resume.
pub async fn a_paused_singleton_starts_nothing(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
) {
    let record = Arc::new(Record::default());
    let worker = |host| Worker {
        host,
        record: Arc::clone(&record),
        singleton: true,
        fleet_breaker: false,
        work: Duration::from_millis(200),
    };
    let hosts = [
        start_command::<Job, _>(Arc::clone(&transport), worker(0)).await,
        start_command::<Job, _>(Arc::clone(&transport), worker(1)).await,
    ];
    let jobs: Vec<Job> = (0..30).map(|n| Job { key: 0, n }).collect();
    hosts[0].bus().send_batch(&jobs).await.expect("sent");
    assert!(
        wait_until(Duration::from_secs(10), || !record.runs().is_empty()).await,
        "nothing ran"
    );
    flow.pause(&source()).await.expect("paused");
    let paused = now_ms();
    let settled = Instant::now() + Duration::from_secs(3);
    wait_until(Duration::from_secs(3), || Instant::now() >= settled).await;
    let late: Vec<Run> = record
        .runs()
        .into_iter()
        .filter(|r| r.start > paused + 1_000)
        .collect();
    assert!(
        late.is_empty(),
        "started more than 1 s after the pause: {late:?}"
    );
    let before = record.runs().len();
    assert!(before < jobs.len(), "everything ran before the pause");
    flow.resume(&source()).await.expect("resumed");
    assert!(
        wait_until(Duration::from_secs(30), || record.succeeded() == jobs.len()).await,
        "not every message ran after the resume: {} of {}",
        record.succeeded(),
        jobs.len()
    );
    for host in hosts {
        host.shutdown().await.expect("shutdown");
    }
    one_host_at_a_time(&record.runs());
}

/// An ordered queue (one at a time per key) behind a fleet breaker: the breaker trips
/// and closes, and each key's messages succeed in the order they were sent, none lost.
pub async fn an_ordered_queue_behind_a_fleet_breaker_keeps_each_keys_order(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
) {
    let source = source();
    flow.order_per_key(&source, Some(PerKey::fifo()))
        .await
        .expect("ordered");
    let record = Arc::new(Record::default());
    record.down.store(true, Ordering::SeqCst);
    let worker = |host| Worker {
        host,
        record: Arc::clone(&record),
        singleton: false,
        fleet_breaker: true,
        work: Duration::from_millis(2),
    };
    let hosts = [
        start_command::<Job, _>(Arc::clone(&transport), worker(0)).await,
        start_command::<Job, _>(Arc::clone(&transport), worker(1)).await,
    ];
    let bus = hosts[0].bus();
    for n in 0..10 {
        for key in 0..5 {
            bus.send_keyed(&Job { key, n }, &key.to_string())
                .await
                .expect("sent");
        }
    }
    tripped(flow, Duration::from_secs(20))
        .await
        .expect("the fleet breaker of an ordered queue never tripped");
    record.down.store(false, Ordering::SeqCst);
    assert!(
        wait_until(Duration::from_secs(30), || record.succeeded() == 50).await,
        "not every message ran after the outage: {} of 50",
        record.succeeded()
    );
    for host in hosts {
        host.shutdown().await.expect("shutdown");
    }
    let mut keys: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for run in record.runs().iter().filter(|r| !r.failed) {
        keys.entry(run.job.0).or_default().push(run.job.1);
    }
    for (key, order) in keys {
        assert_eq!(order, (0..10).collect::<Vec<_>>(), "key {key}");
    }
}
