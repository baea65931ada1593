//! The error type of bus-redis.

use std::fmt;

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong in the Redis transport. Each message says what happened at its
/// level and ends with its cause (Redis's own words, `OOM command not allowed ...`), which
/// is also its [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid.
    #[error("invalid Redis configuration: {0}")]
    Config(String),
    /// The first connection failed.
    #[error("cannot connect to Redis at {server}: {source}")]
    Connect {
        /// Where (host:port, or the cluster's or sentinel's nodes); never a password.
        server: String,
        /// Why.
        #[source]
        source: RedisError,
    },
    /// Redis refused the credentials.
    #[error("Redis at {server} refused the credentials (check the user and password): {source}")]
    Auth {
        /// Where.
        server: String,
        /// Redis's answer.
        #[source]
        source: RedisError,
    },
    /// A Redis command failed.
    #[error("Redis command failed: {0}")]
    Redis(#[source] RedisError),
    /// A call got no reply within the configured command timeout: Redis may or may not
    /// have carried it out.
    #[error("no reply from Redis within the command timeout: {0}")]
    Timeout(#[source] RedisError),
    /// A durable send was stored by the primary, but the answer of its `WAIT` was lost
    /// (the connection dropped): whether any replica has it is unknown.
    #[error(
        "stored on the primary, but the connection dropped before the replicas confirmed \
         it: it may be lost if the primary failed"
    )]
    ReplicationUnconfirmed(#[source] RedisError),
    /// A durable send got no answer (the connection dropped, or no reply in time): it may
    /// or may not be stored on the primary, and no replica confirmed it.
    #[error(
        "no answer to a durable send: it may or may not be stored on the primary, and no \
         replica confirmed it"
    )]
    DurableOutcomeUnknown(#[source] RedisError),
    /// A script (or a command) replied with something it never sends: a bug, or a
    /// different script loaded under its SHA.
    #[error("unexpected reply from {script}: {detail}")]
    Protocol {
        /// The script's name.
        script: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// Redis records another version of the script protocol under this prefix: the
    /// clients sharing it speak another protocol, and mixing them can lose messages.
    #[error(
        "Redis records bus protocol {found} under {key}, but this build speaks protocol \
         {speaks}: {}",
        mismatch_advice(found, *speaks)
    )]
    ProtocolMismatch {
        /// The key holding the version.
        key: String,
        /// The version found there.
        found: String,
        /// The version this build speaks.
        speaks: u32,
    },
    /// A publish found the topic's subscriptions changed under it on every attempt
    /// (subscriptions being added or removed meanwhile); nothing was published.
    #[error(
        "the subscriptions of topic {topic} changed during each of {attempts} publish \
         attempts; nothing was published"
    )]
    SubscriptionsKeptChanging {
        /// The topic.
        topic: String,
        /// How many times it tried.
        attempts: usize,
    },
    /// An error of the bus: an invalid name, an envelope that does not encode, a message
    /// too large.
    #[error(transparent)]
    Bus(#[from] bus_core::Error),
    /// An operator's request that cannot be carried out as asked (an empty search, a move
    /// to the queue itself, an edited body that is not JSON): nothing was changed.
    #[error("{0}")]
    InvalidRequest(String),
}

impl From<fred::error::Error> for Error {
    fn from(error: fred::error::Error) -> Self {
        match error.kind() {
            fred::error::ErrorKind::Timeout => Error::Timeout(RedisError(error)),
            _ => Error::Redis(RedisError(error)),
        }
    }
}

impl From<Error> for bus_core::Error {
    fn from(error: Error) -> Self {
        match error {
            Error::Timeout(_)
            | Error::ReplicationUnconfirmed(_)
            | Error::DurableOutcomeUnknown(_) => bus_core::Error::OutcomeUnknown(Box::new(error)),
            Error::Bus(error) => error,
            other => bus_core::Error::transport(other),
        }
    }
}

/// What to do about a protocol mismatch.
fn mismatch_advice(found: &str, speaks: u32) -> String {
    let rule = "see docs/operations.md \"Upgrades\"";
    match found.parse::<u32>() {
        Ok(found) if found > speaks => format!(
            "newer clients use this prefix; upgrade this one, or give it another prefix ({rule})"
        ),
        Ok(_) => format!(
            "older clients use this prefix; upgrade them and then SET the key to {speaks} ({rule})"
        ),
        Err(_) => format!("the key holds no version this build knows ({rule})"),
    }
}

/// A failure reported by fred (the Redis client), displayed as a sentence: fred puts the
/// `Debug` form of I/O errors in its text (`Os { code: 111, kind: ConnectionRefused, .. }`).
#[derive(Debug)]
pub struct RedisError(fred::error::Error);

impl RedisError {
    /// fred's error, for matching on its kind.
    pub fn fred(&self) -> &fred::error::Error {
        &self.0
    }
}

impl From<fred::error::Error> for RedisError {
    fn from(error: fred::error::Error) -> Self {
        RedisError(error)
    }
}

impl fmt::Display for RedisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fred::error::ErrorKind;
        let details = self.0.details();
        match self.0.kind() {
            // fred writes `{io_error:?}`: keep the OS's own message.
            ErrorKind::IO => match io_message(details) {
                Some(message) => write!(f, "{}", message.to_lowercase()),
                None => write!(f, "I/O error: {details}"),
            },
            ErrorKind::Timeout => write!(f, "timed out: {details}"),
            ErrorKind::Canceled => write!(f, "cancelled: {details}"),
            _ => write!(f, "{details}"),
        }
    }
}

impl std::error::Error for RedisError {}

/// The `message: "..."` of an `io::Error`'s `Debug` text, or the text of a simple kind.
fn io_message(details: &str) -> Option<&str> {
    if let Some(start) = details.find("message: \"") {
        let rest = &details[start + 10..];
        return rest.find('"').map(|end| &rest[..end]);
    }
    let kind = details.strip_prefix("Kind(")?.strip_suffix(')')?;
    Some(kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::error::ErrorKind;

    #[test]
    fn io_errors_read_as_sentences() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let os = fred::error::Error::new(
            ErrorKind::IO,
            r#"Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }"#,
        );
        assert_eq!(RedisError(os).to_string(), "connection refused");
        let text = RedisError(fred::error::Error::from(io)).to_string();
        assert!(!text.contains("Os {") && !text.contains("Kind("), "{text}");
    }
}
