//! Checks of the fleet-wide circuit breaker ([`FleetBreaker`](bus_core::transport::FleetBreaker))
//! on the consumer side of every transport that offers it, called directly: a trip holds
//! every consumer back, exactly one message goes through as the probe once the cool-down
//! is over, its slot is held for the prober's lock timeout, the probe's settle judges it
//! (a failure opens it again, an ack closes it), and a close lets every consumer reserve
//! again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{start_command, wait_until};
use bus_core::flow::FlowControl;
use bus_core::transport::{
    now_ms, Consumer, ConsumerOptions, Delivery, Hold, Outgoing, Placement, Received, Source, Want,
};
use bus_core::{
    BreakerScope, CircuitBreaker, CommandProcessor, Context, Envelope, Format, Message, MessageId,
    MessageKind, ProcessError, ProcessingSettings, Transport,
};

const QUEUE: &str = "conformance-fleet-breaker";

fn message(n: u32) -> Outgoing {
    let id = MessageId::generate();
    let body = n.to_string().into_bytes();
    let mut envelope = Envelope::new("conformance.breaker", Format::Json, body);
    envelope.id = id.clone();
    Outgoing {
        id,
        payload: envelope.encode().expect("encodes").into(),
    }
}

async fn consumer(transport: &dyn Transport, lock: Duration) -> Box<dyn Consumer> {
    let source = Source::queue(QUEUE).expect("valid name");
    transport
        .consumer(&source, ConsumerOptions::new(lock, 10))
        .await
        .expect("consumer")
}

/// Receives until something comes (a receive returns empty after about a second at most),
/// or `within` passes; what the last receive saw.
async fn first_delivery(consumer: &dyn Consumer, within: Duration) -> Received {
    let stop = CancellationToken::new();
    let end = Instant::now() + within;
    loop {
        let got = consumer
            .receive(Want::new(10), &stop)
            .await
            .expect("receive");
        if !got.deliveries.is_empty() || Instant::now() >= end {
            return got;
        }
    }
}

/// One receive of up to ten messages.
async fn receive(consumer: &dyn Consumer) -> Received {
    consumer
        .receive(Want::new(10), &CancellationToken::new())
        .await
        .expect("receive")
}

/// Trips the fleet breaker of the consumer's queue, as a host whose window tripped.
async fn trip(consumer: &dyn Consumer, cool_down: Duration) {
    consumer
        .extras()
        .fleet_breaker
        .expect("a consumer with a fleet breaker")
        .trip(cool_down)
        .await
        .expect("tripped");
}

/// When the fleet breaker of `source` lets its next probe go, as the flow settings read it.
async fn breaker_until(flow: &dyn FlowControl, source: &Source) -> Option<u64> {
    flow.flow(source).await.expect("flow").breaker_until_ms
}

fn receipts(deliveries: &[Delivery]) -> Vec<bus_core::transport::Receipt> {
    deliveries.iter().map(|d| d.receipt.clone()).collect()
}

fn open(hold: Hold) -> bool {
    matches!(hold, Hold::BreakerOpen { .. })
}

/// An operator closes a tripped fleet breaker by hand ([`FlowControl::close_breaker`]):
/// a consumer held back by a ten-minute cool-down takes every waiting message at its next
/// receive, not one probe, and the breaker reads closed.
pub async fn an_operator_closes_a_fleet_breaker_by_hand(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
) {
    let source = Source::queue(QUEUE).expect("valid name");
    let a = consumer(&*transport, Duration::from_secs(30)).await;
    transport
        .send(QUEUE, Placement::now(), (0..5).map(message).collect())
        .await
        .expect("sent");
    trip(&*a, Duration::from_secs(600)).await;
    let held = receive(&*a).await;
    assert!(
        held.deliveries.is_empty(),
        "taken while the breaker is open"
    );
    assert!(open(held.hold), "{:?}", held.hold);
    assert!(breaker_until(flow, &source).await.is_some());

    flow.close_breaker(&source).await.expect("closed");
    assert_eq!(breaker_until(flow, &source).await, None);
    let all = first_delivery(&*a, Duration::from_secs(5)).await;
    assert_eq!(
        all.deliveries.len(),
        5,
        "every waiting message, not a probe"
    );
    assert_eq!(all.hold, Hold::None);
    a.ack(&receipts(&all.deliveries)).await.expect("acked");
    // Closing a closed breaker changes nothing.
    flow.close_breaker(&source).await.expect("closed again");
    assert_eq!(breaker_until(flow, &source).await, None);
}

/// The fleet breaker's rules on two (then three) consumers of one queue, as two hosts see
/// them. The transport judges each probe by how it is settled, whoever runs it: a failure
/// opens the breaker again for the cool-down it was tripped for, an ack closes it. The
/// cool-down is 3 s and one prober's lock 1 s (a receive waits at most about a second, so a
/// 3 s cool-down is seen open by a whole receive).
pub async fn a_fleet_breaker_holds_every_consumer_and_lets_one_probe_through(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
) {
    let source = Source::queue(QUEUE).expect("valid name");
    let lock = Duration::from_secs(30);
    let a = consumer(&*transport, lock).await;
    let b = consumer(&*transport, lock).await;
    transport
        .send(QUEUE, Placement::now(), (0..20).map(message).collect())
        .await
        .expect("sent");
    assert!(breaker_until(flow, &source).await.is_none());

    // Tripped: nobody takes anything, and both see it open.
    let cool_down = Duration::from_secs(3);
    let tripped = Instant::now();
    trip(&*a, cool_down).await;
    let until = breaker_until(flow, &source).await;
    let now = bus_core::transport::now_ms();
    assert!(
        until.is_some_and(|u| u + 50 >= now + 2_900 && u <= now + 3_100),
        "breaker_until_ms {until:?}, now {now}"
    );
    for consumer in [&a, &b] {
        let held = receive(&**consumer).await;
        assert!(held.deliveries.is_empty(), "reserved while open");
        assert!(open(held.hold), "{:?}", held.hold);
    }

    // After the cool-down, one message: the probe.
    let probe = first_delivery(&*a, Duration::from_secs(10)).await;
    let probed_after = tripped.elapsed();
    assert_eq!(probe.deliveries.len(), 1, "the probe is one message");
    assert_eq!(probe.hold, Hold::Probe);
    assert!(
        probed_after + Duration::from_millis(50) >= cool_down,
        "probed {probed_after:?} after the trip"
    );
    // Its slot holds while it runs: no second probe, for anyone.
    for consumer in [&b, &a] {
        let held = receive(&**consumer).await;
        assert!(held.deliveries.is_empty(), "a second probe while one ran");
        assert!(open(held.hold), "{:?}", held.hold);
    }

    // The probe failed: its retry opens the breaker again, for the cool-down it was
    // tripped for, with no call of the host's.
    a.retry(
        &probe.deliveries[0].receipt,
        Duration::ZERO,
        &bus_core::records::ErrorRecord::now("probe failed"),
    )
    .await
    .expect("retried");
    let retripped = Instant::now();
    let until = breaker_until(flow, &source).await;
    let now = bus_core::transport::now_ms();
    assert!(
        until.is_some_and(|u| u + 50 >= now + 2_900 && u <= now + 3_100),
        "after a failed probe, breaker_until_ms {until:?}, now {now}"
    );
    let second = first_delivery(&*b, Duration::from_secs(10)).await;
    assert_eq!(
        second.deliveries.len(),
        1,
        "the second probe is one message"
    );
    assert_eq!(second.hold, Hold::Probe);
    assert!(
        retripped.elapsed() + Duration::from_millis(50) >= cool_down,
        "probed {:?} after the failed probe",
        retripped.elapsed()
    );

    // It succeeded: its ack closes the breaker for everyone, and everything flows.
    b.ack(&receipts(&second.deliveries)).await.expect("acked");
    assert!(breaker_until(flow, &source).await.is_none());
    let mut rest = first_delivery(&*a, Duration::from_secs(5)).await;
    assert!(
        rest.deliveries.len() > 1,
        "after the close, a took {} message(s)",
        rest.deliveries.len()
    );
    assert_eq!(rest.hold, Hold::None);
    rest.deliveries
        .extend(first_delivery(&*b, Duration::from_secs(5)).await.deliveries);
    a.ack(&receipts(&rest.deliveries)).await.expect("acked");

    let c = consumer(&*transport, Duration::from_secs(1)).await;
    let next = an_orphaned_probe_frees_its_slot(&*transport, &*a, &*c).await;
    a.ack(&receipts(&next.deliveries)).await.expect("acked");
    let long = a_renewed_probe_keeps_its_slot(&*a, &*c).await;
    flow.close_breaker(&source).await.expect("closed");
    // Renewing when no slot is held changes nothing.
    c.renew(&receipts(&long.deliveries)).await.expect("renewed");
    assert!(breaker_until(flow, &source).await.is_none());
}

/// A probe whose host never settles it (it died): the slot frees after its lock timeout
/// (`c`'s, 1 s), and the next receive is a new probe (returned).
async fn an_orphaned_probe_frees_its_slot(
    transport: &dyn Transport,
    a: &dyn Consumer,
    c: &dyn Consumer,
) -> Received {
    // A probe whose host never settles it (it died): the slot frees after its lock timeout.
    transport
        .send(QUEUE, Placement::now(), (20..25).map(message).collect())
        .await
        .expect("sent");
    trip(a, Duration::from_millis(100)).await;
    let orphan = first_delivery(c, Duration::from_secs(5)).await;
    assert_eq!(orphan.deliveries.len(), 1);
    assert_eq!(orphan.hold, Hold::Probe);
    let orphaned = Instant::now();
    let next = first_delivery(a, Duration::from_secs(10)).await;
    assert_eq!(
        next.deliveries.len(),
        1,
        "no new probe after the orphan's slot expired"
    );
    assert_eq!(next.hold, Hold::Probe);
    assert!(
        orphaned.elapsed() + Duration::from_millis(50) >= Duration::from_secs(1),
        "a new probe {:?} after the orphan",
        orphaned.elapsed()
    );
    next
}

/// A probe that runs long keeps its slot while its lock is renewed, and loses it within
/// one lock timeout (`c`'s) once it is no longer renewed; the long probe (returned).
async fn a_renewed_probe_keeps_its_slot(a: &dyn Consumer, c: &dyn Consumer) -> Received {
    trip(a, Duration::from_millis(100)).await;
    let long = first_delivery(c, Duration::from_secs(5)).await;
    assert_eq!(long.deliveries.len(), 1);
    let taken = Instant::now();
    // Its host renews it every third of its lock timeout.
    let renewing = async {
        loop {
            c.renew(&receipts(&long.deliveries)).await.expect("renewed");
            tokio::time::sleep(Duration::from_millis(333)).await;
        }
    };
    let checking = async {
        while taken.elapsed() < Duration::from_millis(2_500) {
            let held = receive(a).await;
            assert!(
                held.deliveries.is_empty(),
                "a second probe {:?} after a probe whose slot was held",
                taken.elapsed()
            );
            assert!(open(held.hold), "{:?}", held.hold);
        }
    };
    tokio::select! {
        () = checking => {}
        () = renewing => {}
    }
    // Once it is no longer renewed, its slot expires within one lock timeout.
    let last = Instant::now();
    let after = first_delivery(a, Duration::from_secs(10)).await;
    assert_eq!(after.deliveries.len(), 1);
    assert!(
        last.elapsed() + Duration::from_millis(50) >= Duration::from_millis(666),
        "the slot expired {:?} after the last renewal",
        last.elapsed()
    );
    long
}

#[derive(Debug, Serialize, Deserialize)]
struct Fragile {
    n: u32,
}
command!(Fragile, "conformance-fleet-fragile");

/// One handler run: which host, start and end (ms since the epoch), whether it failed.
#[derive(Debug, Clone, Copy)]
struct Run {
    host: u8,
    start: u64,
    end: u64,
    failed: bool,
}

/// The runs of every host, and the downstream outage they all see.
#[derive(Default)]
struct Outage {
    down: AtomicBool,
    runs: Mutex<Vec<Run>>,
}

impl Outage {
    fn runs(&self) -> Vec<Run> {
        let mut runs = self
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        runs.sort_by_key(|r| r.start);
        runs
    }
}

/// One host's processor: fails while the outage lasts; a fleet breaker that opens after
/// four failed runs (of at least four) and cools down for a second.
struct Dependent {
    host: u8,
    outage: Arc<Outage>,
}

const COOL_DOWN_MS: u64 = 1_000;

#[async_trait]
impl CommandProcessor<Fragile> for Dependent {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(2)
            .prefetch_count(0)
            .circuit_breaker(Some(
                CircuitBreaker::default()
                    .minimum_calls(4)
                    .cool_down(Duration::from_millis(COOL_DOWN_MS))
                    .scope(BreakerScope::Fleet),
            ))
    }
    async fn process(&self, _: Fragile, _: &Context) -> Result<(), ProcessError> {
        let start = now_ms();
        let failed = self.outage.down.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(10)).await;
        self.outage
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Run {
                host: self.host,
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

/// Two hosts on one transport, each with the fleet-scoped breaker: the first whose window
/// trips stops both; after the cool-down one run in both hosts is the probe; a failed
/// probe trips it again; a successful one closes it, and both hosts run again. Measured
/// from the handlers' own records (ms).
pub async fn a_fleet_breaker_stops_every_host_until_one_probe_closes_it(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
) {
    let source = Source::queue(Fragile::NAME).expect("valid name");
    let outage = Arc::new(Outage::default());
    outage.down.store(true, Ordering::SeqCst);
    let hosts = [
        start_command::<Fragile, _>(
            Arc::clone(&transport),
            Dependent {
                host: 0,
                outage: Arc::clone(&outage),
            },
        )
        .await,
        start_command::<Fragile, _>(
            Arc::clone(&transport),
            Dependent {
                host: 1,
                outage: Arc::clone(&outage),
            },
        )
        .await,
    ];
    let batch: Vec<Fragile> = (0..100).map(|n| Fragile { n }).collect();
    hosts[0].bus().send_batch(&batch).await.expect("sent");

    // Tripped: the first trip's end of cool-down, as the transport holds it.
    let mut until = None;
    let end = Instant::now() + Duration::from_secs(10);
    while until.is_none() && Instant::now() < end {
        until = breaker_until(flow, &source).await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let tripped = until.expect("the fleet breaker never tripped") - COOL_DOWN_MS;
    // The outage lasts through the first probe.
    let probed = || {
        outage
            .runs()
            .iter()
            .any(|r| r.start + 20 >= tripped + COOL_DOWN_MS)
    };
    assert!(
        wait_until(Duration::from_secs(10), probed).await,
        "no probe ran"
    );
    outage.down.store(false, Ordering::SeqCst);
    let done = || outage.runs().iter().filter(|r| !r.failed).count() >= batch.len();
    assert!(
        wait_until(Duration::from_secs(30), done).await,
        "not all handled after the outage"
    );
    for host in hosts {
        host.shutdown().await.expect("shutdown");
    }

    probes_ran_alone_until_one_closed_it(&outage.runs(), tripped);
    assert!(breaker_until(flow, &source).await.is_none());
}

/// From the runs of both hosts: nothing ran between the trip and the end of its cool-down
/// but runs reserved before it; then each probe ran alone, a cool-down after the failed
/// one before it; the first that succeeded closed the breaker, and both hosts ran again.
fn probes_ran_alone_until_one_closed_it(runs: &[Run], tripped: u64) {
    for host in [0, 1] {
        assert!(
            runs.iter().any(|r| r.host == host && r.start <= tripped),
            "host {host} never ran before the trip"
        );
    }
    // Runs reserved before the trip start within a few ms of it; then nothing until the
    // cool-down ended, on either host.
    let (before, after): (Vec<Run>, Vec<Run>) = runs.iter().partition(|r| r.start <= tripped + 20);
    let probe = after[0];
    assert!(
        probe.start + 5 >= tripped + COOL_DOWN_MS,
        "a run started {} ms after the trip",
        probe.start - tripped
    );
    assert!(before.iter().all(|r| r.failed));
    // The first probe failed (the outage lasted through it) and ran alone; it tripped the
    // breaker again, so the next run is a cool-down after it ended, and alone too.
    assert!(probe.failed, "{probe:?}");
    let second = after[1];
    assert!(
        second.start + 5 >= probe.end + COOL_DOWN_MS,
        "the second probe started {} ms after the first ended",
        second.start - probe.end
    );
    // Probes fail until the outage ended; the first that succeeded ran alone and closed
    // the breaker for both hosts.
    let closing = after
        .iter()
        .position(|r| !r.failed)
        .expect("no run succeeded");
    let closer = after[closing];
    for (i, pair) in after[..=closing].windows(2).enumerate() {
        assert!(
            pair[1].start + 5 >= pair[0].end + COOL_DOWN_MS,
            "probe {} started {} ms after probe {i} ended",
            i + 1,
            pair[1].start - pair[0].end
        );
    }
    let rest = &after[closing + 1..];
    assert!(
        rest.iter().all(|r| r.start >= closer.end),
        "{closer:?} {:?}",
        &rest[..1]
    );
    for host in [0, 1] {
        assert!(
            rest.iter().any(|r| r.host == host),
            "host {host} never ran after the close"
        );
    }
}
