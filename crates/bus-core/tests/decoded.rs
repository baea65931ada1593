//! A transport that reads each element already (to count attempts, to catch its own
//! protocol's poison) hands its reading to the host (`Delivery::decoded`): the host runs
//! that envelope and decodes nothing again. The transport here is the in-memory one with
//! a counting codec, whose consumer decodes each delivery itself.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{Consumer, Outgoing, Placement, Received, Source, Want, WireFormat};
use bus_core::{
    Command, CommandProcessor, Context, Envelope, Host, MemoryTransport, Message, MessageKind,
    ProcessError, Result, Transport,
};
use bus_test_redis::eventually;
use bytes::Bytes;
use common::{Tap, Tapped};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// The native envelope, counting what the host asks it to decode.
#[derive(Debug, Default)]
struct Counting {
    decodes: AtomicU32,
}

impl WireFormat for Counting {
    fn decode(&self, element: &Bytes) -> Result<Envelope> {
        self.decodes.fetch_add(1, Ordering::SeqCst);
        Envelope::decode_shared(element)
    }
    fn encode(&self, envelope: &Envelope) -> Result<Vec<u8>> {
        envelope.encode()
    }
}

/// Its consumer decodes every delivery itself, and the host gets [`Counting`] as the
/// queue's wire format.
#[derive(Debug, Default)]
struct Reads(Arc<Counting>);

#[async_trait]
impl Tap for Reads {
    fn wire_format(&self, _: &MemoryTransport, _: &Source) -> Option<Arc<dyn WireFormat>> {
        Some(Arc::clone(&self.0) as _)
    }
    async fn receive(
        &self,
        inner: &dyn Consumer,
        want: Want,
        stop: &CancellationToken,
    ) -> Result<Received> {
        let mut received = inner.receive(want, stop).await?;
        for delivery in &mut received.deliveries {
            // What a foreign transport does on reserve; an element it cannot read is
            // left to the host's decode (and dead letter).
            delivery.decoded = Envelope::decode_shared(&delivery.payload)
                .ok()
                .map(Box::new);
        }
        Ok(received)
    }
}

/// The in-memory transport whose consumer decodes every delivery itself.
type Reading = Tapped<Reads>;

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    n: u32,
}
impl Message for Order {
    const NAME: &'static str = "orders";
    const KIND: MessageKind = MessageKind::Command;
}
impl Command for Order {}

#[derive(Default)]
struct Handled(Mutex<Vec<(u32, String)>>);

#[async_trait]
impl CommandProcessor<Order> for Arc<Handled> {
    async fn process(&self, order: Order, ctx: &Context) -> Result<(), ProcessError> {
        let id = ctx.message_id().to_string();
        self.0.lock().unwrap().push((order.n, id));
        if order.n == 2 {
            return Err(ProcessError::dead_letter("two is refused"));
        }
        Ok(())
    }
}

#[tokio::test]
async fn the_host_runs_what_the_transport_decoded_and_decodes_nothing_again() {
    let transport = Reading::default();
    let handled = Arc::new(Handled::default());
    let running = Host::builder()
        .transport(transport.clone())
        .command::<Order, _>(Arc::clone(&handled))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let ids = running
        .bus()
        .send_batch(&[Order { n: 1 }, Order { n: 2 }, Order { n: 3 }])
        .await
        .unwrap();
    // A garbage element: the transport cannot read it, so the host decodes it (once) and
    // dead-letters it.
    transport
        .send(
            "orders",
            Placement::now(),
            vec![Outgoing {
                id: bus_core::MessageId::generate(),
                payload: Bytes::from_static(b"not an envelope"),
            }],
        )
        .await
        .unwrap();
    let source = Source::queue("orders").unwrap();
    let done = eventually(Duration::from_secs(10), || {
        transport.inner.dead_letters(&source).len() == 2 && handled.0.lock().unwrap().len() == 3
    })
    .await;
    running.shutdown().await.unwrap();
    assert!(done, "not all settled");
    let mut runs = handled.0.lock().unwrap().clone();
    runs.sort();
    let expected: Vec<(u32, String)> = (1..=3).zip(ids.iter().map(|i| i.to_string())).collect();
    assert_eq!(runs, expected, "each message ran once, with its id");
    // The garbage element only: what the transport read was not decoded again.
    assert_eq!(transport.tap.0.decodes.load(Ordering::SeqCst), 1);
    let reasons: Vec<_> = transport
        .inner
        .dead_letters(&source)
        .into_iter()
        .map(|d| d.reason.unwrap_or_default())
        .collect();
    assert_eq!(reasons.len(), 2);
    assert!(reasons.contains(&"rejected".to_owned()), "{reasons:?}");
    assert!(reasons.contains(&"undecodable".to_owned()), "{reasons:?}");
}
