//! The crate's one error type.

/// What can go wrong storing, reading or deleting an attachment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The attachment is larger than the provider's limit; nothing of it is kept.
    #[error("attachment of at least {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Its size (declared, or read so far).
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The body's length differs from the declared one; nothing of it is kept.
    #[error("attachment body is {actual} bytes, {declared} were declared")]
    LengthMismatch {
        /// Declared in its meta.
        declared: u64,
        /// Read from the body.
        actual: u64,
    },
    /// The attachment was deleted, expired, or never completed.
    #[error("attachment {id} not found (deleted, expired or incomplete)")]
    NotFound {
        /// Its id.
        id: String,
    },
    /// Stored data that does not read as an attachment.
    #[error("attachment {id} is corrupt: {reason}")]
    Corrupt {
        /// Its id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// The message's `bus-attachment` header does not parse.
    #[error("invalid bus-attachment header: {0}")]
    InvalidHeader(String),
    /// `ctx.attachment()` outside the [`AttachmentLayer`](crate::AttachmentLayer) middleware.
    #[error(
        "no attachment provider: add bus_attachments::AttachmentLayer to the host's middleware"
    )]
    NoProvider,
    /// Reading the sender's body failed.
    #[error("reading the attachment's body: {0}")]
    Body(#[source] std::io::Error),
    /// Redis failed.
    #[error("redis: {0}")]
    Redis(#[from] fred::error::Error),
    /// The object store failed.
    #[cfg(feature = "object-store")]
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    /// The bus refused or failed the send.
    #[error(transparent)]
    Bus(#[from] bus_core::Error),
}

/// This crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
