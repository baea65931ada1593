//! When a host stops starting messages (a breaker opened by a handler's outcome), what a
//! reserve on its way at that moment brings back goes back to the queue unstarted, like
//! the prefetch: the worker reads whether starts may go on before it reserves, not after.
//! The transport here is the in-memory one, with a consumer that holds its second reserve's
//! answer until the breaker has opened.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{Consumer, Receipt, Received, Source, Want};
use bus_core::{CommandProcessor, Context, Host, ProcessError, RedisCommand, Result};
use bus_test_redis::eventually;
use common::{Tap, Tapped};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "work")]
struct Work {
    n: u32,
}

/// What the test and its transport share.
#[derive(Debug, Default)]
struct Seen {
    /// Reserves that took something.
    takes: AtomicU32,
    /// Releases (messages sent back unstarted).
    releases: AtomicU32,
    /// Handlers run.
    runs: AtomicU32,
}

/// The second reserve that takes something answers only once something was released (the
/// breaker opened and its prefetch went back).
#[derive(Debug, Default)]
struct Holding(Arc<Seen>);

#[async_trait]
impl Tap for Holding {
    async fn receive(
        &self,
        inner: &dyn Consumer,
        want: Want,
        stop: &CancellationToken,
    ) -> Result<Received> {
        let received = inner.receive(want, stop).await?;
        if !received.deliveries.is_empty() && self.0.takes.fetch_add(1, Ordering::SeqCst) == 1 {
            let seen = Arc::clone(&self.0);
            eventually(Duration::from_secs(10), move || {
                seen.releases.load(Ordering::SeqCst) > 0
            })
            .await;
        }
        Ok(received)
    }
    async fn release(&self, inner: &dyn Consumer, receipts: &[Receipt]) -> Result<()> {
        inner.release(receipts).await?;
        self.0.releases.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Fails every message; its second run waits until the second reserve has taken one, so
/// that reserve is on its way when the fifth failure opens the breaker.
struct Failing(Arc<Seen>);

#[async_trait]
impl CommandProcessor<Work> for Failing {
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        if self.0.runs.fetch_add(1, Ordering::SeqCst) == 1 {
            let seen = Arc::clone(&self.0);
            eventually(Duration::from_secs(10), move || {
                seen.takes.load(Ordering::SeqCst) >= 2
            })
            .await;
        }
        Err(ProcessError::retry("the downstream service is down"))
    }
    fn settings(&self) -> bus_core::ProcessingSettings {
        bus_core::ProcessingSettings::default()
            .max_concurrent_calls(1)
            .dead_letter_delivery_limit(1_000)
            .retry(bus_core::Backoff::Immediate)
            .circuit_breaker(Some(
                bus_core::CircuitBreaker::default()
                    .minimum_calls(5)
                    .failure_ratio(0.5)
                    .window(Duration::from_secs(10))
                    .cool_down(Duration::from_secs(60)),
            ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserve_on_its_way_when_the_breaker_opens_starts_nothing_and_loses_nothing() {
    let seen = Arc::new(Seen::default());
    let transport = Tapped::new(Holding(Arc::clone(&seen)));
    let queue = Source::queue("work").unwrap();
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Failing(Arc::clone(&seen)))
        .build()
        .unwrap();
    let bus = host.bus();
    // All there before the host starts: the first reserve takes 9 (one handler, prefetch 8),
    // the second (when the first run frees its slot) one more.
    for n in 0..12 {
        bus.send(&Work { n }).await.unwrap();
    }
    let stop = CancellationToken::new();
    let signal = stop.clone();
    let handle = tokio::spawn(host.run(async move { signal.cancelled().await }));

    assert!(
        eventually(Duration::from_secs(10), || {
            let stats = transport.inner.stats(&queue);
            seen.runs.load(Ordering::SeqCst) >= 5
                && stats.in_flight == 0
                && stats.ready + stats.delayed == 12
        })
        .await,
        "not all back in the queue: {:?}, {seen:?}",
        transport.inner.stats(&queue)
    );
    assert_eq!(seen.takes.load(Ordering::SeqCst), 2, "{seen:?}");
    // The fifth failure opened the breaker. The prefetch (4 left of the first 9) went back,
    // and so did the message the second reserve brought after it opened: without reading
    // the epoch of starts before reserving, it ran (6 runs).
    assert_eq!(seen.runs.load(Ordering::SeqCst), 5, "{seen:?}");
    assert!(seen.releases.load(Ordering::SeqCst) >= 2, "{seen:?}");
    stop.cancel();
    handle.await.unwrap().unwrap();
}
