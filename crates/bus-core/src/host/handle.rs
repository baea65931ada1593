//! One message's path through a worker: decode, check, run the pipeline, decide what
//! happens to it. Any panic on this path (a body's `Deserialize`, a middleware, the
//! handler) becomes an outcome, so every message is settled.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::Span;

use super::routes::{FailedMessage, UnknownMessage};
use super::worker::Worker;
use crate::envelope::Incoming;
use crate::middleware::Next;
use crate::records::ErrorRecord;
use crate::transport::{DeadLetterReason, Delivery};
use crate::{Context, Disposition, Envelope};

/// What happens to a message after its handler ran (or could not run).
#[derive(Debug)]
pub(super) enum Outcome {
    Ack,
    Retry(Duration, ErrorRecord),
    DeadLetter(DeadLetterReason, ErrorRecord),
}

impl Outcome {
    fn undecodable(error: impl Into<String>) -> Self {
        Outcome::DeadLetter(DeadLetterReason::Undecodable, ErrorRecord::now(error))
    }
}

/// The span of one delivery; the message's id and type are filled in once decoded.
pub(super) fn delivery_span(worker: &Worker, delivery: &Delivery) -> Span {
    #[cfg(feature = "opentelemetry")]
    return crate::otel::consumer_span(&worker.registration.source, delivery);
    #[cfg(not(feature = "opentelemetry"))]
    tracing::info_span!(
        "bus.handle",
        source = %worker.registration.source,
        message_id = tracing::field::Empty,
        message_type = tracing::field::Empty,
        delivery_count = delivery.delivery_count,
        traceparent = tracing::field::Empty,
    )
}

impl Worker {
    /// Reads a stored element with the source's wire format (the native envelope inline).
    pub(super) fn decode<'a>(&self, element: &'a Bytes) -> crate::Result<Incoming<'a>> {
        match &self.wire {
            None => Envelope::decode_incoming(element),
            Some(wire) => wire.decode(element).map(Incoming::from),
        }
    }

    /// Decodes (unless the transport did: `decoded`), checks and runs one message
    /// through the middleware and its handler. Runs inside the delivery's span.
    pub(super) async fn handle(
        &self,
        delivery: &Delivery,
        decoded: Option<Box<Envelope>>,
        cancellation: CancellationToken,
    ) -> Outcome {
        let registration = &self.registration;
        let decoding = match decoded {
            Some(envelope) => Ok(Incoming::from(*envelope)),
            None => self.decode(&delivery.payload),
        };
        let envelope = match decoding {
            Ok(envelope) => envelope,
            Err(e) => return Outcome::undecodable(error_chain(&e)),
        };
        let span = Span::current();
        if !span.is_disabled() {
            span.record("message_id", tracing::field::display(&envelope.id));
            span.record("message_type", &*envelope.message_type);
            if let Some(traceparent) = envelope.headers.get("traceparent") {
                span.record("traceparent", traceparent.as_str());
            }
        }
        #[cfg(feature = "opentelemetry")]
        crate::otel::consumer_attributes(&span, &registration.source, &envelope.id);
        let Some(route) = self.routes.find(&envelope.message_type) else {
            if let Some(hook) = &self.routes.hooks.unknown_type {
                hook(UnknownMessage {
                    source: &registration.source,
                    message_type: &envelope.message_type,
                    message_id: &envelope.id,
                    payload: &delivery.payload,
                });
                return Outcome::Ack;
            }
            let error = format!(
                "no processor for message type `{}` on {}",
                envelope.message_type, registration.source
            );
            return Outcome::DeadLetter(DeadLetterReason::UnknownType, ErrorRecord::now(error));
        };
        let limit = registration.settings.dead_letter_delivery_limit;
        if delivery.delivery_count > limit {
            let error = format!(
                "delivered {} times; the limit is {limit}",
                delivery.delivery_count
            );
            return Outcome::DeadLetter(DeadLetterReason::DeliveryLimit, ErrorRecord::now(error));
        }
        let Incoming {
            id,
            headers,
            sent_at_ms,
            format,
            body,
            ..
        } = envelope;
        let ctx = Context {
            bus: self.bus.inheriting(&headers),
            message_id: id,
            message_type: route.message.message_type(),
            delivery_count: delivery.delivery_count,
            headers,
            sent_at_ms,
            cancellation,
        };
        // The body's `Deserialize` is the user's code: a panic there is an undecodable body.
        let invoke = || route.invoke.call(body, format, &ctx);
        let handler = match std::panic::catch_unwind(AssertUnwindSafe(invoke)) {
            Ok(Ok(handler)) => handler,
            Ok(Err(e)) => return Outcome::undecodable(error_chain(&e)),
            Err(panic) => {
                return Outcome::undecodable(format!(
                    "the body's decoder panicked: {}",
                    panic_message(&*panic)
                ))
            }
        };
        let result = AssertUnwindSafe(Next::new(&self.middleware, handler).run(&ctx))
            .catch_unwind()
            .await;
        let (disposition, error) = match result {
            Ok(Ok(())) => return Outcome::Ack,
            Ok(Err(e)) => (e.disposition(), error_chain(e.source())),
            Err(panic) => (
                Disposition::Retry,
                format!("handler panicked: {}", panic_message(&*panic)),
            ),
        };
        let error = ErrorRecord::now(error);
        let delay = match disposition {
            Disposition::DeadLetter => {
                return Outcome::DeadLetter(DeadLetterReason::Rejected, error)
            }
            Disposition::RetryAfter(delay) => delay,
            _ => registration.settings.retry.delay(delivery.delivery_count),
        };
        if delivery.delivery_count >= limit {
            Outcome::DeadLetter(DeadLetterReason::DeliveryLimit, error)
        } else {
            Outcome::Retry(delay, error)
        }
    }
}

impl Worker {
    /// Tells the error observer, if any, of a failed delivery.
    pub(super) fn observe_failure(&self, payload: &Bytes, outcome: &Outcome) {
        let Some(hook) = &self.routes.hooks.on_error else {
            return;
        };
        let (error, outcome) = match outcome {
            Outcome::Ack => return,
            Outcome::Retry(_, error) => (error, "retry"),
            Outcome::DeadLetter(_, error) => (error, "dead_letter"),
        };
        let envelope = self.decode(payload).ok();
        hook(FailedMessage {
            source: &self.registration.source,
            error: &error.message,
            outcome,
            message: envelope.as_ref().map(|e| (&*e.message_type, &e.id)),
            payload,
        });
    }
}

/// An error and its sources, as one line.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    crate::ErrorChain(error).to_string()
}

pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner;

    #[test]
    fn each_cause_shows_once() {
        let error = crate::Error::transport(Inner);
        assert_eq!(error_chain(&error), "transport error: inner");
    }
}
