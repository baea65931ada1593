//! The one error type of bus-core.

use std::time::Duration;

/// A boxed error, used where a user's code meets the framework.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Displays an error and its causes as one line, `what: why: root cause`, each cause once.
///
/// The bus's errors already show their cause in their own `Display` (so that `{e}` and
/// `tracing`'s `error = %e` tell what happened), and keep it as their `source()` too, for
/// code that inspects it. This adds the causes that a `Display` left out (errors of other
/// crates often do) and skips those already shown.
///
/// ```
/// let error = bus_core::Error::transport(std::io::Error::other("connection reset"));
/// assert_eq!(error.to_string(), "transport error: connection reset");
/// assert_eq!(bus_core::ErrorChain(&error).to_string(), "transport error: connection reset");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shown = self.0.to_string();
        let mut source = self.0.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !shown.contains(&text) {
                shown.push_str(": ");
                shown.push_str(&text);
            }
            source = cause.source();
        }
        f.write_str(&shown)
    }
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the bus outside a handler. Each message ends with its
/// cause (`transport error: Redis command failed: OOM command not allowed ...`), which is
/// also its `source()`; print it with `{}` or [`ErrorChain`], never both.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A message could not be encoded.
    #[error("cannot encode message `{message_type}`: {source}")]
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
    #[error("transport error: {0}")]
    Transport(#[source] BoxError),
    /// The transport did not answer in time: the operation may or may not have taken
    /// effect (a send may or may not have stored its messages). Sending again is safe
    /// when handlers tolerate a duplicate, as they must under at-least-once delivery.
    #[error(
        "no answer in time: the outcome is unknown (it may or may not have taken effect): {0}"
    )]
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
    // --- the operator surface (`operator.rs`) ---
    /// An operator's request that this kind of queue does not offer (a declared
    /// [`Capability`](crate::operator::Capability) it lacks); nothing was changed.
    #[error("{kind} queues cannot {capability}")]
    Unsupported {
        /// The kind of queue (`bus`, `babel`, `laravel`).
        kind: &'static str,
        /// What was asked.
        capability: crate::operator::Capability,
    },
    /// A request ([`Bus::request`](crate::Bus::request)) got no reply in time. The
    /// request may still be handled later; its reply is then dropped.
    #[error("no reply to `{message_type}` within {timeout:?}")]
    RequestTimeout {
        /// The request's message type.
        message_type: String,
        /// How long it waited.
        timeout: Duration,
    },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("middle")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn display_shows_the_cause_and_the_chain_shows_each_cause_once() {
        let error = Error::transport(Middle(std::io::Error::other("root")));
        // `Middle` leaves its cause out of its `Display`; the chain adds it once.
        assert_eq!(error.to_string(), "transport error: middle");
        assert_eq!(
            ErrorChain(&error).to_string(),
            "transport error: middle: root"
        );
        let error = Error::OutcomeUnknown(Box::new(std::io::Error::other("timed out")));
        let text = ErrorChain(&error).to_string();
        assert_eq!(text.matches("timed out").count(), 1, "{text}");
    }
}
