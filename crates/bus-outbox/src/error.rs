//! The one error type of bus-outbox.

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong writing to the outbox, relaying it, or in the inbox. Each message
/// ends with its cause, which is also its `source()`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// PostgreSQL refused or failed (connection lost, a constraint, a missing table):
    /// whatever the statement was to write was not written.
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    /// The bus refused the message (an invalid name, too large, not encodable, options a
    /// message of its kind does not take) or the transport failed.
    #[error("bus error: {0}")]
    Bus(#[source] bus_core::Error),
    /// [`InboxExt::transaction`](crate::InboxExt::transaction) was called outside a
    /// handler run by [`InboxLayer`](crate::InboxLayer), or for a message the layer does
    /// not cover.
    #[error("no inbox transaction: the handler does not run under an InboxLayer that covers its message type")]
    NoInbox,
}

impl From<sqlx::Error> for Error {
    fn from(error: sqlx::Error) -> Self {
        Error::Database(error)
    }
}

impl From<bus_core::Error> for Error {
    fn from(error: bus_core::Error) -> Self {
        Error::Bus(error)
    }
}
