//! Checks of settings, events and stopping, on every transport.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::{not_checked, start_command, wait_until, Probe};
use bus_core::transport::Source;
use bus_core::{
    CommandProcessor, Context, EventProcessor, Host, Message, MessageKind, ProcessError,
    ProcessingSettings, Transport,
};

#[derive(Debug, Serialize, Deserialize)]
struct Paced {
    n: u32,
}
command!(Paced, "conformance-paced");

/// Records how many handlers run at once.
#[derive(Default)]
struct Overlap {
    running: AtomicU32,
    peak: AtomicU32,
    done: AtomicU32,
}

#[async_trait]
impl CommandProcessor<Paced> for Arc<Overlap> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(4)
            .prefetch_count(10)
    }
    async fn process(&self, _: Paced, _: &Context) -> Result<(), ProcessError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// At most `max_concurrent_calls` handlers run at once, more than one does when there is
/// work, and every message is handled once with nothing left behind.
pub async fn concurrency_stays_within_max_concurrent_calls(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    let overlap = Arc::new(Overlap::default());
    let running = start_command::<Paced, _>(transport, Arc::clone(&overlap)).await;
    let batch: Vec<Paced> = (0..300).map(|n| Paced { n }).collect();
    running.bus().send_batch(&batch).await.expect("sent");
    let all = wait_until(Duration::from_secs(30), || {
        overlap.done.load(Ordering::SeqCst) >= 300
    })
    .await;
    running.shutdown().await.expect("shutdown");
    assert!(all, "only {} handled", overlap.done.load(Ordering::SeqCst));
    assert_eq!(
        overlap.done.load(Ordering::SeqCst),
        300,
        "each handled once"
    );
    let peak = overlap.peak.load(Ordering::SeqCst);
    assert!(peak <= 4, "{peak} handlers ran at once; the limit is 4");
    assert!(peak > 1, "handlers never overlapped (peak {peak})");
    let source = Source::queue(Paced::NAME).expect("valid name");
    assert_eq!(probe.counts(&source).await, [0, 0, 0, 0]);
}

#[derive(Debug, Serialize, Deserialize)]
struct Happened {
    n: u32,
}
impl Message for Happened {
    const NAME: &'static str = "conformance-happened";
    const KIND: MessageKind = MessageKind::Event;
}
impl bus_core::Event for Happened {}

/// Every (subscription, event) pair handled.
#[derive(Default)]
struct Received(Mutex<Vec<(&'static str, u32)>>);

macro_rules! subscription {
    ($ty:ident, $name:literal) => {
        struct $ty;
        impl bus_core::Subscription for $ty {
            type Event = Happened;
            const NAME: &'static str = $name;
        }
        #[async_trait]
        impl EventProcessor<$ty> for Arc<Received> {
            async fn process(&self, event: Happened, _: &Context) -> Result<(), ProcessError> {
                self.0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(($name, event.n));
                Ok(())
            }
        }
    };
}
subscription!(Audit, "audit");
subscription!(Billing, "billing");
subscription!(Search, "search");

/// An event published before any subscription exists reaches nobody (and is counted);
/// once the host has started, one reaches each of three subscriptions exactly once.
pub async fn an_event_reaches_each_subscription_once(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    if !transport.capabilities().topics {
        not_checked(
            "an_event_reaches_each_subscription_once",
            "everything",
            "topics: false",
        );
        return;
    }
    let received = Arc::new(Received::default());
    let host = Host::builder()
        .transport(transport)
        .event::<Audit, _>(Arc::clone(&received))
        .event::<Billing, _>(Arc::clone(&received))
        .event::<Search, _>(Arc::clone(&received))
        .build()
        .expect("host builds");
    let bus = host.bus();
    bus.publish(&Happened { n: 1 }).await.expect("published");
    assert_eq!(bus.unrouted_events(), 1, "nobody subscribed yet");
    // `start` returns with every subscription registered.
    let running = host.start().await.expect("host starts");
    bus.publish(&Happened { n: 42 }).await.expect("published");
    let all = wait_until(Duration::from_secs(10), || {
        received.0.lock().map(|r| r.len() >= 3).unwrap_or(true)
    })
    .await;
    running.shutdown().await.expect("shutdown");
    assert!(all, "not every subscription received the event");
    // A duplicate copy would have been handled by now or still wait in a subscription.
    for name in ["audit", "billing", "search"] {
        let source = Source::subscription(Happened::NAME, name).expect("valid names");
        assert_eq!(probe.counts(&source).await, [0, 0, 0, 0], "{name}");
    }
    let mut got = received.0.lock().expect("not poisoned").clone();
    got.sort_unstable();
    assert_eq!(got, [("audit", 42), ("billing", 42), ("search", 42)]);
}

#[derive(Debug, Serialize, Deserialize)]
struct Stubborn {
    n: u32,
}
command!(Stubborn, "conformance-stubborn");

/// A handler that ignores its cancellation token and outlives any grace period.
struct Ignores(AtomicU32);

#[async_trait]
impl CommandProcessor<Stubborn> for Arc<Ignores> {
    async fn process(&self, _: Stubborn, _: &Context) -> Result<(), ProcessError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(())
    }
}

/// An idle host stops at once; a host whose handler ignores shutdown waits for the
/// grace period, no longer than its bound after it, and returns the abandoned message
/// to the queue.
pub async fn shutdown_is_prompt_when_idle_and_bounded_by_the_grace(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    let ignores = Arc::new(Ignores(AtomicU32::new(0)));
    let grace = Duration::from_millis(300);
    let host = || {
        Host::builder()
            .transport(Arc::clone(&transport))
            .command::<Stubborn, _>(Arc::clone(&ignores))
            .shutdown_grace(grace)
            .build()
            .expect("host builds")
    };
    let idle = host().start().await.expect("host starts");
    let asked = Instant::now();
    idle.shutdown().await.expect("shutdown");
    let took = asked.elapsed();
    assert!(
        took < Duration::from_millis(500),
        "idle shutdown took {took:?}"
    );

    let busy = host().start().await.expect("host starts");
    busy.bus().send(&Stubborn { n: 1 }).await.expect("sent");
    let started = wait_until(Duration::from_secs(10), || {
        ignores.0.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(started, "the handler never started");
    let asked = Instant::now();
    busy.shutdown().await.expect("shutdown");
    let took = asked.elapsed();
    assert!(took >= grace, "did not wait for the grace period: {took:?}");
    assert!(
        took < grace + Duration::from_secs(3),
        "waited far past the grace period: {took:?}"
    );
    let source = Source::queue(Stubborn::NAME).expect("valid name");
    let [ready, in_flight, delayed, dead] = probe.counts(&source).await;
    assert_eq!(
        (ready + delayed, in_flight, dead),
        (1, 0, 0),
        "the abandoned message waits to run again"
    );
}
