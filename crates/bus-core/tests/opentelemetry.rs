//! W3C trace context across the bus (feature `opentelemetry`): a send inside a traced
//! span carries it, and the consumer's span continues the trace.
#![cfg(feature = "opentelemetry")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{CommandProcessor, Context, Host, MemoryTransport, ProcessError, RedisCommand};
use bus_test_redis::eventually;
use opentelemetry::trace::{TraceContextExt, TracerProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
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
    let handle = spans
        .iter()
        .find(|s| s.name == "bus.handle")
        .expect("a bus.handle span");
    assert_eq!(
        handle.parent_span_id, span_id,
        "bus.handle is not a child of the producer span"
    );
}
