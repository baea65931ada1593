//! The crate's one error type.

use crate::ids::BatchId;

/// What can go wrong with a batch, a continuation or a durable step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The batch was closed: it takes no more members (a member of it that has not settled
    /// yet may still add some, since the batch cannot finish before it does).
    #[error("batch {batch} is closed: members added after close are refused")]
    Closed {
        /// The batch.
        batch: BatchId,
    },
    /// The batch has already finished (its callbacks were decided).
    #[error("batch {batch} has finished: it takes no more members")]
    Finished {
        /// The batch.
        batch: BatchId,
    },
    /// No batch with this id is stored (never opened, or expired after its retention).
    #[error("batch {batch} not found (never opened, or expired)")]
    NotFound {
        /// The batch.
        batch: BatchId,
    },
    /// A child of a parent with [`ChildPolicy::FailParent`](crate::ChildPolicy) died.
    #[error("child {index} of batch {batch} died: {error}")]
    ChildDied {
        /// The children's batch.
        batch: BatchId,
        /// The child's index in it.
        index: u64,
        /// Its last error.
        error: String,
    },
    /// A workflow header, id or stored record that does not parse.
    #[error("invalid {what}: {detail}")]
    Invalid {
        /// What was read.
        what: &'static str,
        /// Why it does not parse.
        detail: String,
    },
    /// A context method that needs the [`WorkflowLayer`](crate::WorkflowLayer) ran
    /// without it, or outside a handler.
    #[error(
        "no workflows here: add the WorkflowLayer to the host (HostBuilder::workflows) and \
         call this from a handler"
    )]
    NoLayer,
    /// The transport refused or failed.
    #[error(transparent)]
    Bus(#[from] bus_core::Error),
    /// Redis failed.
    #[error(transparent)]
    Redis(#[from] bus_redis::Error),
    /// A value could not be encoded or decoded as JSON.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl Error {
    pub(crate) fn invalid(what: &'static str, detail: impl Into<String>) -> Self {
        Error::Invalid {
            what,
            detail: detail.into(),
        }
    }
}

impl From<fred::error::Error> for Error {
    fn from(error: fred::error::Error) -> Self {
        Error::Redis(bus_redis::Error::from(error))
    }
}

/// This crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
