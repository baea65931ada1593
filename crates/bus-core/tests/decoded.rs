//! A transport that reads each element already (to count attempts, to catch its own
//! protocol's poison) hands its reading to the host (`Delivery::decoded`): the host runs
//! that envelope and decodes nothing again. The transport here is the in-memory one with
//! a counting codec, whose consumer decodes each delivery itself.

use bus_core::transport::{Placement, TransportExtras};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bus_core::records::ErrorRecord;
use bus_core::transport::{
    Consumer, ConsumerExtras, ConsumerOptions, DeadLetterReason, Outgoing, Receipt, Received,
    Source, Want, WireFormat,
};
use bus_core::{
    Command, CommandProcessor, Context, Envelope, Host, MemoryTransport, Message, MessageKind,
    ProcessError, Result, Transport,
};
use bus_test_redis::eventually;
use bytes::Bytes;
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

/// The in-memory transport whose consumer decodes every delivery itself.
#[derive(Debug, Clone, Default)]
struct Reading {
    inner: MemoryTransport,
    format: Arc<Counting>,
}

#[derive(Debug)]
struct ReadingConsumer(Box<dyn Consumer>);

#[async_trait]
impl Consumer for ReadingConsumer {
    async fn receive(&self, want: Want, stop: &CancellationToken) -> Result<Received> {
        let mut received = self.0.receive(want, stop).await?;
        for delivery in &mut received.deliveries {
            // What a foreign transport does on reserve; an element it cannot read is
            // left to the host's decode (and dead letter).
            delivery.decoded = Envelope::decode_shared(&delivery.payload)
                .ok()
                .map(Box::new);
        }
        Ok(received)
    }
    async fn ack(&self, receipts: &[Receipt]) -> Result<()> {
        self.0.ack(receipts).await
    }
    async fn renew(&self, receipts: &[Receipt]) -> Result<Vec<bool>> {
        self.0.renew(receipts).await
    }
    async fn retry(&self, receipt: &Receipt, delay: Duration, error: &ErrorRecord) -> Result<()> {
        self.0.retry(receipt, delay, error).await
    }
    async fn dead_letter(
        &self,
        receipt: &Receipt,
        reason: DeadLetterReason,
        error: Option<&ErrorRecord>,
    ) -> Result<()> {
        self.0.dead_letter(receipt, reason, error).await
    }
    async fn release(&self, receipts: &[Receipt]) -> Result<()> {
        self.0.release(receipts).await
    }
    async fn recover(&self) -> Result<usize> {
        self.0.recover().await
    }
    async fn close(&self) -> Result<()> {
        self.0.close().await
    }
    fn extras(&self) -> ConsumerExtras<'_> {
        self.0.extras()
    }
}

#[async_trait]
impl Transport for Reading {
    async fn send(
        &self,
        queue: &str,
        placement: Placement<'_>,
        messages: Vec<Outgoing>,
    ) -> Result<()> {
        self.inner.send(queue, placement, messages).await
    }
    async fn publish(
        &self,
        topic: &str,
        due: Option<SystemTime>,
        messages: Vec<Outgoing>,
    ) -> Result<usize> {
        self.inner.publish(topic, due, messages).await
    }
    async fn consumer(
        &self,
        source: &Source,
        options: ConsumerOptions,
    ) -> Result<Box<dyn Consumer>> {
        let inner = self.inner.consumer(source, options).await?;
        Ok(Box::new(ReadingConsumer(inner)))
    }
    fn wire_format(&self, _: &Source) -> Option<Arc<dyn WireFormat>> {
        Some(Arc::clone(&self.format) as _)
    }
    fn extras(&self) -> TransportExtras<'_> {
        self.inner.extras()
    }
}

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
    assert_eq!(transport.format.decodes.load(Ordering::SeqCst), 1);
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
