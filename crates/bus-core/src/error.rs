//! The one error type of bus-core.

use std::time::Duration;

/// A boxed error, used where a user's code meets the framework.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Displays an error and its causes as one line, `what: why: root cause`. The bus's errors
/// each say only what happened at their level (the cause is their `source()`), so each
/// cause shows once.
///
/// ```
/// let error = bus_core::Error::transport(std::io::Error::other("connection reset"));
/// assert_eq!(bus_core::ErrorChain(&error).to_string(), "transport error: connection reset");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the bus outside a handler.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A message could not be encoded.
    #[error("cannot encode message `{message_type}`")]
    Encode {
        /// The message's wire name.
        message_type: String,
        /// Why the serializer failed.
        #[source]
        source: BoxError,
    },
    /// Bytes could not be decoded as an envelope or as a message body.
    #[error("cannot decode {what}: {reason}")]
    Decode {
        /// What was being decoded ("envelope", or the message type).
        what: String,
        /// A short description of the problem.
        reason: String,
        /// The decoder's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// A message is larger than the configured maximum; it was not sent.
    #[error("message of {size} bytes exceeds the maximum of {max} bytes")]
    MessageTooLarge {
        /// Size of the encoded envelope.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A queue, topic or subscription name that would break the key layout.
    #[error("invalid {what} name {name:?}: {reason}")]
    InvalidName {
        /// "queue", "topic" or "subscription".
        what: &'static str,
        /// The offending name.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The host was configured inconsistently.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The transport failed (connection lost, server error, ...).
    #[error("transport error")]
    Transport(#[source] BoxError),
    /// The transport did not answer in time: the operation may or may not have taken
    /// effect (a send may or may not have stored its messages). Sending again is safe
    /// when handlers tolerate a duplicate, as they must under at-least-once delivery.
    #[error("no answer in time: the outcome is unknown (it may or may not have taken effect)")]
    OutcomeUnknown(#[source] BoxError),
    /// A durable send was stored by the primary, but fewer replicas than asked confirmed
    /// it in time: it is stored, not replicated, and a failover before it replicates
    /// loses it. Sending again stores a second copy (a duplicate, never a loss).
    #[error(
        "stored on the primary but not replicated: {confirmed} of {wanted} replicas \
         confirmed it within {timeout:?}; a failover now may lose it"
    )]
    NotReplicated {
        /// The replicas the send asked for.
        wanted: u32,
        /// The replicas that confirmed it.
        confirmed: u32,
        /// How long the send waited for them.
        timeout: Duration,
    },
    /// No saga exists under this key.
    #[error("saga `{key}` not found")]
    SagaNotFound {
        /// The saga's key.
        key: String,
    },
    /// A saga with this key already exists.
    #[error("saga `{key}` already exists")]
    SagaExists {
        /// The saga's key.
        key: String,
    },
    /// The saga changed since it was read: the write was refused.
    #[error("saga `{key}` was changed concurrently (stale stamp)")]
    SagaConflict {
        /// The saga's key.
        key: String,
    },
    /// Something at a saga's key is not a saga (another layout, another type).
    #[error("key `{key}` is not a saga: {reason}; it was left unchanged")]
    NotASaga {
        /// The offending key.
        key: String,
        /// What was found there.
        reason: String,
    },
    /// The operation was cancelled before it completed.
    #[error("cancelled")]
    Cancelled,
    /// The operation did not complete in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

impl Error {
    /// Wraps any transport-level error.
    pub fn transport(source: impl Into<BoxError>) -> Self {
        Error::Transport(source.into())
    }

    pub(crate) fn decode(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Decode {
            what: what.into(),
            reason: reason.into(),
            source: None,
        }
    }
}
