//! Reading a message's attachment from its handler, and deleting it once handled.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bus_core::{Context, Middleware, Next, ProcessError};
use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;

use crate::{AttachmentProvider, AttachmentRef, ByteStream, Error, Result};

tokio::task_local! {
    // The handler runs inside the middleware's future (bus-core's `Next`), so a task-local
    // hands it the provider without a hook in bus-core's `Context`.
    static PROVIDER: Arc<dyn AttachmentProvider>;
}

/// Middleware that gives handlers their message's attachment
/// ([`ContextExt::attachment`]) and releases it once the handler succeeded and the ack is
/// stored ([`Context::after_ack`]): deleted, or for an event's shared attachment, deleted
/// when the last subscription's copy is acknowledged. A failed handler keeps it: the retry (or the dead
/// letter) still has it.
#[derive(Debug, Clone)]
pub struct AttachmentLayer {
    provider: Arc<dyn AttachmentProvider>,
}

impl AttachmentLayer {
    /// With the provider the senders store into.
    pub fn new(provider: Arc<dyn AttachmentProvider>) -> Self {
        AttachmentLayer { provider }
    }
}

#[async_trait]
impl Middleware for AttachmentLayer {
    async fn handle(&self, ctx: &Context, next: Next<'_>) -> Result<(), ProcessError> {
        // A header that does not parse never will: dead-letter rather than retry.
        let attachment =
            AttachmentRef::from_headers(ctx.headers()).map_err(ProcessError::dead_letter)?;
        let result = PROVIDER
            .scope(Arc::clone(&self.provider), next.run(ctx))
            .await;
        if let (Ok(()), Some(attachment)) = (&result, attachment) {
            // Deleted once the ack is stored, not before: a crash in between redelivers
            // the message with its attachment. A context already cancelled may mean the
            // lock was lost and the message is redelivered: that delivery keeps it (the
            // TTL removes it otherwise, as it does when deleting fails).
            if ctx.cancellation().is_cancelled() {
                return result;
            }
            let provider = Arc::clone(&self.provider);
            // An event's attachment is shared by every subscription's copy: `release`
            // deletes it when this copy is its last holder (a command's at once).
            let token = crate::release_token();
            ctx.after_ack(async move {
                if let Err(error) = provider.release(&attachment, &token).await {
                    tracing::warn!(attachment = %attachment.id, %error, "attachment not released: it expires");
                }
            });
        }
        result
    }
}

/// What [`Attachment::bytes`] reserves up front at most.
const RESERVE_AT_MOST: u64 = 1024 * 1024;

/// A message's attachment, as its handler reads it.
pub struct Attachment {
    reference: AttachmentRef,
    body: ByteStream,
}

impl Attachment {
    /// Its reference: name, content type, length, metadata.
    pub fn reference(&self) -> &AttachmentRef {
        &self.reference
    }
    /// Its body, chunk by chunk.
    pub fn into_stream(self) -> ByteStream {
        self.body
    }
    /// Its whole body in memory: for small attachments only.
    pub async fn bytes(self) -> Result<Bytes> {
        // The header's length is the sender's word: reserve no more than a chunk's worth on it.
        let reserve = self.reference.length.min(RESERVE_AT_MOST);
        let mut all = BytesMut::with_capacity(usize::try_from(reserve).unwrap_or(0));
        let mut body = self.body;
        while let Some(chunk) = body.try_next().await? {
            all.extend_from_slice(&chunk);
        }
        Ok(all.freeze())
    }
}

impl fmt::Debug for Attachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attachment")
            .field("reference", &self.reference)
            .finish_non_exhaustive()
    }
}

/// `ctx.attachment()` for handlers behind the [`AttachmentLayer`] middleware.
#[async_trait]
pub trait ContextExt {
    /// The message's attachment reference, if it has one (no provider needed).
    fn attachment_ref(&self) -> Result<Option<AttachmentRef>>;
    /// The message's attachment opened for reading, if it has one.
    async fn attachment(&self) -> Result<Option<Attachment>>;
}

#[async_trait]
impl ContextExt for Context {
    fn attachment_ref(&self) -> Result<Option<AttachmentRef>> {
        AttachmentRef::from_headers(self.headers())
    }

    async fn attachment(&self) -> Result<Option<Attachment>> {
        let Some(reference) = self.attachment_ref()? else {
            return Ok(None);
        };
        let provider = PROVIDER
            .try_with(Arc::clone)
            .map_err(|_| Error::NoProvider)?;
        let body = provider.open(&reference).await?;
        Ok(Some(Attachment { reference, body }))
    }
}
