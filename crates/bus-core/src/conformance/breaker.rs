//! Checks of the fleet-wide circuit breaker (crate::flow::FleetBreaker) on the consumer
//! side of every transport that offers it, called directly: a trip holds every consumer
//! back, exactly one message goes through as the probe once the cool-down is over, its
//! slot is held for the prober's lock timeout, a failed probe trips it again, and a close
//! lets every consumer reserve again.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::flow::{FleetBreaker, FlowControl};
use crate::transport::{Consumer, ConsumerOptions, Delivery, Outgoing, Source};
use crate::{Envelope, Format, MessageId, Transport};

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
/// or `within` passes.
async fn first_delivery(consumer: &dyn Consumer, within: Duration) -> Vec<Delivery> {
    let stop = CancellationToken::new();
    let end = Instant::now() + within;
    while Instant::now() < end {
        let got = consumer.receive(10, &stop).await.expect("receive");
        if !got.is_empty() {
            return got;
        }
    }
    Vec::new()
}

/// One receive of up to ten messages.
async fn receive(consumer: &dyn Consumer) -> Vec<Delivery> {
    consumer
        .receive(10, &CancellationToken::new())
        .await
        .expect("receive")
}

fn receipts(deliveries: &[Delivery]) -> Vec<crate::transport::Receipt> {
    deliveries.iter().map(|d| d.receipt.clone()).collect()
}

/// The fleet breaker's rules on two (then three) consumers of one queue, as two hosts see
/// them. Cool-downs are 3 s and 1.5 s and one prober's lock 1 s (a receive waits at most
/// about a second, so a 3 s cool-down is seen open by a whole receive).
pub async fn a_fleet_breaker_holds_every_consumer_and_lets_one_probe_through(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
) {
    let source = Source::queue(QUEUE).expect("valid name");
    let lock = Duration::from_secs(30);
    let a = consumer(&*transport, lock).await;
    let b = consumer(&*transport, lock).await;
    transport
        .send(QUEUE, (0..20).map(message).collect())
        .await
        .expect("sent");
    assert!(flow
        .flow(&source)
        .await
        .expect("flow")
        .breaker_until_ms
        .is_none());

    // Tripped: nobody takes anything, and both see it open.
    let cool_down = Duration::from_secs(3);
    let tripped = Instant::now();
    a.trip_breaker(cool_down).await.expect("tripped");
    let until = flow.flow(&source).await.expect("flow").breaker_until_ms;
    let now = crate::transport::now_ms();
    assert!(
        until.is_some_and(|u| u + 50 >= now + 2_900 && u <= now + 3_100),
        "breaker_until_ms {until:?}, now {now}"
    );
    assert!(receive(&*a).await.is_empty(), "a reserved while open");
    assert!(matches!(a.fleet_breaker(), FleetBreaker::Open { .. }));
    assert!(receive(&*b).await.is_empty(), "b reserved while open");
    assert!(matches!(b.fleet_breaker(), FleetBreaker::Open { .. }));

    // After the cool-down, one message: the probe.
    let probe = first_delivery(&*a, Duration::from_secs(10)).await;
    let probed_after = tripped.elapsed();
    assert_eq!(probe.len(), 1, "the probe is one message");
    assert_eq!(a.fleet_breaker(), FleetBreaker::Probe);
    assert!(
        probed_after + Duration::from_millis(50) >= cool_down,
        "probed {probed_after:?} after the trip"
    );
    // Its slot holds while it runs: no second probe, for anyone.
    assert!(
        receive(&*b).await.is_empty(),
        "a second probe while one ran"
    );
    assert!(matches!(b.fleet_breaker(), FleetBreaker::Open { .. }));
    assert!(
        receive(&*a).await.is_empty(),
        "a second probe while one ran"
    );

    // The probe failed: tripped again for a fresh cool-down (shorter than its slot).
    let short = Duration::from_millis(1_500);
    a.retry(
        &probe[0].receipt,
        Duration::ZERO,
        &crate::records::ErrorRecord::now("probe failed"),
    )
    .await
    .expect("retried");
    let retripped = Instant::now();
    a.trip_breaker(short).await.expect("tripped again");
    let second = first_delivery(&*b, Duration::from_secs(10)).await;
    assert_eq!(second.len(), 1, "the second probe is one message");
    assert_eq!(b.fleet_breaker(), FleetBreaker::Probe);
    assert!(
        retripped.elapsed() + Duration::from_millis(50) >= short,
        "probed {:?} after the second trip",
        retripped.elapsed()
    );

    // It succeeded: closed for everyone, and everything flows.
    b.ack(&receipts(&second)).await.expect("acked");
    b.close_breaker().await.expect("closed");
    assert!(flow
        .flow(&source)
        .await
        .expect("flow")
        .breaker_until_ms
        .is_none());
    let mut rest = first_delivery(&*a, Duration::from_secs(5)).await;
    assert!(
        rest.len() > 1,
        "after the close, a took {} message(s)",
        rest.len()
    );
    assert_eq!(a.fleet_breaker(), FleetBreaker::Closed);
    rest.extend(first_delivery(&*b, Duration::from_secs(5)).await);
    a.ack(&receipts(&rest)).await.expect("acked");

    // A probe whose host never judges it (it died): the slot frees after its lock timeout.
    let c = consumer(&*transport, Duration::from_secs(1)).await;
    transport
        .send(QUEUE, (20..25).map(message).collect())
        .await
        .expect("sent");
    a.trip_breaker(Duration::from_millis(100))
        .await
        .expect("tripped");
    let orphan = first_delivery(&*c, Duration::from_secs(5)).await;
    assert_eq!(orphan.len(), 1);
    assert_eq!(c.fleet_breaker(), FleetBreaker::Probe);
    let orphaned = Instant::now();
    let next = first_delivery(&*a, Duration::from_secs(10)).await;
    assert_eq!(
        next.len(),
        1,
        "no new probe after the orphan's slot expired"
    );
    assert_eq!(a.fleet_breaker(), FleetBreaker::Probe);
    assert!(
        orphaned.elapsed() + Duration::from_millis(50) >= Duration::from_secs(1),
        "a new probe {:?} after the orphan",
        orphaned.elapsed()
    );
    a.close_breaker().await.expect("closed");
}
