//! Host metrics end to end (feature `prometheus`): a host on the in-memory transport
//! handles messages, some retried, some dead-lettered; the Prometheus endpoint the
//! application started is scraped over HTTP and its values checked against what the test
//! did.

use bus_core::transport::ConsumerExt;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{ConsumerOptions, Source};
use bus_core::{
    Bus, CommandProcessor, Context, EventProcessor, EventSubscription, Host, MemoryTransport,
    ProcessError, ProcessingSettings, RedisCommand, RedisEvent, Transport,
};
use bus_test_redis::eventually;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "work")]
struct Work {
    n: u32,
}

#[derive(Debug, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "paid")]
struct Paid {
    n: u32,
}

#[derive(EventSubscription)]
#[bus(event = Paid, name = "mail")]
struct Mail;

/// Dead-letters every n divisible by 4; fails the first delivery of n % 4 == 1 once.
#[derive(Default)]
struct Worker {
    acked: AtomicUsize,
}

#[async_trait]
impl CommandProcessor<Work> for Arc<Worker> {
    async fn process(&self, work: Work, ctx: &Context) -> Result<(), ProcessError> {
        match work.n % 4 {
            0 => Err(ProcessError::dead_letter(format!("{} is refused", work.n))),
            1 if ctx.delivery_count() == 1 => {
                Err(ProcessError::retry_after(Duration::ZERO, "not yet"))
            }
            _ => {
                self.acked.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        }
    }
}

#[async_trait]
impl EventProcessor<Mail> for Arc<Worker> {
    async fn process(&self, _: Paid, _: &Context) -> Result<(), ProcessError> {
        self.acked.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// The process's one Prometheus endpoint (a recorder is global), started by the first
/// test that asks, on a runtime of its own: the endpoint runs on the runtime it was
/// started in, and each test's runtime ends with the test. Each test uses queues of its
/// own, so their series do not mix.
fn endpoint() -> SocketAddr {
    static ENDPOINT: OnceLock<SocketAddr> = OnceLock::new();
    *ENDPOINT.get_or_init(|| {
        let addr = free_port();
        let (started, ready) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let _ = started.send(bus_core::metrics::serve_prometheus(addr).map(drop));
                std::future::pending::<()>().await
            })
        });
        ready.recv().unwrap().unwrap();
        addr
    })
}

/// `GET /metrics` over plain HTTP/1.1; the body.
fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The value of the series `name` whose labels include every one of `labels` (and no
/// `error_type` unless asked for: failed calls are series of their own).
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let failed = labels.iter().any(|(k, _)| *k == "error_type");
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| failed || !l.contains("error_type="))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prometheus_endpoint_counts_what_the_host_did() {
    let addr = endpoint();
    // A second recorder cannot be installed: a clear error, not a panic.
    let again = bus_core::metrics::serve_prometheus(free_port()).unwrap_err();
    assert!(again.to_string().contains("cannot serve"), "{again}");

    let transport = MemoryTransport::new();
    let worker = Arc::new(Worker::default());
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Arc::clone(&worker))
        .event::<Mail, _>(Arc::clone(&worker))
        .build()
        .unwrap();
    let bus: Bus = host.bus();
    let stop = CancellationToken::new();
    let signal = stop.clone();
    let running = tokio::spawn(host.run(async move { signal.cancelled().await }));

    // 12 commands in one batch: 3 dead-lettered (0, 4, 8), 3 retried once (1, 5, 9), 9
    // acknowledged; and one event to a subscription, acknowledged.
    const N: u32 = 12;
    let (dead, retried, acked) = (3.0, 3.0, 9.0);
    let work: Vec<Work> = (0..N).map(|n| Work { n }).collect();
    assert!(
        eventually(WAIT, || !transport.subscriptions("paid").is_empty()).await,
        "the subscription was never registered"
    );
    bus.send_batch(&work).await.unwrap();
    bus.publish(&Paid { n: 1 }).await.unwrap();
    let queue = Source::queue("work").unwrap();
    assert!(
        eventually(WAIT, || worker.acked.load(Ordering::SeqCst) == 10
            && transport.stats(&queue).dead_letters == 3)
        .await,
        "handled {} of 10, {:?}",
        worker.acked.load(Ordering::SeqCst),
        transport.stats(&queue)
    );

    let work_labels = [("messaging_destination_name", "work")];
    let handled = |text: &str, outcome: &str| {
        value(
            text,
            "bus_host_handled_messages_total",
            &[work_labels[0], ("bus_outcome", outcome)],
        )
    };
    let mut text = String::new();
    let settled = eventually(WAIT, || {
        text = scrape(addr);
        handled(&text, "ack") == Some(acked)
            && handled(&text, "dead_letter") == Some(dead)
            && handled(&text, "retry") == Some(retried)
    })
    .await;
    assert!(settled, "{text}");
    let consumed = value(
        &text,
        "messaging_client_consumed_messages_total",
        &work_labels,
    );
    assert_eq!(consumed, Some(f64::from(N) + retried), "{text}");
    let processed = value(
        &text,
        "messaging_process_duration_seconds_count",
        &[work_labels[0], ("bus_outcome", "dead_letter")],
    );
    assert_eq!(processed, Some(dead), "{text}");
    let mail = [
        ("messaging_destination_name", "paid"),
        ("messaging_destination_subscription_name", "mail"),
        ("bus_outcome", "ack"),
    ];
    assert_eq!(
        value(&text, "bus_host_handled_messages_total", &mail),
        Some(1.0),
        "{text}"
    );
    // The producer side: 12 sent in one call of 12, one published.
    let sent = |op: &str, destination: &str| {
        value(
            &text,
            "messaging_client_sent_messages_total",
            &[
                ("messaging_operation_name", op),
                ("messaging_destination_name", destination),
            ],
        )
    };
    assert_eq!(sent("send", "work"), Some(f64::from(N)), "{text}");
    assert_eq!(sent("publish", "paid"), Some(1.0), "{text}");
    let send = ("messaging_operation_name", "send");
    let batches = value(
        &text,
        "bus_client_batch_size_bucket",
        &[work_labels[0], send, ("le", "10")],
    );
    assert_eq!(batches, Some(0.0), "a batch of 12 is not under 10: {text}");
    let batches = value(
        &text,
        "bus_client_batch_size_bucket",
        &[work_labels[0], send, ("le", "20")],
    );
    assert_eq!(batches, Some(1.0), "{text}");
    // Transport calls are timed: every dead letter went through one call.
    let dead_letter_calls = value(
        &text,
        "messaging_client_operation_duration_seconds_count",
        &[work_labels[0], ("messaging_operation_name", "dead_letter")],
    );
    assert_eq!(dead_letter_calls, Some(dead), "{text}");
    let failed_calls = value(
        &text,
        "messaging_client_operation_duration_seconds_count",
        &[
            work_labels[0],
            ("messaging_operation_name", "dead_letter"),
            ("error_type", "transport"),
        ],
    );
    assert_eq!(failed_calls, Some(0.0), "{text}");
    // Nothing runs or waits once all is handled.
    assert_eq!(
        value(&text, "bus_host_handlers_running", &work_labels),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "bus_host_prefetched_messages", &work_labels),
        Some(0.0),
        "{text}"
    );
    assert!(
        text.contains("# HELP messaging_process_duration_seconds "),
        "{text}"
    );

    stop.cancel();
    running.await.unwrap().unwrap();
}

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "slow")]
struct Slow {
    n: u32,
}

/// Outlasts its lock several times over: the host must renew it.
struct Sleeper {
    done: AtomicUsize,
}

#[async_trait]
impl CommandProcessor<Slow> for Arc<Sleeper> {
    async fn process(&self, _: Slow, _: &Context) -> Result<(), ProcessError> {
        tokio::time::sleep(Duration::from_millis(1300)).await;
        self.done.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default().message_lock_timeout(Duration::from_secs(1))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_renewals_and_recoveries_are_counted() {
    let addr = endpoint();
    let transport = MemoryTransport::new();
    let bus = Bus::new(transport.clone(), bus_core::BusConfig::default());
    bus.send_batch(&[Slow { n: 1 }, Slow { n: 2 }])
        .await
        .unwrap();
    // A consumer reserves both and dies: their locks (100 ms) expire unsettled.
    let queue = Source::queue("slow").unwrap();
    let crashed = transport
        .consumer(&queue, ConsumerOptions::new(Duration::from_millis(100), 5))
        .await
        .unwrap();
    let taken = crashed.take(2, &CancellationToken::new()).await.unwrap();
    assert_eq!(taken.len(), 2);
    drop(crashed);
    bus.send(&Slow { n: 3 }).await.unwrap();

    let sleeper = Arc::new(Sleeper {
        done: AtomicUsize::new(0),
    });
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Slow, _>(Arc::clone(&sleeper))
        .recovery_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let signal = stop.clone();
    let running = tokio::spawn(host.run(async move { signal.cancelled().await }));
    assert!(
        eventually(Duration::from_secs(30), || sleeper
            .done
            .load(Ordering::SeqCst)
            == 3)
        .await,
        "handled {} of 3",
        sleeper.done.load(Ordering::SeqCst)
    );

    let slow = ("messaging_destination_name", "slow");
    let text = scrape(addr);
    assert_eq!(
        value(&text, "bus_host_recovered_messages_total", &[slow]),
        Some(2.0),
        "{text}"
    );
    // Each message ran 1.3 s under a 1 s lock renewed every third of it: at least one
    // renewal kept each, and none was lost.
    let kept = value(
        &text,
        "bus_host_lock_renewals_total",
        &[slow, ("bus_lock_result", "kept")],
    );
    assert!(kept.is_some_and(|k| k >= 3.0), "{kept:?} in {text}");
    let lost = value(
        &text,
        "bus_host_lock_renewals_total",
        &[slow, ("bus_lock_result", "lost")],
    );
    assert_eq!(lost, Some(0.0), "{text}");
    let recover_calls = value(
        &text,
        "messaging_client_operation_duration_seconds_count",
        &[slow, ("messaging_operation_name", "recover")],
    );
    assert!(recover_calls.is_some_and(|n| n >= 2.0), "{text}");
    // The two recovered ones were delivered a second time.
    let consumed = value(&text, "messaging_client_consumed_messages_total", &[slow]);
    assert_eq!(consumed, Some(3.0), "{text}");

    stop.cancel();
    running.await.unwrap().unwrap();
}

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "gated")]
struct Gated {
    n: u32,
}

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "held")]
struct Held {
    n: u32,
}

/// Fails every `Gated` behind a breaker that opens after 3 runs and stays open for
/// the test; handles every `Held`.
struct Down;

#[async_trait]
impl CommandProcessor<Gated> for Arc<Down> {
    async fn process(&self, _: Gated, _: &Context) -> Result<(), ProcessError> {
        Err(ProcessError::retry("down"))
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .dead_letter_delivery_limit(100)
            .circuit_breaker(Some(
                bus_core::CircuitBreaker::default()
                    .minimum_calls(3)
                    .cool_down(Duration::from_secs(600)),
            ))
    }
}

#[async_trait]
impl CommandProcessor<Held> for Arc<Down> {
    async fn process(&self, _: Held, _: &Context) -> Result<(), ProcessError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_and_a_paused_queue_show_in_the_host_metrics() {
    use bus_core::flow::FlowControl;
    let addr = endpoint();
    let transport = MemoryTransport::new();
    let bus = Bus::new(transport.clone(), bus_core::BusConfig::default());
    let down = Arc::new(Down);
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Gated, _>(Arc::clone(&down))
        .command::<Held, _>(Arc::clone(&down))
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let signal = stop.clone();
    let running = tokio::spawn(host.run(async move { signal.cancelled().await }));
    let gauge = |name: &str, queue: &str| {
        value(
            &scrape(addr),
            name,
            &[("messaging_destination_name", queue)],
        )
    };
    assert!(
        eventually(WAIT, || gauge("bus_host_breaker_state", "gated")
            == Some(0.0))
        .await,
        "{}",
        scrape(addr)
    );
    assert!(eventually(WAIT, || gauge("bus_host_queue_paused", "held") == Some(0.0)).await);
    for n in 0..3 {
        bus.send(&Gated { n }).await.unwrap();
    }
    assert!(
        eventually(WAIT, || gauge("bus_host_breaker_state", "gated")
            == Some(1.0))
        .await,
        "{}",
        scrape(addr)
    );
    // Only the queue with a breaker has the gauge.
    assert_eq!(gauge("bus_host_breaker_state", "held"), None);

    let held = Source::queue("held").unwrap();
    transport.pause(&held).await.unwrap();
    assert!(eventually(WAIT, || gauge("bus_host_queue_paused", "held") == Some(1.0)).await);
    transport.resume(&held).await.unwrap();
    assert!(eventually(WAIT, || gauge("bus_host_queue_paused", "held") == Some(0.0)).await);
    stop.cancel();
    running.await.unwrap().unwrap();
}
