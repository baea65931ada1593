//! W3C trace context between OpenTelemetry spans and message headers (feature
//! `opentelemetry`): a send inside a traced span writes `traceparent` / `tracestate`, and
//! the consumer's `bus.handle` span continues that trace.
//!
//! The W3C format is written and parsed here (it is one line), so no OpenTelemetry SDK
//! or global propagator needs to be configured for it.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::Headers;

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

/// Makes `span` a child of the remote span named by the message's `traceparent`.
pub(crate) fn continue_trace(span: &tracing::Span, headers: &Headers) {
    if let Some(parent) = parse(headers) {
        // Fails only when no OpenTelemetry layer is installed: nothing to continue then.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
    }
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
