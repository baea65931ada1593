//! Delayed messages by id: read, cancel, reschedule ([`Bus::cancel`], ...), each one
//! transport call (on Redis one script per shard it looks in).

use std::time::SystemTime;

use bytes::Bytes;

use crate::transport::Destination;
use crate::{Bus, Command, Envelope, Headers, MessageId, Result};

/// A delayed command read back by [`Bus::scheduled`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Scheduled<C> {
    /// When it becomes ready.
    pub due: SystemTime,
    /// The command, decoded.
    pub message: C,
    /// Its headers.
    pub headers: Headers,
}

impl Bus {
    /// The delayed command `id` (the id [`Bus::send_at`] or a delayed
    /// [`Bus::send_with`] returned), with its due time; `None` once it became ready (or
    /// if there never was one).
    pub async fn scheduled<C: Command>(&self, id: &MessageId) -> Result<Option<Scheduled<C>>> {
        let queue = self.destination_name::<C>()?;
        let Some((due, element)) = self.scheduling()?.scheduled(queue, id).await? else {
            return Ok(None);
        };
        let envelope = self.decode_element(queue, &element)?;
        let message = envelope.format.decode::<C>(C::TYPE, &envelope.body)?;
        Ok(Some(Scheduled {
            due,
            message,
            headers: envelope.headers,
        }))
    }

    /// Cancels the delayed command `id` before it becomes ready: it is removed in one
    /// step and never delivered. `false` when it was not waiting any more (it became
    /// ready, or was cancelled already): then it is delivered as usual.
    pub async fn cancel<C: Command>(&self, id: &MessageId) -> Result<bool> {
        let queue = self.destination_name::<C>()?;
        self.scheduling()?.cancel(queue, id).await
    }

    /// Moves the due time of the delayed command `id` to `due` (earlier or later); `false`
    /// when it was not waiting any more.
    pub async fn reschedule<C: Command>(&self, id: &MessageId, due: SystemTime) -> Result<bool> {
        let queue = self.destination_name::<C>()?;
        self.scheduling()?.reschedule(queue, id, due).await
    }

    /// The transport's delayed messages by id, or the refusal of one without them.
    fn scheduling(&self) -> Result<&dyn crate::transport::Scheduling> {
        self.transport()
            .extras()
            .scheduling
            .ok_or_else(|| crate::transport::unsupported(crate::Capability::Scheduling))
    }

    /// A stored element of `queue`, read with the wire format its messages are sent in.
    fn decode_element(&self, queue: &str, element: &Bytes) -> Result<Envelope> {
        match self
            .transport()
            .outgoing_wire_format(Destination::Queue(queue))
        {
            Some(wire) => wire.decode(element),
            None => Envelope::decode_shared(element),
        }
    }
}
