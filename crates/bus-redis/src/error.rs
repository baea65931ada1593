//! The error type of bus-redis.

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong in the Redis transport.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid.
    #[error("invalid Redis configuration: {0}")]
    Config(String),
    /// Redis refused the credentials.
    #[error("Redis refused the credentials (check the user and password): {0}")]
    Auth(#[source] fred::error::Error),
    /// A Redis command failed.
    #[error("Redis error: {0}")]
    Redis(#[from] fred::error::Error),
    /// A script replied with something it never sends: a bug or a foreign script.
    #[error("unexpected reply from {script}: {detail}")]
    Protocol {
        /// The script's name.
        script: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl From<Error> for bus_core::Error {
    fn from(error: Error) -> Self {
        bus_core::Error::transport(error)
    }
}
