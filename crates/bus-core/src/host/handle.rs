//! One message's path through a worker: decode, check, run the pipeline, decide what
//! happens to it. Any panic on this path (a body's `Deserialize`, a middleware, the
//! handler) becomes an outcome, so every message is settled.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use tracing::Span;

use super::dispatch::Dispatch;
use super::lifecycle::{expiry, Dying, Expiry};
use super::outcome::{error_chain, panic_message, Outcome};
use super::registration::Registration;
use super::routes::{FailedMessage, UnknownMessage};
use crate::cancel::Cancel;
use crate::envelope::Incoming;
use crate::middleware::Next;
use crate::processor::ProcessError;
use crate::records::ErrorRecord;
use crate::transport::{DeadLetterReason, Delivery, OnUnknownType, Receipt, Source};
use crate::{Context, Disposition, Envelope, Format};

/// The span of one delivery; the message's id and type are filled in once decoded.
pub(super) fn delivery_span(source: &Source, delivery: &Delivery) -> Span {
    #[cfg(feature = "opentelemetry")]
    return crate::otel::consumer_span(source, delivery);
    #[cfg(not(feature = "opentelemetry"))]
    tracing::info_span!(
        "bus.handle",
        source = %source,
        message_id = tracing::field::Empty,
        message_type = tracing::field::Empty,
        delivery_count = delivery.delivery_count,
        traceparent = tracing::field::Empty,
    )
}

impl Dispatch {
    /// Reads a stored element with the source's wire format (the native envelope inline).
    pub(super) fn decode<'a>(&self, element: &'a Bytes) -> crate::Result<Incoming<'a>> {
        match &self.wire {
            None => Envelope::decode_incoming(element),
            Some(wire) => wire.decode(element).map(Incoming::from),
        }
    }

    /// Decodes (unless the transport did), checks and runs one message through the
    /// middleware and its handler. Runs inside the delivery's span. The message's context
    /// owns the delivery's receipt and element for the run: `delivery` has them back when
    /// this returns, or unwinds.
    pub(super) async fn handle(&self, delivery: &mut Delivery, cancellation: Cancel) -> Outcome {
        let Routed {
            index,
            route,
            format,
            body,
            ctx,
        } = match self.route(delivery, cancellation) {
            Ok(routed) => routed,
            Err(outcome) => return outcome,
        };
        let delivery_count = ctx.delivery_count;
        let lent = Lent::new(delivery, ctx);
        let ctx = &lent.ctx;
        let dying = |body| Dying {
            route,
            body,
            format,
            ctx,
            receipt: lent.receipt(),
        };
        match expiry(&ctx.headers) {
            Expiry::Live => {}
            Expiry::Expired(error) => {
                return match self.settings.on_expiry {
                    crate::OnExpiry::Drop => {
                        tracing::info!(error = %error.message, "dropping an expired message");
                        Outcome::Ack
                    }
                    _ => {
                        self.dead_letter(dying(body), DeadLetterReason::Expired, error)
                            .await
                    }
                };
            }
            Expiry::Malformed(problem) => return Outcome::undecodable(problem),
        }
        let limit = self.settings.dead_letter_delivery_limit;
        if delivery_count > limit {
            let error = format!("delivered {delivery_count} times; the limit is {limit}");
            let error = ErrorRecord::now(error);
            return self
                .dead_letter(dying(body), DeadLetterReason::DeliveryLimit, error)
                .await;
        }
        // The body's `Deserialize` is the user's code: a panic there is an undecodable body.
        let invoke = || route.invoke.call(&body, format, ctx);
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
        let Err((disposition, error)) = self.run_pipeline(index, handler, ctx).await else {
            return Outcome::Ack;
        };
        self.failed(
            delivery_count,
            disposition,
            ErrorRecord::now(error),
            dying(body),
        )
        .await
    }

    /// Decodes a delivery (unless the transport did), finds its route and makes its
    /// context; the outcome of one that has no route. Not part of `handle`'s future: what
    /// decoding needs is gone before the handler runs, so every message's future is that
    /// much smaller.
    fn route(&self, delivery: &mut Delivery, cancellation: Cancel) -> Result<Routed<'_>, Outcome> {
        let decoding = match delivery.decoded.take() {
            Some(envelope) => Ok(Incoming::from(*envelope)),
            None => self.decode(&delivery.payload),
        };
        let envelope = decoding.map_err(|e| Outcome::undecodable(error_chain(&e)))?;
        self.record_in_span(&envelope);
        let Some((index, route)) = self.routes.find(&envelope.message_type) else {
            return Err(self.unroutable(delivery, &envelope));
        };
        let ctx = Context {
            scope: Arc::clone(&self.scope),
            bus: std::sync::OnceLock::new(),
            message_id: envelope.id,
            message_type: route.message.message_type(),
            delivery_count: delivery.delivery_count,
            headers: envelope.headers,
            sent_at_ms: envelope.sent_at_ms,
            cancellation,
            // (Lent to it by `handle`.)
            receipt: None,
            element: Bytes::new(),
        };
        Ok(Routed {
            index,
            route,
            format: envelope.format,
            body: envelope.body,
            ctx,
        })
    }

    /// Runs the middleware and the handler of route `index`, timed into its type's
    /// counters (a run abandoned at shutdown counts as failed), with a panic caught: a
    /// failed run is its disposition and its error.
    async fn run_pipeline(
        &self,
        index: usize,
        handler: BoxFuture<'_, Result<(), ProcessError>>,
        ctx: &Context,
    ) -> Result<(), (Disposition, String)> {
        let timed = self.timing.get(index).map(|counters| counters.start());
        let result = AssertUnwindSafe(Next::new(&self.middleware, handler).run(ctx))
            .catch_unwind()
            .await;
        match result {
            Ok(Ok(())) => {
                if let Some(timed) = timed {
                    timed.succeeded();
                }
                Ok(())
            }
            Ok(Err(e)) => Err((e.disposition(), error_chain(e.source()))),
            Err(panic) => Err((
                Disposition::Retry,
                format!("handler panicked: {}", panic_message(&*panic)),
            )),
        }
    }

    /// Records the message's id, type and trace parent on the delivery's span.
    fn record_in_span(&self, envelope: &Incoming<'_>) {
        let span = Span::current();
        if !span.is_disabled() {
            span.record("message_id", tracing::field::display(&envelope.id));
            span.record("message_type", &*envelope.message_type);
            if let Some(traceparent) = envelope.headers.get("traceparent") {
                span.record("traceparent", traceparent.as_str());
            }
        }
        #[cfg(feature = "opentelemetry")]
        crate::otel::consumer_attributes(&span, &self.scope.source, &envelope.id);
    }

    /// A message of a type no processor here handles: the host's hook acknowledges it,
    /// else the source's policy decides (so that the error hook and metrics see what is
    /// done).
    fn unroutable(&self, delivery: &Delivery, envelope: &Incoming<'_>) -> Outcome {
        if let Some(hook) = &self.routes.hooks.unknown_type {
            hook(UnknownMessage {
                source: &self.scope.source,
                message_type: &envelope.message_type,
                message_id: &envelope.id,
                payload: &delivery.payload,
            });
            return Outcome::Ack;
        }
        let error = ErrorRecord::now(format!(
            "no processor for message type `{}` on {}",
            envelope.message_type, self.scope.source
        ));
        match self
            .consumer
            .extras()
            .on_unknown_type(delivery.delivery_count)
        {
            OnUnknownType::Retry(delay) => Outcome::Retry(delay, error),
            OnUnknownType::Acknowledge => {
                tracing::warn!(error = %error.message, "acknowledging (dropping) a message of an unknown type");
                Outcome::Ack
            }
            _ => Outcome::DeadLetter(DeadLetterReason::UnknownType, error),
        }
    }

    /// A failed run: dead-lettered when rejected or at the delivery limit, else retried
    /// after the handler's delay or the backoff's. Boxed, like a dead letter: it is rare.
    fn failed<'a>(
        &'a self,
        delivery_count: u32,
        disposition: Disposition,
        error: ErrorRecord,
        dying: Dying<'a>,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let delay = match disposition {
                Disposition::DeadLetter => {
                    return self
                        .dead_letter(dying, DeadLetterReason::Rejected, error)
                        .await
                }
                Disposition::RetryAfter(delay) => delay,
                _ => self.settings.retry.delay(delivery_count),
            };
            if delivery_count >= self.settings.dead_letter_delivery_limit {
                self.dead_letter(dying, DeadLetterReason::DeliveryLimit, error)
                    .await
            } else {
                Outcome::Retry(delay, error)
            }
        })
    }
}

/// A decoded message: its route (the `index`-th of the source's), its body, and its
/// context before the delivery is lent to it.
struct Routed<'a> {
    index: usize,
    route: &'a Registration,
    format: Format,
    body: Bytes,
    ctx: Context,
}

/// A delivery's context for the run of its handler, which owns the delivery's receipt
/// and element meanwhile (moved, not copied: no reference count per message). Dropping it
/// gives them back, on a panic too, so the worker can always settle the message.
struct Lent<'d> {
    delivery: &'d mut Delivery,
    ctx: Context,
}

impl<'d> Lent<'d> {
    fn new(delivery: &'d mut Delivery, mut ctx: Context) -> Self {
        let vacant = Receipt::stored(Bytes::new(), 0);
        ctx.receipt = Some(std::mem::replace(&mut delivery.receipt, vacant));
        ctx.element = std::mem::take(&mut delivery.payload);
        Lent { delivery, ctx }
    }

    /// The delivery's receipt (the context holds it until this is dropped).
    fn receipt(&self) -> &Receipt {
        self.ctx.receipt.as_ref().unwrap_or(&self.delivery.receipt)
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(receipt) = self.ctx.receipt.take() {
            self.delivery.receipt = receipt;
        }
        self.delivery.payload = std::mem::take(&mut self.ctx.element);
    }
}

impl Dispatch {
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
            source: &self.scope.source,
            error: &error.message,
            outcome,
            message: envelope.as_ref().map(|e| (&*e.message_type, &e.id)),
            payload,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_delivery_gets_its_receipt_and_element_back_even_when_its_run_panics() {
        let receipt = Receipt {
            shard: 3,
            ..Receipt::leased(Bytes::from_static(b"~L7"), 2)
        };
        let payload = Bytes::from_static(br#"{"id":"x"}"#);
        let mut delivery = Delivery {
            receipt: receipt.clone(),
            delivery_count: 1,
            payload: payload.clone(),
            decoded: None,
        };
        let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let lent = Lent::new(&mut delivery, Context::detached());
            // The context holds them for the run.
            assert_eq!(lent.receipt(), &receipt);
            assert_eq!(lent.ctx.receipt.as_ref(), Some(&receipt));
            assert_eq!(lent.ctx.element(), &payload);
            panic!("the run panics");
        }));
        assert!(run.is_err());
        assert_eq!(delivery.receipt, receipt);
        assert_eq!(delivery.payload, payload);
    }
}
