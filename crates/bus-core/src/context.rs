//! What a handler knows about the message it handles.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::cancel::Cancel;
use crate::host::after_ack::AfterAcks;
use crate::transport::{Receipt, Source};
use crate::{Bus, Headers, MessageId};

/// The message's metadata and the handles a handler needs.
#[derive(Debug, Clone)]
pub struct Context {
    pub(crate) message_id: MessageId,
    /// The type of the processor it was routed to (the same as the element's).
    pub(crate) message_type: &'static str,
    pub(crate) delivery_count: u32,
    pub(crate) headers: Headers,
    pub(crate) sent_at_ms: u64,
    pub(crate) cancellation: Cancel,
    /// The host's bus; [`Context::bus`] derives this message's from it when first asked
    /// (most handlers send nothing).
    pub(crate) host_bus: Bus,
    pub(crate) bus: OnceLock<Bus>,
    /// Where [`Context::after_ack`] puts its hooks: the worker's, under this delivery.
    pub(crate) after_ack: Option<(Arc<AfterAcks>, Receipt)>,
    /// The queue or subscription it came from: the scope of its step marks
    /// ([`Context::once`]).
    pub(crate) source: Arc<Source>,
    /// The message as it was delivered (a reference count, not a copy).
    pub(crate) element: Bytes,
}

impl Context {
    /// The message's id.
    pub fn message_id(&self) -> &MessageId {
        &self.message_id
    }
    /// The message's wire name.
    pub fn message_type(&self) -> &str {
        self.message_type
    }
    /// How many times this message has been delivered, this delivery included (1 on
    /// the first attempt). Survives retries, crashes and lock expiry.
    pub fn delivery_count(&self) -> u32 {
        self.delivery_count
    }
    /// The message's headers.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }
    /// When the message was sent (enqueued).
    pub fn enqueued_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.sent_at_ms)
    }
    /// The queue or subscription the message came from: with the message id, what
    /// identifies this delivery's handling (an event's copies share one id, one per
    /// subscription).
    pub fn source(&self) -> &Source {
        &self.source
    }
    /// The message as its transport delivered it: its envelope, in its source's wire
    /// format. What a handler sends again to run the same message later (a durable step
    /// parks its run this way).
    pub fn element(&self) -> &Bytes {
        &self.element
    }
    /// Fires when the host starts shutting down or the message's lock was lost: a long
    /// handler should stop when it fires (returning an error retries the message). A
    /// handler still running when the shutdown grace period ends is abandoned.
    pub fn cancellation(&self) -> &CancellationToken {
        self.cancellation.token()
    }
    /// The bus, for follow-up messages. Messages sent through it carry this message's
    /// W3C trace context headers (`traceparent`, `tracestate`).
    pub fn bus(&self) -> &Bus {
        self.bus
            .get_or_init(|| self.host_bus.inheriting(&self.headers))
    }
    /// Runs `work` once this message's ack is stored: not when it is retried or
    /// dead-lettered, nor when the ack is lost with the process (the message is then
    /// delivered again). For deleting what only this message needed, such as its
    /// attachment. The worker's acker awaits it after the ack (a shutdown waits for it
    /// within its settling bound): keep it short. Outside a host's worker it never runs.
    pub fn after_ack(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        if let Some((hooks, receipt)) = &self.after_ack {
            hooks.add(receipt, Box::pin(work));
        }
    }
}
