//! Message attachments, the claim check: this crate's one job is storing, reading and
//! deleting a message's attachment. The bytes never travel in the envelope; the message
//! carries an [`AttachmentRef`] in its [`ATTACHMENT_HEADER`] header.
//!
//! - Sending ([`send_with_attachment`]) stores the attachment first, then the message: a
//!   send that fails after the upload leaves an attachment that expires (every attachment
//!   has a TTL as its backstop), and is deleted at once when the provider can.
//! - Reading: add [`AttachmentLayer`] to the host's middleware; a handler then reads the
//!   attachment as a stream with [`ContextExt::attachment`] on its `Context`.
//! - Lifecycle: [`AttachmentLayer`] deletes the attachment when the handler succeeded (the
//!   message is then acknowledged); a failed handler keeps it for the retry.
//!
//! Providers implement [`AttachmentProvider`]; [`RedisProvider`] stores chunks under
//! the queue's hash tag, `ObjectStoreProvider` (feature `object-store`) objects in S3,
//! Azure Blob, GCS or local files, [`MemoryProvider`] keeps them in the process (tests,
//! the memory transport) (docs/concepts.md, "Attachments"; docs/wire-format.md).
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use bus_attachments::{send_with_attachment, AttachmentLayer, AttachmentMeta, ContextExt, RedisProvider};
//! use bus_core::{CommandProcessor, Context, ProcessError, RedisCommand, SendOptions};
//! use futures::TryStreamExt;
//!
//! #[derive(serde::Serialize, serde::Deserialize, RedisCommand)]
//! #[bus(queue = "invoices")]
//! struct ScanInvoice {
//!     id: u64,
//! }
//!
//! struct Scanner;
//!
//! #[async_trait::async_trait]
//! impl CommandProcessor<ScanInvoice> for Scanner {
//!     async fn process(&self, _: ScanInvoice, ctx: &Context) -> Result<(), ProcessError> {
//!         let attachment = ctx.attachment().await?.ok_or("no attachment")?;
//!         let mut body = attachment.into_stream();
//!         while let Some(chunk) = body.try_next().await? {
//!             // ... one chunk (256 KiB) at a time
//!             let _ = chunk;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! # async fn example(config: bus_redis::RedisConfig) -> Result<(), Box<dyn std::error::Error>> {
//! let provider = Arc::new(RedisProvider::new(config.connect_client().await?, "shop"));
//! let host = bus_core::Host::builder()
//!     .transport(bus_redis::RedisTransport::connect(&config).await?)
//!     .middleware(AttachmentLayer::new(provider.clone()))
//!     .command::<ScanInvoice, _>(Scanner)
//!     .build()?;
//! // Store the file, then send the command that refers to it.
//! let file = futures::stream::iter([Ok(bytes::Bytes::from_static(b"%PDF-1.7 ..."))]);
//! let meta = AttachmentMeta::new("scan.pdf", "application/pdf");
//! send_with_attachment(&host.bus(), &*provider, &ScanInvoice { id: 7 }, meta, Box::pin(file), &SendOptions::new())
//!     .await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
mod error;
mod keys;
mod memory;
mod middleware;
#[cfg(feature = "object-store")]
mod objects;
mod orphans;
mod redis;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{Bus, Command, Event, Headers, SendOptions, Sent};
use bytes::Bytes;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

pub use error::{Error, Result};
pub use memory::MemoryProvider;
pub use middleware::{Attachment, AttachmentLayer, ContextExt};
#[cfg(feature = "object-store")]
pub use objects::ObjectStoreProvider;
pub use orphans::OrphanCollector;
pub use redis::RedisProvider;

/// The header that carries a message's [`AttachmentRef`] (JSON).
pub const ATTACHMENT_HEADER: &str = "bus-attachment";

/// An attachment's body as a provider reads it: chunks, in order.
pub type ByteStream = BoxStream<'static, Result<Bytes>>;

/// An attachment's body as a sender gives it (`tokio_util::io::ReaderStream` of a file,
/// say): chunks of any size, in order.
pub type BodyStream = BoxStream<'static, std::io::Result<Bytes>>;

/// What a sender says about an attachment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttachmentMeta {
    /// The file name.
    pub name: String,
    /// The MIME type.
    pub content_type: String,
    /// The length, when known: checked against the limit before anything is stored and
    /// against the body once it is.
    pub length: Option<u64>,
    /// Free-form metadata.
    pub metadata: BTreeMap<String, String>,
}

impl AttachmentMeta {
    /// An attachment named `name` of type `content_type`.
    pub fn new(name: impl Into<String>, content_type: impl Into<String>) -> Self {
        AttachmentMeta {
            name: name.into(),
            content_type: content_type.into(),
            ..AttachmentMeta::default()
        }
    }
    /// With a known length.
    pub fn length(mut self, length: u64) -> Self {
        self.length = Some(length);
        self
    }
    /// With one metadata entry.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

/// A stored attachment, as the message's [`ATTACHMENT_HEADER`] carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttachmentRef {
    /// The attachment's id (a ULID), unique within its scope.
    pub id: String,
    /// Where it is stored: the queue (or topic) of the message, its hash tag on Redis.
    pub scope: String,
    /// The file name.
    pub name: String,
    /// The MIME type.
    pub content_type: String,
    /// The length in bytes.
    pub length: u64,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl AttachmentRef {
    /// The header value.
    pub fn to_header(&self) -> String {
        // A struct of strings, numbers and a string map always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }
    /// What an operator sees of it: `scan.pdf (application/pdf, 6.0 MiB)`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}, {})",
            self.name,
            self.content_type,
            byte_size(self.length)
        )
    }
    /// The attachment of a message with `headers`, if it has one.
    pub fn from_headers(headers: &Headers) -> Result<Option<Self>> {
        headers
            .get(ATTACHMENT_HEADER)
            .map(|value| {
                serde_json::from_str(value).map_err(|e| Error::InvalidHeader(e.to_string()))
            })
            .transpose()
    }
}

/// A length for people: `512 B`, `6.0 MiB`.
pub fn byte_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    // Display only: a float's precision is plenty.
    let mut size = bytes as f64 / 1024.0;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    format!("{size:.1} {}", UNITS[unit])
}

/// Where attachments are stored. Every attachment a provider stores expires (its backstop
/// against orphans); `delete` removes it sooner.
#[async_trait]
pub trait AttachmentProvider: fmt::Debug + Send + Sync + 'static {
    /// Stores `body` under `scope` (the message's queue), chunk by chunk, and returns its
    /// reference. Refuses a body over the provider's limit; stores nothing readable when it
    /// fails (what it wrote expires).
    async fn put(
        &self,
        scope: &str,
        meta: AttachmentMeta,
        body: BodyStream,
    ) -> Result<AttachmentRef>;
    /// Reads a stored attachment chunk by chunk; [`Error::NotFound`] when it was deleted or
    /// expired.
    async fn open(&self, attachment: &AttachmentRef) -> Result<ByteStream>;
    /// Deletes an attachment; `false` when it was already gone.
    async fn delete(&self, attachment: &AttachmentRef) -> Result<bool>;
    /// Sets a new expiry, `ttl` from now; `false` when it is gone.
    async fn touch(&self, attachment: &AttachmentRef, ttl: Duration) -> Result<bool>;
    /// Makes a stored attachment shared by the copies of one published event: it is held
    /// by its publisher until [`shared_by`](Self::shared_by) says how many copies hold it,
    /// so that no copy's release deletes it early. `false` when it is gone.
    async fn share(&self, attachment: &AttachmentRef) -> Result<bool>;
    /// The publisher's hand-over once the event is stored: `copies` copies (one per
    /// subscription) hold the attachment and the publisher lets go. Deletes it when every
    /// copy already let go (or there is none); returns whether it did. Counted once per
    /// `token`.
    async fn shared_by(&self, attachment: &AttachmentRef, copies: u64, token: &str)
        -> Result<bool>;
    /// One holder lets go: a message whose ack is stored, or a dead letter deleted. An
    /// attachment that is not shared is deleted; a shared one once its last holder let go.
    /// `token` is unique per release: a release re-sent with it counts once. Returns
    /// whether it deleted the attachment.
    async fn release(&self, attachment: &AttachmentRef, token: &str) -> Result<bool>;
}

/// A fresh token for [`AttachmentProvider::release`] and
/// [`AttachmentProvider::shared_by`].
pub fn release_token() -> String {
    ulid::Ulid::new().to_string()
}

/// Stores `body`, then sends `command` with `options` and the attachment's reference in
/// its [`ATTACHMENT_HEADER`]. When the send fails the attachment is deleted (and would
/// expire if that failed too); the send's error is returned.
pub async fn send_with_attachment<C: Command>(
    bus: &Bus,
    provider: &dyn AttachmentProvider,
    command: &C,
    meta: AttachmentMeta,
    body: BodyStream,
    options: &SendOptions,
) -> Result<(Sent, AttachmentRef)> {
    let attachment = provider.put(C::NAME, meta, body).await?;
    let options = options
        .clone()
        .header(ATTACHMENT_HEADER, attachment.to_header());
    match bus.send_with(command, &options).await {
        Ok(sent) => Ok((sent, attachment)),
        Err(error) => {
            if let Err(delete) = provider.delete(&attachment).await {
                tracing::warn!(
                    attachment = %attachment.id,
                    error = %delete,
                    "the send failed and its attachment could not be deleted: it expires"
                );
            }
            Err(error.into())
        }
    }
}

/// Stores `body` once, then publishes `event` with `options` and the attachment's
/// reference in its [`ATTACHMENT_HEADER`]: every subscription's copy refers to the same
/// attachment, which is deleted once the last copy is acknowledged (or its dead letter
/// deleted). The attachment is [shared](AttachmentProvider::share) before the publish, so
/// that a copy acknowledged at once cannot delete it before the others are counted; the
/// publish then says how many copies were stored ([`Sent::copies`]) and the publisher
/// hands over to them. When the publish fails the attachment is deleted (or expires).
///
/// ```no_run
/// use bus_attachments::{publish_with_attachment, AttachmentMeta, RedisProvider};
/// use bus_core::{Bus, RedisEvent, SendOptions};
///
/// #[derive(serde::Serialize, serde::Deserialize, RedisEvent)]
/// #[bus(topic = "invoice-scanned")]
/// struct InvoiceScanned {
///     id: u64,
/// }
///
/// # async fn example(bus: Bus, config: bus_redis::RedisConfig) -> Result<(), Box<dyn std::error::Error>> {
/// let provider = RedisProvider::new(config.connect_client().await?, "shop");
/// let body = futures::stream::iter([Ok(bytes::Bytes::from_static(b"%PDF-1.7 ..."))]);
/// let meta = AttachmentMeta::new("scan.pdf", "application/pdf");
/// let (sent, _) = publish_with_attachment(&bus, &provider, &InvoiceScanned { id: 7 }, meta,
///     Box::pin(body), &SendOptions::new()).await?;
/// println!("one stored file for {:?} copies", sent.copies); // archive, index, notify: Some(3)
/// # Ok(()) }
/// ```
pub async fn publish_with_attachment<E: Event>(
    bus: &Bus,
    provider: &dyn AttachmentProvider,
    event: &E,
    meta: AttachmentMeta,
    body: BodyStream,
    options: &SendOptions,
) -> Result<(Sent, AttachmentRef)> {
    let attachment = provider.put(E::NAME, meta, body).await?;
    let published = match provider.share(&attachment).await {
        Ok(true) => {
            let options = options
                .clone()
                .header(ATTACHMENT_HEADER, attachment.to_header());
            bus.publish_with(event, &options).await.map_err(Error::from)
        }
        Ok(false) => Err(Error::NotFound {
            id: attachment.id.clone(),
        }),
        Err(error) => Err(error),
    };
    let sent = match published {
        Ok(sent) => sent,
        Err(error) => {
            if let Err(delete) = provider.delete(&attachment).await {
                tracing::warn!(attachment = %attachment.id, error = %delete,
                    "the publish failed and its attachment could not be deleted: it expires");
            }
            return Err(error);
        }
    };
    let copies = sent.copies.map_or(0, |copies| copies as u64);
    // The event is stored: a failure now must not read as a failed publish (a retry
    // would publish it twice). The attachment then stays until its expiry.
    if let Err(error) = provider
        .shared_by(&attachment, copies, &release_token())
        .await
    {
        tracing::warn!(attachment = %attachment.id, %error,
            "the attachment's copies could not be counted: it stays until it expires");
    }
    Ok((sent, attachment))
}

/// Every script of this crate, checked by its tests (`tests/scripts.rs`). Not an API.
#[doc(hidden)]
pub mod raw {
    pub use crate::redis::{catalog, PRELUDES};
}
