//! Host behaviour on the in-memory transport that the transport conformance suite
//! (`bus_conformance`, run by `conformance_memory.rs` here and by bus-redis) does not
//! cover: foreign and malformed input, and a handler watching its token.

use bus_core::transport::Placement;
use bus_test_redis::eventually;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bus_core::transport::{DeadLetterReason, Outgoing, Source};
use bus_core::{Bus, CommandProcessor, Context, Host, MemoryTransport, ProcessError, RedisCommand};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "work")]
struct Work {
    n: u32,
}

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
        bus_core::Transport::send(&transport, "work", Placement::now(), vec![message])
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

/// Fails while `failing` is set; records each run's start, end and whether it failed.
struct Flaky {
    failing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    runs: std::sync::Arc<std::sync::Mutex<Vec<(Instant, Instant, bool)>>>,
}

#[async_trait]
impl CommandProcessor<Work> for Flaky {
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        let start = Instant::now();
        let failed = self.failing.load(std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.runs
            .lock()
            .unwrap()
            .push((start, Instant::now(), failed));
        if failed {
            return Err(ProcessError::retry("the downstream service is down"));
        }
        Ok(())
    }
    fn settings(&self) -> bus_core::ProcessingSettings {
        bus_core::ProcessingSettings::default()
            .max_concurrent_calls(1)
            .prefetch_count(0)
            .dead_letter_delivery_limit(1_000)
            .retry(bus_core::Backoff::Immediate)
            .circuit_breaker(Some(
                bus_core::CircuitBreaker::default()
                    .minimum_calls(5)
                    .failure_ratio(0.5)
                    .window(Duration::from_secs(10))
                    .cool_down(COOL_DOWN),
            ))
    }
}

const COOL_DOWN: Duration = Duration::from_millis(300);

#[tokio::test]
async fn a_circuit_breaker_stops_reserving_then_probes_one_message_and_closes_on_success() {
    let logs = bus_test_redis::Logs::capture("bus_core=info");
    let transport = MemoryTransport::new();
    let queue = Source::queue("work").unwrap();
    let failing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let runs = std::sync::Arc::default();
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Flaky {
            failing: std::sync::Arc::clone(&failing),
            runs: std::sync::Arc::clone(&runs),
        })
        .build()
        .unwrap();
    let (bus, stop, handle) = start(host);
    for n in 0..20 {
        bus.send(&Work { n }).await.unwrap();
    }
    let count = || runs.lock().unwrap().len();
    // Five failures open it; two probes fail and re-open it.
    assert!(eventually(Duration::from_secs(10), || count() >= 7).await);
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(10), || transport.stats(&queue).ready
            == 0
            && transport.stats(&queue).in_flight == 0
            && count() >= 20 + 7)
        .await,
        "the breaker never closed"
    );
    let runs = runs.lock().unwrap().clone();
    // The minimum of five runs, all failed, before it opened: no sixth before the cool-down.
    assert!(runs[..5].iter().all(|r| r.2));
    for probe in 5..8 {
        let (before, this) = (runs[probe - 1], runs[probe]);
        assert!(
            this.0 - before.0 >= COOL_DOWN,
            "run {probe} started {:?} after the one before, within the cool-down",
            this.0 - before.0
        );
        assert!(this.0 >= before.1, "a probe ran alongside another run");
    }
    // Probes 5 and 6 failed (re-opened); probe 7 succeeded and closed it.
    assert!(runs[5].2 && runs[6].2 && !runs[7].2);
    // Closed: the rest flowed without a cool-down between them, none before the probe ended.
    assert!(runs[8].0 >= runs[7].1);
    assert!(runs[8..].iter().all(|r| !r.2));
    assert!(
        runs.last().unwrap().0 - runs[8].0 < COOL_DOWN * 10,
        "after closing, the remaining messages should not wait for cool-downs"
    );
    // One log line per change of state: opened, three probes, two re-opened, closed.
    let count = |text: &str| logs.matching(text).len();
    assert_eq!(
        [
            count("circuit breaker opened"),
            count("circuit breaker half-open"),
            count("circuit breaker re-opened"),
            count("circuit breaker closed"),
        ],
        [1, 3, 2, 1],
        "{:#?}",
        logs.lines()
    );
    assert!(logs.matching("circuit breaker opened")[0].contains("queue work"));
    stop.cancel();
    handle.await.unwrap().unwrap();
}

/// Fails after 50 ms (a call to a service that is down); counts its runs. One handler at
/// a time, the default prefetch.
struct Failing(std::sync::Arc<std::sync::atomic::AtomicU32>);

#[async_trait]
impl CommandProcessor<Work> for Failing {
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
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

/// With prefetch on (the default), what the host holds unstarted when its breaker opens
/// goes back to the queue instead of starting during the cool-down: nothing starts after
/// the failure that opened it.
#[tokio::test]
async fn an_open_breaker_sends_prefetched_messages_back_unstarted() {
    let transport = MemoryTransport::new();
    let queue = Source::queue("work").unwrap();
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Failing(runs.clone()))
        .build()
        .unwrap();
    let (bus, stop, handle) = start(host);
    for n in 0..40 {
        bus.send(&Work { n }).await.unwrap();
    }
    // Everything back in the queue, nothing held: what did not run was sent back.
    assert!(
        eventually(Duration::from_secs(10), || {
            let stats = transport.stats(&queue);
            runs.load(std::sync::atomic::Ordering::SeqCst) >= 5
                && stats.in_flight == 0
                && stats.ready + stats.delayed == 40
        })
        .await,
        "{:?}",
        transport.stats(&queue)
    );
    // Without the hold, all 8 prefetched ran (13 runs). The fifth failure's settle stops
    // the worker's starts before its handler slot is free, so not even that slot takes one.
    let ran = runs.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(ran, 5, "the breaker opened at 5, and 8 were prefetched");
    stop.cancel();
    handle.await.unwrap().unwrap();
}

struct Counts(std::sync::Arc<std::sync::atomic::AtomicU32>);

#[async_trait]
impl CommandProcessor<Work> for Counts {
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// `bus-expires-at` is `0|[1-9][0-9]*` (docs/wire-format.md, "Expiry"): a value a reader
/// of only that grammar refuses is dead-lettered `undecodable` here too, never run, so a
/// mixed fleet treats one message one way whoever reserves it.
#[tokio::test]
async fn a_deadline_outside_its_grammar_is_undecodable_and_never_runs() {
    let transport = MemoryTransport::new();
    let queue = Source::queue("work").unwrap();
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Counts(runs.clone()))
        .build()
        .unwrap();
    let (bus, stop, handle) = start(host);
    let far = "99999999999999";
    let malformed = [
        format!(" {far}"),
        format!("{far} "),
        format!("+{far}"),
        format!("0{far}"),
        String::new(),
        "18446744073709551616".to_owned(),
    ];
    for value in malformed.iter().map(String::as_str).chain([far]) {
        let options = bus_core::SendOptions::new().header(bus_core::headers::EXPIRES_AT, value);
        bus.send_with(&Work { n: 1 }, &options).await.unwrap();
    }
    let done = eventually(Duration::from_secs(10), || {
        transport.stats(&queue).dead_letters == malformed.len() as u64
            && runs.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    assert!(done, "{:?}", transport.stats(&queue));
    for dead in transport.dead_letters(&queue) {
        assert_eq!(dead.known_reason(), Some(DeadLetterReason::Undecodable));
        assert!(
            dead.errors[0].message.contains("bus-expires-at"),
            "{}",
            dead.errors[0].message
        );
    }
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
}
