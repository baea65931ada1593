//! The host's processing semantics on the in-memory transport.

use bus_test_redis::eventually;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bus_core::transport::Outgoing;
use bus_core::{
    Backoff, Bus, CommandProcessor, Context, DeadLetterReason, EventProcessor, EventSubscription,
    Host, MemoryTransport, ProcessError, ProcessingSettings, RedisCommand, RedisEvent, Source,
};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "work")]
struct Work {
    n: u32,
}

#[derive(Debug, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "thing-happened")]
struct ThingHappened {
    n: u32,
}

#[derive(EventSubscription)]
#[bus(event = ThingHappened, name = "audit")]
struct Audit;
#[derive(EventSubscription)]
#[bus(event = ThingHappened, name = "billing")]
struct Billing;
#[derive(EventSubscription)]
#[bus(event = ThingHappened, name = "search")]
struct Search;

/// Runs a host in the background; returns its bus, the stop token and the join handle.
fn start(
    host: Host,
) -> (
    Bus,
    CancellationToken,
    tokio::task::JoinHandle<bus_core::Result<()>>,
) {
    let bus = host.bus();
    let stop = CancellationToken::new();
    let signal = stop.clone();
    let handle = tokio::spawn(host.run(async move { signal.cancelled().await }));
    (bus, stop, handle)
}

struct Concurrency {
    settings: ProcessingSettings,
    running: AtomicUsize,
    peak: AtomicUsize,
    done: AtomicUsize,
}

#[async_trait]
impl CommandProcessor<Work> for Arc<Concurrency> {
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        self.settings.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_handlers_never_exceed_max_concurrent_calls() {
    let transport = MemoryTransport::new();
    let counter = Arc::new(Concurrency {
        settings: ProcessingSettings::default()
            .max_concurrent_calls(4)
            .prefetch_count(10),
        running: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
    });
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Arc::clone(&counter))
        .build()
        .unwrap();
    let (bus, stop, handle) = start(host);
    let work: Vec<Work> = (0..300).map(|n| Work { n }).collect();
    bus.send_batch(&work).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || counter
            .done
            .load(Ordering::SeqCst)
            == 300)
        .await
    );
    stop.cancel();
    handle.await.unwrap().unwrap();
    let peak = counter.peak.load(Ordering::SeqCst);
    assert!(peak <= 4, "{peak} handlers ran at once; the limit is 4");
    assert!(
        peak > 1,
        "handlers never overlapped (peak {peak}): concurrency is not used"
    );
    let stats = transport.stats(&Source::queue("work").unwrap());
    assert!(stats.is_empty(), "{stats:?}");
}

struct AlwaysFails {
    runs: AtomicUsize,
}

#[async_trait]
impl CommandProcessor<Work> for Arc<AlwaysFails> {
    async fn process(&self, work: Work, _: &Context) -> Result<(), ProcessError> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        Err(format!("boom {run} for {}", work.n).into())
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .dead_letter_delivery_limit(3)
            .retry(Backoff::fixed(Duration::from_millis(10)))
    }
}

#[tokio::test]
async fn always_failing_handler_runs_exactly_the_limit_then_dead_letters() {
    let transport = MemoryTransport::new();
    let processor = Arc::new(AlwaysFails {
        runs: AtomicUsize::new(0),
    });
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Arc::clone(&processor))
        .build()
        .unwrap();
    let (bus, stop, handle) = start(host);
    let id = bus.send(&Work { n: 7 }).await.unwrap();
    let queue = Source::queue("work").unwrap();
    assert!(
        eventually(Duration::from_secs(10), || transport
            .stats(&queue)
            .dead_letters
            == 1)
        .await
    );
    stop.cancel();
    handle.await.unwrap().unwrap();
    // A wrongly scheduled extra retry would still be waiting somewhere.
    let stats = transport.stats(&queue);
    assert_eq!((stats.ready, stats.in_flight, stats.delayed), (0, 0, 0));

    assert_eq!(processor.runs.load(Ordering::SeqCst), 3);
    let dead = transport.dead_letters(&queue);
    assert_eq!(dead.len(), 1);
    let dead = &dead[0];
    assert_eq!(dead.known_reason(), Some(DeadLetterReason::DeliveryLimit));
    assert_eq!(dead.delivery_count, 3);
    let texts: Vec<&str> = dead.errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(texts, ["boom 1 for 7", "boom 2 for 7", "boom 3 for 7"]);
    // The original message is kept unchanged.
    let envelope = bus_core::Envelope::decode(&dead.payload).unwrap();
    assert_eq!(envelope.id, id);
    let stats = transport.stats(&queue);
    assert_eq!((stats.ready, stats.in_flight, stats.delayed), (0, 0, 0));
}

struct Rejects;

#[async_trait]
impl CommandProcessor<Work> for Rejects {
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        Err(ProcessError::dead_letter("not valid, ever"))
    }
}

#[tokio::test]
async fn rejected_undecodable_and_unknown_messages_are_dead_lettered_with_reasons() {
    let transport = MemoryTransport::new();
    let queue = Source::queue("work").unwrap();
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Rejects)
        .build()
        .unwrap();
    let (bus, stop, handle) = start(host);
    bus.send(&Work { n: 1 }).await.unwrap();
    // Stored through the transport contract, as a foreign producer would write them.
    let store = |id: &str, payload: Vec<u8>| {
        let message = Outgoing {
            id: bus_core::MessageId::from(id.to_owned()),
            payload: payload.into(),
        };
        bus_core::Transport::send(&transport, "work", vec![message])
    };
    store("garbage-1", b"definitely not an envelope".to_vec())
        .await
        .unwrap();
    let wrong_body = bus_core::Envelope::new("work", bus_core::Format::Json, &b"{\"n\":\"x\"}"[..]);
    store("wrong-body", wrong_body.encode().unwrap().to_vec())
        .await
        .unwrap();
    let other = bus_core::Envelope::new("other-type", bus_core::Format::Json, &b"{}"[..]);
    store("other", other.encode().unwrap().to_vec())
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || transport
            .stats(&queue)
            .dead_letters
            == 4)
        .await
    );
    stop.cancel();
    handle.await.unwrap().unwrap();

    let mut reasons: Vec<(String, Option<DeadLetterReason>)> = transport
        .dead_letters(&queue)
        .into_iter()
        .map(|d| (d.storage_id.clone(), d.known_reason()))
        .filter(|(key, _)| key.len() < 20)
        .collect();
    reasons.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        reasons,
        [
            ("garbage-1".to_owned(), Some(DeadLetterReason::Undecodable)),
            ("other".to_owned(), Some(DeadLetterReason::UnknownType)),
            ("wrong-body".to_owned(), Some(DeadLetterReason::Undecodable)),
        ]
    );
    let rejected: Vec<_> = transport
        .dead_letters(&queue)
        .into_iter()
        .filter(|d| d.known_reason() == Some(DeadLetterReason::Rejected))
        .collect();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].errors[0].message, "not valid, ever");
}

#[derive(Default)]
struct Received(Mutex<Vec<(String, u32)>>);

macro_rules! subscription_processor {
    ($sub:ty, $name:literal) => {
        #[async_trait]
        impl EventProcessor<$sub> for Arc<Received> {
            async fn process(&self, event: ThingHappened, _: &Context) -> Result<(), ProcessError> {
                self.0.lock().unwrap().push(($name.to_owned(), event.n));
                Ok(())
            }
        }
    };
}
subscription_processor!(Audit, "audit");
subscription_processor!(Billing, "billing");
subscription_processor!(Search, "search");

#[tokio::test]
async fn an_event_reaches_each_of_three_subscriptions_once() {
    let transport = MemoryTransport::new();
    let received = Arc::new(Received::default());
    let host = Host::builder()
        .transport(transport.clone())
        .event::<Audit, _>(Arc::clone(&received))
        .event::<Billing, _>(Arc::clone(&received))
        .event::<Search, _>(Arc::clone(&received))
        .build()
        .unwrap();
    // Before any subscription exists, an event reaches nobody: counted.
    let bus = host.bus();
    bus.publish(&ThingHappened { n: 1 }).await.unwrap();
    assert_eq!(bus.unrouted_events(), 1);
    // `start` returns with every subscription registered: no waiting needed.
    let running = host.start().await.unwrap();
    assert_eq!(transport.subscriptions("thing-happened").len(), 3);
    running
        .bus()
        .publish(&ThingHappened { n: 42 })
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || received.0.lock().unwrap().len()
            >= 3)
        .await
    );
    running.shutdown().await.unwrap();
    // A duplicate copy would have been handled by now or still wait in a subscription.
    for name in ["audit", "billing", "search"] {
        let stats = transport.stats(&Source::subscription("thing-happened", name).unwrap());
        assert_eq!(
            (stats.ready, stats.in_flight, stats.delayed),
            (0, 0, 0),
            "{name}"
        );
    }
    let mut got = received.0.lock().unwrap().clone();
    got.sort();
    assert_eq!(
        got,
        [
            ("audit".into(), 42),
            ("billing".into(), 42),
            ("search".into(), 42)
        ]
    );
}

struct Slow {
    started: AtomicUsize,
    finished: AtomicUsize,
    duration: Duration,
}

#[async_trait]
impl CommandProcessor<Work> for Arc<Slow> {
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.duration).await;
        self.finished.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(1)
            .prefetch_count(5)
    }
}

fn slow_host(transport: &MemoryTransport, slow: &Arc<Slow>, grace: Duration) -> Host {
    Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Arc::clone(slow))
        .shutdown_grace(grace)
        .build()
        .unwrap()
}

#[tokio::test]
async fn run_returns_promptly_when_idle() {
    let transport = MemoryTransport::new();
    let slow = Arc::new(Slow {
        started: 0.into(),
        finished: 0.into(),
        duration: Duration::ZERO,
    });
    // `start` returns once the consumer is open.
    let running = slow_host(&transport, &slow, Duration::from_secs(30))
        .start()
        .await
        .unwrap();
    let asked = Instant::now();
    running.shutdown().await.unwrap();
    let took = asked.elapsed();
    assert!(
        took < Duration::from_millis(500),
        "idle shutdown took {took:?}"
    );
}

#[tokio::test]
async fn shutdown_waits_for_a_running_handler_and_releases_prefetched_ones() {
    let transport = MemoryTransport::new();
    let queue = Source::queue("work").unwrap();
    let slow = Arc::new(Slow {
        started: 0.into(),
        finished: 0.into(),
        duration: Duration::from_millis(400),
    });
    let (bus, stop, handle) = start(slow_host(&transport, &slow, Duration::from_secs(30)));
    bus.send_batch(&[Work { n: 1 }, Work { n: 2 }, Work { n: 3 }])
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || slow
            .started
            .load(Ordering::SeqCst)
            == 1)
        .await
    );
    stop.cancel();
    handle.await.unwrap().unwrap();
    // The running handler finished; the two prefetched messages went back, uncounted.
    assert_eq!(slow.finished.load(Ordering::SeqCst), 1);
    let stats = transport.stats(&queue);
    assert_eq!((stats.ready, stats.in_flight), (2, 0));

    // They are delivered again as first deliveries.
    let counts = Arc::new(Mutex::new(Vec::new()));
    struct Counts(Arc<Mutex<Vec<u32>>>);
    #[async_trait]
    impl CommandProcessor<Work> for Counts {
        async fn process(&self, _: Work, ctx: &Context) -> Result<(), ProcessError> {
            self.0.lock().unwrap().push(ctx.delivery_count());
            Ok(())
        }
    }
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Counts(Arc::clone(&counts)))
        .build()
        .unwrap();
    let (_bus, stop, handle) = start(host);
    assert!(eventually(Duration::from_secs(5), || counts.lock().unwrap().len() == 2).await);
    stop.cancel();
    handle.await.unwrap().unwrap();
    assert_eq!(*counts.lock().unwrap(), [1, 1]);
}

#[tokio::test]
async fn shutdown_gives_up_on_a_handler_after_the_grace_period() {
    let transport = MemoryTransport::new();
    let queue = Source::queue("work").unwrap();
    let slow = Arc::new(Slow {
        started: 0.into(),
        finished: 0.into(),
        duration: Duration::from_secs(30),
    });
    let (bus, stop, handle) = start(slow_host(&transport, &slow, Duration::from_millis(300)));
    bus.send(&Work { n: 1 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || slow
            .started
            .load(Ordering::SeqCst)
            == 1)
        .await
    );
    let asked = Instant::now();
    stop.cancel();
    handle.await.unwrap().unwrap();
    let took = asked.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "did not wait for the grace period: {took:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "waited far past the grace period: {took:?}"
    );
    assert_eq!(slow.finished.load(Ordering::SeqCst), 0);
    // The abandoned message is back in the queue, its error recorded.
    let stats = transport.stats(&queue);
    assert_eq!(
        (stats.ready, stats.in_flight, stats.dead_letters),
        (1, 0, 0)
    );
}

#[tokio::test]
async fn delayed_send_waits_until_due() {
    let transport = MemoryTransport::new();
    let slow = Arc::new(Slow {
        started: 0.into(),
        finished: 0.into(),
        duration: Duration::ZERO,
    });
    let (bus, stop, handle) = start(slow_host(&transport, &slow, Duration::from_secs(1)));
    let sent = Instant::now();
    bus.send_delayed(&Work { n: 1 }, Duration::from_millis(300))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || slow
            .finished
            .load(Ordering::SeqCst)
            == 1)
        .await
    );
    let took = sent.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "delivered early: {took:?}"
    );
    stop.cancel();
    handle.await.unwrap().unwrap();
}

#[tokio::test]
async fn oversized_messages_and_bad_registrations_are_refused() {
    let transport = MemoryTransport::new();
    let host = Host::builder()
        .transport(transport)
        .max_message_size(64)
        .command::<Work, _>(Rejects)
        .build()
        .unwrap();
    let err = host.bus().send(&Work { n: 1 }).await.unwrap_err();
    assert!(
        matches!(err, bus_core::Error::MessageTooLarge { max: 64, .. }),
        "{err}"
    );

    let err = Host::builder()
        .transport(MemoryTransport::new())
        .command::<Work, _>(Rejects)
        .command::<Work, _>(Rejects)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("two processors"), "{err}");
}

struct Patient;

#[async_trait]
impl CommandProcessor<Work> for Patient {
    async fn process(&self, _: Work, ctx: &Context) -> Result<(), ProcessError> {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(60)) => Ok(()),
            () = ctx.cancellation().cancelled() => Err("stopped: the host is shutting down".into()),
        }
    }
}

#[tokio::test]
async fn a_handler_that_watches_its_token_stops_when_shutdown_starts() {
    let transport = MemoryTransport::new();
    let queue = Source::queue("work").unwrap();
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Patient)
        .shutdown_grace(Duration::from_secs(30))
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    running.bus().send(&Work { n: 1 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || transport.stats(&queue).in_flight
            == 1)
        .await
    );
    let asked = Instant::now();
    running.shutdown().await.unwrap();
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "shutdown waited {took:?} for a handler that was told to stop"
    );
    // Its error retries the message: waiting again, not lost, not dead.
    let stats = transport.stats(&queue);
    assert_eq!(
        (
            stats.ready + stats.delayed,
            stats.in_flight,
            stats.dead_letters
        ),
        (1, 0, 0),
        "{stats:?}"
    );
}
