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
    /// What the contexts of one worker's messages share: one reference count per message.
    pub(crate) scope: Arc<Scope>,
    /// The message's own bus, derived from the host's by [`Context::bus`] when first asked
    /// (most handlers send nothing).
    pub(crate) bus: OnceLock<Bus>,
    /// The delivery's receipt, which [`Context::after_ack`] files its hooks under: `None`
    /// outside a host's worker. The context owns it (and `element`) for the handler's
    /// run, and gives both back to the worker after it: no copy per message.
    pub(crate) receipt: Option<Receipt>,
    /// The message as it was delivered.
    pub(crate) element: Bytes,
}

/// What every message's context from one worker shares.
#[derive(Debug)]
pub(crate) struct Scope {
    /// The host's bus, which [`Context::bus`] derives each message's from.
    pub(crate) host_bus: Bus,
    /// The worker's after-ack hooks ([`Context::after_ack`]).
    pub(crate) after_ack: AfterAcks,
    /// The queue or subscription the messages come from: the scope of their step marks
    /// ([`Context::once`]).
    pub(crate) source: Source,
}

impl Scope {
    pub(crate) fn new(host_bus: Bus, source: Source) -> Arc<Scope> {
        Arc::new(Scope {
            host_bus,
            after_ack: AfterAcks::default(),
            source,
        })
    }
}

impl Context {
    /// A context outside any host (unit tests): a memory bus, queue `t`, no receipt.
    #[cfg(test)]
    pub(crate) fn detached() -> Context {
        Context {
            scope: Scope::new(
                Bus::new(crate::MemoryTransport::new(), crate::BusConfig::default()),
                Source::queue("t").unwrap(),
            ),
            bus: OnceLock::new(),
            message_id: MessageId::generate(),
            message_type: "t",
            delivery_count: 1,
            headers: Headers::new(),
            sent_at_ms: 0,
            cancellation: Cancel::single(),
            receipt: None,
            element: Bytes::new(),
        }
    }

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
        &self.scope.source
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
            .get_or_init(|| self.scope.host_bus.inheriting(&self.headers))
    }
    /// Runs `work` once this message's ack is stored: not when it is retried or
    /// dead-lettered, nor when the ack is lost with the process (the message is then
    /// delivered again). For deleting what only this message needed, such as its
    /// attachment. The worker's acker awaits it after the ack (a shutdown waits for it
    /// within its settling bound): keep it short. Outside a host's worker it never runs.
    pub fn after_ack(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        if let Some(receipt) = &self.receipt {
            self.scope.after_ack.add(receipt, Box::pin(work));
        }
    }
}
