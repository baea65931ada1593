//! The wire-format seam: a transport that stores a foreign envelope on one
//! queue; the host decodes it with the transport's codec, routes two message types of
//! that queue to their processors, and keeps the unknown-type rule (dead letter, or the
//! hook). The foreign transport here is the in-memory one with another envelope.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{
    ConsumerExt, ConsumerOptions, DeadLetterReason, Destination, Outgoing, Placement, Source,
    WireFormat,
};
use bus_core::{
    Command, CommandProcessor, Context, Envelope, Error, Format, Host, MemoryTransport, Message,
    MessageId, MessageKind, ProcessError, Result, Transport,
};
use bus_test_redis::eventually;
use bytes::Bytes;
use common::{Tap, Tapped};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A foreign envelope: `{"urn":…,"meta":{"id":…,"created_at":…},"data":…}` (no `v`, so
/// the native decoder refuses it).
#[derive(Debug)]
struct UrnFormat;

#[derive(Serialize, Deserialize)]
struct Meta {
    id: String,
    created_at: u64,
}

#[derive(Deserialize)]
struct Wire<'a> {
    urn: String,
    meta: Meta,
    #[serde(borrow)]
    data: &'a RawValue,
}

#[derive(Serialize)]
struct WireOut<'a> {
    urn: &'a str,
    meta: Meta,
    data: &'a RawValue,
}

impl WireFormat for UrnFormat {
    fn decode(&self, element: &Bytes) -> Result<Envelope> {
        let wire: Wire<'_> = serde_json::from_slice(element).map_err(garbage)?;
        let mut envelope = Envelope::new(wire.urn, Format::Json, wire.data.get().to_owned());
        envelope.id = MessageId::from(wire.meta.id);
        envelope.sent_at_ms = wire.meta.created_at;
        Ok(envelope)
    }

    fn encode(&self, envelope: &Envelope) -> Result<Vec<u8>> {
        let data: &RawValue = serde_json::from_slice(&envelope.body).map_err(garbage)?;
        serde_json::to_vec(&WireOut {
            urn: &envelope.message_type,
            meta: Meta {
                id: envelope.id.to_string(),
                created_at: envelope.sent_at_ms,
            },
            data,
        })
        .map_err(garbage)
    }
}

/// A codec's error: what a transport's codec returns for bytes it cannot read.
fn garbage(e: serde_json::Error) -> Error {
    Error::Decode {
        what: "urn envelope".into(),
        reason: e.to_string(),
        source: Some(e.into()),
    }
}

/// [`UrnFormat`] on the queue `orders`.
#[derive(Debug, Default)]
struct OnOrders;

impl Tap for OnOrders {
    fn wire_format(&self, _: &MemoryTransport, source: &Source) -> Option<Arc<dyn WireFormat>> {
        (*source == Source::Queue("orders".into())).then(|| Arc::new(UrnFormat) as _)
    }
    fn outgoing_wire_format(
        &self,
        _: &MemoryTransport,
        destination: Destination<'_>,
    ) -> Option<Arc<dyn WireFormat>> {
        (destination == Destination::Queue("orders")).then(|| Arc::new(UrnFormat) as _)
    }
}

/// The in-memory transport, with [`UrnFormat`] on the queue `orders`.
type Foreign = Tapped<OnOrders>;

macro_rules! on_orders {
    ($ty:ident, $urn:literal) => {
        #[derive(Debug, Serialize, Deserialize)]
        struct $ty {
            order: u32,
        }
        impl Message for $ty {
            const NAME: &'static str = "orders";
            const TYPE: &'static str = $urn;
            const KIND: MessageKind = MessageKind::Command;
        }
        impl Command for $ty {}
    };
}
on_orders!(Created, "urn:shop:orders:created");
on_orders!(Paid, "urn:shop:orders:paid");
on_orders!(Shipped, "urn:shop:orders:shipped");

#[derive(Default)]
struct Seen {
    created: Mutex<Vec<(u32, String)>>,
    paid: AtomicU32,
}

#[async_trait]
impl CommandProcessor<Created> for Arc<Seen> {
    async fn process(&self, created: Created, ctx: &Context) -> Result<(), ProcessError> {
        assert_eq!(ctx.message_type(), "urn:shop:orders:created");
        let id = ctx.message_id().to_string();
        self.created.lock().unwrap().push((created.order, id));
        Ok(())
    }
}

#[async_trait]
impl CommandProcessor<Paid> for Arc<Seen> {
    async fn process(&self, _: Paid, _: &Context) -> Result<(), ProcessError> {
        self.paid.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn foreign_element(urn: &str, id: &str, data: &str) -> Outgoing {
    let payload =
        format!(r#"{{"urn":"{urn}","meta":{{"id":"{id}","created_at":5}},"data":{data}}}"#);
    Outgoing {
        id: MessageId::from(id.to_owned()),
        payload: Bytes::from(payload),
    }
}

fn orders() -> Source {
    Source::queue("orders").unwrap()
}

#[tokio::test]
async fn a_foreign_envelope_routes_two_types_of_one_queue_and_dead_letters_the_unknown() {
    let transport = Foreign::default();
    let seen = Arc::new(Seen::default());
    let running = Host::builder()
        .transport(transport.clone())
        .command::<Created, _>(Arc::clone(&seen))
        .command::<Paid, _>(Arc::clone(&seen))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let bus = running.bus();
    // Sent through the bus: encoded in the queue's wire format, not the native one.
    let created = bus.send(&Created { order: 1 }).await.unwrap();
    bus.send(&Paid { order: 1 }).await.unwrap();
    bus.send(&Shipped { order: 1 }).await.unwrap();
    // Written by a foreign producer, and a garbage element.
    transport
        .send(
            "orders",
            Placement::now(),
            vec![foreign_element(
                "urn:shop:orders:created",
                "ext-7",
                r#"{"order":7}"#,
            )],
        )
        .await
        .unwrap();
    transport
        .send(
            "orders",
            Placement::now(),
            vec![Outgoing {
                id: MessageId::from("junk".to_owned()),
                payload: Bytes::from_static(b"{\"v\":1}"),
            }],
        )
        .await
        .unwrap();

    let inner = &transport.inner;
    assert!(
        eventually(Duration::from_secs(10), || {
            let stats = inner.stats(&orders());
            stats.dead_letters == 2 && stats.ready == 0 && stats.in_flight == 0
        })
        .await,
        "{:?}",
        inner.stats(&orders())
    );
    running.shutdown().await.unwrap();

    let mut created_seen = seen.created.lock().unwrap().clone();
    created_seen.sort();
    assert_eq!(
        created_seen,
        [(1, created.to_string()), (7, "ext-7".to_owned())]
    );
    assert_eq!(seen.paid.load(Ordering::SeqCst), 1);
    let mut dead: Vec<(DeadLetterReason, serde_json::Value)> = inner
        .dead_letters(&orders())
        .into_iter()
        .map(|d| {
            let reason = d.known_reason().unwrap();
            (reason, serde_json::from_slice(&d.payload).unwrap())
        })
        .collect();
    dead.sort_by_key(|(reason, _)| reason.as_str());
    assert_eq!(dead[0].0, DeadLetterReason::Undecodable);
    assert_eq!(dead[1].0, DeadLetterReason::UnknownType);
    // The unknown one is the bus's own send, stored in the foreign envelope, unchanged.
    assert_eq!(dead[1].1["urn"], "urn:shop:orders:shipped");
    assert_eq!(dead[1].1["data"]["order"], 1);
    assert!(
        dead[1].1.get("v").is_none(),
        "not a native envelope: {}",
        dead[1].1
    );
}

#[tokio::test]
async fn the_unknown_type_hook_sees_the_foreign_message_and_it_is_acknowledged() {
    let transport = Foreign::default();
    let seen = Arc::new(Seen::default());
    let unknown = Arc::new(Mutex::new(Vec::new()));
    let hooked = Arc::clone(&unknown);
    let running = Host::builder()
        .transport(transport.clone())
        .command::<Created, _>(Arc::clone(&seen))
        .on_unknown_type(move |m| {
            hooked
                .lock()
                .unwrap()
                .push((m.message_type.to_owned(), m.message_id.to_string()));
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    transport
        .send(
            "orders",
            Placement::now(),
            vec![
                foreign_element("urn:shop:orders:refunded", "ext-1", "{}"),
                foreign_element("urn:shop:orders:created", "ext-2", r#"{"order":2}"#),
            ],
        )
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || {
            let stats = transport.inner.stats(&orders());
            seen.created.lock().unwrap().len() == 1 && stats.ready + stats.in_flight == 0
        })
        .await
    );
    running.shutdown().await.unwrap();
    assert_eq!(
        *unknown.lock().unwrap(),
        [("urn:shop:orders:refunded".to_owned(), "ext-1".to_owned())]
    );
    assert_eq!(transport.inner.stats(&orders()).dead_letters, 0);
}

#[tokio::test]
async fn other_queues_of_the_transport_keep_the_native_envelope() {
    #[derive(Debug, Serialize, Deserialize)]
    struct Audit {
        n: u32,
    }
    impl Message for Audit {
        const NAME: &'static str = "audit";
        const KIND: MessageKind = MessageKind::Command;
    }
    impl Command for Audit {}
    let transport = Foreign::default();
    let bus = bus_core::Bus::new(transport.clone(), bus_core::BusConfig::default());
    bus.send(&Audit { n: 3 }).await.unwrap();
    let consumer = transport
        .consumer(
            &Source::queue("audit").unwrap(),
            ConsumerOptions::new(Duration::from_secs(30), 5),
        )
        .await
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let got = consumer.take(10, &stop).await.unwrap();
    let envelope = Envelope::decode(&got[0].payload).unwrap();
    assert_eq!(envelope.message_type, "audit");
    assert_eq!(&envelope.body[..], br#"{"n":3}"#);
}
