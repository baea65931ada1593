//! Host behaviour on the in-memory transport that the transport conformance suite
//! (`bus_core::conformance`, run by `conformance_memory.rs` here and by bus-redis) does not
//! cover: foreign and malformed input, and a handler watching its token.

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
