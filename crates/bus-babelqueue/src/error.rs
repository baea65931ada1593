//! The error type of bus-babelqueue.

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong here.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An envelope could not be built or converted.
    #[error("invalid BabelQueue envelope: {0}")]
    Envelope(String),
    /// The layout has no such operation (the legacy layout has no delayed set).
    #[error("not supported by the {layout} layout: {what}")]
    Unsupported {
        /// The layout's name.
        layout: &'static str,
        /// What was asked.
        what: &'static str,
    },
    /// An invalid queue name or option.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Redis failed (a command, connecting), or a script or command replied with
    /// something it never sends: bus-redis's error, as everywhere in the bus.
    #[error(transparent)]
    Redis(#[from] bus_redis::Error),
    /// A key exists with a type that no BabelQueue key of that role has.
    #[error("{key} is a {found}, not a {expected}: not a BabelQueue key of this layout")]
    WrongType {
        /// The key.
        key: String,
        /// The type BabelQueue gives it.
        expected: &'static str,
        /// Its type.
        found: String,
    },
    /// A receipt that this crate did not make.
    #[error("not a BabelQueue receipt")]
    Receipt,
}

impl From<Error> for bus_core::Error {
    fn from(error: Error) -> Self {
        match error {
            // As bus-redis converts it: a timeout is an unknown outcome.
            Error::Redis(redis) => redis.into(),
            other => bus_core::Error::transport(other),
        }
    }
}

impl From<fred::error::Error> for Error {
    fn from(error: fred::error::Error) -> Self {
        Error::Redis(error.into())
    }
}
