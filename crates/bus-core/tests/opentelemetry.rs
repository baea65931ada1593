//! W3C trace context across the bus (feature `opentelemetry`): a send or publish makes a
//! producer span whose context the message carries, and the consumer's span continues it
//! as the producer span's child, in one trace, checked in the in-memory exporter.
#![cfg(feature = "opentelemetry")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{
    CommandProcessor, Context, EventProcessor, EventSubscription, Host, MemoryTransport,
    ProcessError, RedisCommand, RedisEvent,
};
use bus_test_redis::eventually;
use opentelemetry::trace::{SpanId, SpanKind, TraceContextExt, TracerProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde::{Deserialize, Serialize};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "traced")]
struct Traced;

#[derive(Default)]
struct Seen(Mutex<Vec<(String, String)>>);

#[async_trait]
impl CommandProcessor<Traced> for Arc<Seen> {
    async fn process(&self, _: Traced, ctx: &Context) -> Result<(), ProcessError> {
        let cx = tracing::Span::current().context();
        let trace_id = format!("{:032x}", cx.span().span_context().trace_id());
        let header = ctx
            .headers()
            .get("traceparent")
            .cloned()
            .unwrap_or_default();
        self.0.lock().unwrap().push((trace_id, header));
        Ok(())
    }
}

#[tokio::test]
async fn a_send_in_a_span_is_continued_by_the_consumer_span() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    // A current-thread runtime: the host's tasks run on this thread, under this subscriber.
    let _guard = tracing::subscriber::set_default(subscriber);

    let seen = Arc::new(Seen::default());
    let host = Host::builder()
        .transport(MemoryTransport::new())
        .command::<Traced, _>(Arc::clone(&seen))
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    let producer = tracing::info_span!("producer");
    let (trace_id, span_id) = {
        let cx = producer.context();
        let span = cx.span();
        let context = span.span_context();
        (format!("{:032x}", context.trace_id()), context.span_id())
    };
    running
        .bus()
        .send(&Traced)
        .instrument(producer)
        .await
        .unwrap();
    let handled = eventually(Duration::from_secs(10), || {
        !seen.0.lock().unwrap().is_empty()
    });
    let handled = handled.await;
    running.shutdown().await.unwrap();
    assert!(handled, "the traced message was never handled");

    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let (handler_trace, header) = &seen[0];
    assert!(
        header.starts_with(&format!("00-{trace_id}-")),
        "traceparent {header:?}"
    );
    assert_eq!(
        handler_trace, &trace_id,
        "the handler's span is not in the producer's trace"
    );
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let send = spans
        .iter()
        .find(|s| s.name == "send traced")
        .expect("a producer span named `send traced`");
    assert_eq!(send.span_kind, SpanKind::Producer);
    assert_eq!(
        send.parent_span_id, span_id,
        "the producer span is not a child of the span it was sent in"
    );
    assert_eq!(
        header,
        &format!("00-{trace_id}-{:016x}-01", send.span_context.span_id()),
        "the message does not carry the producer span"
    );
    let handle = spans
        .iter()
        .find(|s| s.name == "bus.handle")
        .expect("a bus.handle span");
    assert_eq!(handle.span_kind, SpanKind::Consumer);
    assert_eq!(
        handle.parent_span_id,
        send.span_context.span_id(),
        "bus.handle is not a child of the producer span"
    );
    assert_eq!(handle.span_context.trace_id(), send.span_context.trace_id());
}

/// An attribute of a finished span, as text.
fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[derive(Debug, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "paid")]
struct Paid;

#[derive(EventSubscription)]
#[bus(event = Paid, name = "mail")]
struct Mail;

#[async_trait]
impl EventProcessor<Mail> for Arc<Seen> {
    async fn process(&self, _: Paid, ctx: &Context) -> Result<(), ProcessError> {
        let header = ctx
            .headers()
            .get("traceparent")
            .cloned()
            .unwrap_or_default();
        self.0
            .lock()
            .unwrap()
            .push((ctx.message_id().to_string(), header));
        Ok(())
    }
}

#[tokio::test]
async fn a_publish_outside_any_span_starts_a_trace_that_the_subscriber_continues() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let seen = Arc::new(Seen::default());
    let host = Host::builder()
        .transport(MemoryTransport::new())
        .event::<Mail, _>(Arc::clone(&seen))
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    let id = running.bus().publish(&Paid).await.unwrap();
    let handled = eventually(Duration::from_secs(10), || {
        !seen.0.lock().unwrap().is_empty()
    })
    .await;
    running.shutdown().await.unwrap();
    assert!(handled, "the event was never handled");
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();

    let publish = spans
        .iter()
        .find(|s| s.name == "publish paid")
        .expect("a producer span named `publish paid`");
    assert_eq!(publish.span_kind, SpanKind::Producer);
    assert_eq!(publish.parent_span_id, SpanId::INVALID, "a root span");
    for (key, value) in [
        ("messaging.system", "bus"),
        ("messaging.operation.name", "publish"),
        ("messaging.operation.type", "send"),
        ("messaging.destination.name", "paid"),
        ("messaging.message.id", id.as_str()),
    ] {
        assert_eq!(attribute(publish, key).as_deref(), Some(value), "{key}");
    }
    let handle = spans
        .iter()
        .find(|s| s.name == "bus.handle")
        .expect("a bus.handle span");
    assert_eq!(
        handle.span_context.trace_id(),
        publish.span_context.trace_id()
    );
    assert_eq!(handle.parent_span_id, publish.span_context.span_id());
    for (key, value) in [
        ("messaging.system", "bus"),
        ("messaging.operation.name", "process"),
        ("messaging.destination.name", "paid"),
        ("messaging.destination.subscription.name", "mail"),
        ("messaging.message.id", id.as_str()),
    ] {
        assert_eq!(attribute(handle, key).as_deref(), Some(value), "{key}");
    }
    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(seen[0].0, id.as_str());
}

#[tokio::test]
async fn a_batch_is_one_producer_span_with_its_size() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _guard = tracing::subscriber::set_default(subscriber);
    let bus = bus_core::Bus::new(
        Arc::new(MemoryTransport::new()),
        bus_core::BusConfig::default(),
    );
    bus.send_batch(&[Traced, Traced, Traced]).await.unwrap();
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let sends: Vec<_> = spans.iter().filter(|s| s.name == "send traced").collect();
    assert_eq!(sends.len(), 1, "{spans:#?}");
    assert_eq!(
        attribute(sends[0], "messaging.batch.message_count").as_deref(),
        Some("3")
    );
    assert_eq!(attribute(sends[0], "messaging.message.id"), None);
}
