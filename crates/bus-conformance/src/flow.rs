//! Checks of flow control (bus_core::flow) on every transport that offers it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::{start_command, wait_until, Probe};
use bus_core::flow::{FlowControl, RateLimit};
use bus_core::transport::Source;
use bus_core::{
    CommandProcessor, Context, Message, MessageKind, ProcessError, ProcessingSettings, Transport,
};

#[derive(Debug, Serialize, Deserialize)]
struct Throttled {
    n: u32,
}
command!(Throttled, "conformance-throttled");

/// Each handler's start and end, and how long each works.
struct Timeline {
    work: Duration,
    runs: Mutex<Vec<(Instant, Instant)>>,
    running: Mutex<u32>,
}

impl Timeline {
    fn new(work: Duration) -> Arc<Self> {
        Arc::new(Timeline {
            work,
            runs: Mutex::new(Vec::new()),
            running: Mutex::new(0),
        })
    }

    fn runs(&self) -> Vec<(Instant, Instant)> {
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn started(&self) -> usize {
        self.runs().len() + *self.running.lock().unwrap_or_else(PoisonError::into_inner) as usize
    }

    /// The most handlers that ran at once (from their own start and end records).
    fn peak(&self) -> usize {
        let mut edges: Vec<(Instant, i32)> = self
            .runs()
            .iter()
            .flat_map(|&(start, end)| [(start, 1), (end, -1)])
            .collect();
        // Ends before starts at the same instant: a slot freed and reused is no overlap.
        edges.sort();
        let (mut now, mut peak) = (0, 0);
        for (_, edge) in edges {
            now += edge;
            peak = peak.max(now);
        }
        usize::try_from(peak).unwrap_or(0)
    }
}

#[async_trait]
impl CommandProcessor<Throttled> for Arc<Timeline> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(8)
            .prefetch_count(0)
    }
    async fn process(&self, _: Throttled, _: &Context) -> Result<(), ProcessError> {
        let start = Instant::now();
        *self.running.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        tokio::time::sleep(self.work).await;
        *self.running.lock().unwrap_or_else(PoisonError::into_inner) -= 1;
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((start, Instant::now()));
        Ok(())
    }
}

fn source() -> Source {
    Source::queue(Throttled::NAME).expect("valid name")
}

async fn send(running: &bus_core::RunningHost, from: u32, to: u32) {
    let batch: Vec<Throttled> = (from..to).map(|n| Throttled { n }).collect();
    running.bus().send_batch(&batch).await.expect("sent");
}

/// Pause: a running handler finishes, nothing starts while paused (sends still enqueue),
/// the pause outlives the host, and resume starts the waiting messages within a second.
pub async fn pause_stops_reserving_and_resume_restarts(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
    probe: &dyn Probe,
) {
    let source = source();
    let timeline = Timeline::new(Duration::from_millis(300));
    let running =
        start_command::<Throttled, _>(Arc::clone(&transport), Arc::clone(&timeline)).await;
    send(&running, 0, 1).await;
    assert!(
        wait_until(Duration::from_secs(10), || timeline.started() == 1).await,
        "the first message never started"
    );
    flow.pause(&source).await.expect("paused");
    assert!(flow.flow(&source).await.expect("read").paused);
    // The running handler finishes and is acked.
    let end = Instant::now() + Duration::from_secs(10);
    while probe.counts(&source).await[1] != 0 || timeline.runs().len() != 1 {
        assert!(Instant::now() < end, "the running handler never finished");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    send(&running, 1, 6).await;
    assert!(
        !wait_until(Duration::from_millis(1500), || timeline.started() > 1).await,
        "a message started on a paused queue"
    );
    assert_eq!(probe.counts(&source).await, [5, 0, 0, 0], "sends enqueue");
    // The pause is the queue's, not the host's: a new host takes nothing either.
    running.shutdown().await.expect("shutdown");
    let running = start_command::<Throttled, _>(transport, Arc::clone(&timeline)).await;
    assert!(
        !wait_until(Duration::from_millis(1500), || timeline.started() > 1).await,
        "a new host started a message of a paused queue"
    );
    let resumed = Instant::now();
    flow.resume(&source).await.expect("resumed");
    assert!(!flow.flow(&source).await.expect("read").paused);
    assert!(
        wait_until(Duration::from_secs(10), || timeline.runs().len() == 6).await,
        "not every message ran after the resume"
    );
    let first = timeline.runs()[1..]
        .iter()
        .map(|run| run.0)
        .min()
        .expect("five runs");
    assert!(
        first.duration_since(resumed) < Duration::from_secs(1),
        "the first message started {:?} after the resume",
        first.duration_since(resumed)
    );
    running.shutdown().await.expect("shutdown");
}

/// A concurrency limit of 2 holds across two hosts of 8 handlers each, and is reached.
pub async fn a_concurrency_limit_holds_across_hosts(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
) {
    let source = source();
    flow.limit_concurrency(&source, Some(2))
        .await
        .expect("limited");
    assert_eq!(flow.flow(&source).await.expect("read").concurrency, Some(2));
    let timeline = Timeline::new(Duration::from_millis(20));
    let a = start_command::<Throttled, _>(Arc::clone(&transport), Arc::clone(&timeline)).await;
    let b = start_command::<Throttled, _>(transport, Arc::clone(&timeline)).await;
    send(&a, 0, 60).await;
    let all = wait_until(Duration::from_secs(30), || timeline.runs().len() == 60).await;
    a.shutdown().await.expect("shutdown");
    b.shutdown().await.expect("shutdown");
    flow.limit_concurrency(&source, None)
        .await
        .expect("unlimited");
    assert!(all, "only {} of 60 ran", timeline.runs().len());
    let peak = timeline.peak();
    assert!(peak <= 2, "{peak} ran at once; the limit is 2");
    assert_eq!(peak, 2, "the limit was never reached");
}

/// A rate limit of 5 starts per 400 ms: no window of 400 ms (less the reserve-to-start
/// jitter) holds more than 5 starts, over two hosts.
pub async fn a_rate_limit_holds_across_hosts(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
) {
    const PER: Duration = Duration::from_millis(400);
    const JITTER: Duration = Duration::from_millis(60);
    let source = source();
    let rate = RateLimit::new(5, PER).expect("valid");
    flow.limit_rate(&source, Some(rate)).await.expect("limited");
    assert_eq!(flow.flow(&source).await.expect("read").rate, Some(rate));
    let timeline = Timeline::new(Duration::ZERO);
    let a = start_command::<Throttled, _>(Arc::clone(&transport), Arc::clone(&timeline)).await;
    let b = start_command::<Throttled, _>(transport, Arc::clone(&timeline)).await;
    send(&a, 0, 20).await;
    let all = wait_until(Duration::from_secs(30), || timeline.runs().len() == 20).await;
    a.shutdown().await.expect("shutdown");
    b.shutdown().await.expect("shutdown");
    flow.limit_rate(&source, None).await.expect("unlimited");
    assert!(all, "only {} of 20 ran", timeline.runs().len());
    let mut starts: Vec<Instant> = timeline.runs().iter().map(|r| r.0).collect();
    starts.sort();
    for (i, pair) in starts.windows(6).enumerate() {
        let span = pair[5].duration_since(pair[0]);
        assert!(
            span + JITTER >= PER,
            "starts {i} to {} came within {span:?}: more than 5 per {PER:?}",
            i + 5
        );
    }
    // 20 starts at 5 per window take at least three windows.
    let total = starts[19].duration_since(starts[0]);
    assert!(total + JITTER >= 3 * PER, "20 starts took only {total:?}");
}
