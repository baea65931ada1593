//! W3C trace context between OpenTelemetry spans and message headers (feature
//! `opentelemetry`): a send or publish runs in a producer span (`bus.produce`) whose context
//! the messages carry as `traceparent` / `tracestate`, and the consumer's `bus.handle` span
//! continues that trace as the producer span's child. Both carry OpenTelemetry's messaging
//! attributes (docs/operations.md, "Traces").
//!
//! The W3C format is written and parsed here (it is one line), so no OpenTelemetry SDK
//! or global propagator needs to be configured for it.

use crate::transport::{Delivery, Source};
use crate::{Envelope, Headers, MessageId};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `messaging.system` of every span.
const SYSTEM: &str = "bus";

/// The producer span of one send or publish (`operation`) to `destination`, named
/// `send work` / `publish paid` as OpenTelemetry names messaging spans.
pub(crate) fn producer_span(operation: &'static str, destination: &'static str) -> tracing::Span {
    tracing::info_span!(
        "bus.produce",
        "otel.name" = %format_args!("{operation} {destination}"),
        "otel.kind" = "producer",
        "messaging.system" = SYSTEM,
        "messaging.operation.name" = operation,
        "messaging.operation.type" = "send",
        "messaging.destination.name" = destination,
        "messaging.message.id" = tracing::field::Empty,
        "messaging.batch.message_count" = tracing::field::Empty,
    )
}

/// The message id of a single send, or the size of a batch.
pub(crate) fn record_ids(span: &tracing::Span, ids: &[MessageId]) {
    match ids {
        [id] => span.record("messaging.message.id", tracing::field::display(id)),
        _ => span.record("messaging.batch.message_count", ids.len()),
    };
}

/// Writes the current span's trace context into `headers`; false if it has none.
pub(crate) fn inject_current(headers: &mut Headers) -> bool {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let context = span.span_context();
    if !context.is_valid() {
        return false;
    }
    headers.insert(
        "traceparent".into(),
        format!(
            "00-{:032x}-{:016x}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        ),
    );
    let state = context.trace_state().header();
    if state.is_empty() {
        headers.remove("tracestate");
    } else {
        headers.insert("tracestate".into(), state);
    }
    true
}

/// The consumer's `bus.handle` span of a delivery, a child of the (producer) span the
/// message's `traceparent` names. The parent must be set before the span is first entered
/// (tracing-opentelemetry starts the span then), which is before the worker decodes the
/// message: so the envelope is decoded here once more, only with this feature (unless the
/// transport decoded it already).
pub(crate) fn consumer_span(source: &Source, delivery: &Delivery) -> tracing::Span {
    let span = tracing::info_span!(
        "bus.handle",
        source = %source,
        message_id = tracing::field::Empty,
        message_type = tracing::field::Empty,
        delivery_count = delivery.delivery_count,
        traceparent = tracing::field::Empty,
        "otel.kind" = "consumer",
    );
    let parent = match &delivery.decoded {
        Some(envelope) => parse(&envelope.headers),
        None => Envelope::decode(&delivery.payload)
            .ok()
            .and_then(|envelope| parse(&envelope.headers)),
    };
    if let Some(parent) = parent {
        // Fails only when no OpenTelemetry layer is installed: nothing to continue then.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
    }
    span
}

/// The messaging attributes of a consumer's `process` span, once its message is decoded.
pub(crate) fn consumer_attributes(span: &tracing::Span, source: &Source, id: &MessageId) {
    span.set_attribute("messaging.system", SYSTEM);
    span.set_attribute("messaging.operation.name", "process");
    span.set_attribute("messaging.operation.type", "process");
    let destination = match source {
        Source::Queue(name) => name,
        Source::Subscription { topic, name } => {
            span.set_attribute("messaging.destination.subscription.name", name.clone());
            topic
        }
    };
    span.set_attribute("messaging.destination.name", destination.clone());
    span.set_attribute("messaging.message.id", id.to_string());
}

/// `traceparent` (version 00) and `tracestate`, as W3C Trace Context defines them.
fn parse(headers: &Headers) -> Option<SpanContext> {
    let mut fields = headers.get("traceparent")?.trim().split('-');
    let (version, trace, span, flags) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    if version != "00" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let state: TraceState = headers
        .get("tracestate")
        .and_then(|s| s.parse().ok())
        .unwrap_or_default();
    let context = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(u8::from_str_radix(flags, 16).ok()?),
        true,
        state,
    );
    context.is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_w3c_traceparent_and_refuses_garbage() {
        let mut headers = Headers::new();
        headers.insert(
            "traceparent".into(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        );
        headers.insert("tracestate".into(), "congo=t61rcWkgMzE".into());
        let context = parse(&headers).unwrap();
        assert_eq!(
            format!("{:032x}", context.trace_id()),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(format!("{:016x}", context.span_id()), "00f067aa0ba902b7");
        assert!(context.is_sampled() && context.is_remote());
        assert_eq!(context.trace_state().header(), "congo=t61rcWkgMzE");
        for bad in [
            "",
            "garbage",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-xyz-00f067aa0ba902b7-01",
        ] {
            headers.insert("traceparent".into(), bad.into());
            assert!(parse(&headers).is_none(), "{bad:?} accepted");
        }
    }
}
