//! Sagas: long-running processes with state (SPEC §5).
//!
//! A saga type implements [`Saga`] (its state type, partition key and time to live),
//! [`StartSaga`] for the command that starts it and [`ContinueSaga`] for every other
//! command of the process. Each message maps to a saga id; the host loads the state from
//! a [`SagaStore`], hands it to the handler as [`SagaData`], and writes it back after the
//! handler returns `Ok`: an update checked against the stamp it read, a delete when the
//! handler called [`SagaData::complete`], nothing when the state was not touched.
//!
//! | Item | What it is | Module |
//! |---|---|---|
//! | [`Saga`], [`StartSaga`], [`ContinueSaga`], [`SagaData`] | the programming model | here |
//! | [`SagaStore`], [`Stamp`] | what a store implements | `store` |
//! | [`MemorySagaStore`] | the in-memory store (tests, embedded use) | `memory` |
//! | (host glue) | the start / continue flows behind a registration | `flow` |
//! | (host glue) | the state and stamp this host wrote last, to skip reads | `cache` |
//! | [`Context::request_timeout`], [`headers::SAGA_TIMEOUT`](crate::headers::SAGA_TIMEOUT) | timeouts, dropped once the saga moved on | `timeout` |
//!
//! The rules every store keeps are checked by `bus_conformance::saga_store`. The long
//! guide is `docs/sagas.md`.

mod cache;
mod flow;
mod memory;
mod store;
mod timeout;

use std::time::Duration;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Command, Context, Error, ProcessError, ProcessingSettings};

pub(crate) use flow::PendingSaga;

/// The saga guide, `docs/sagas.md`, whose examples run as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../../../../docs/sagas.md")]
pub struct SagaGuide;
pub use memory::MemorySagaStore;
pub use store::{SagaStore, Stamp};

/// A saga type: its state, the partition its instances live in, and how long they live.
///
/// ```
/// use std::time::Duration;
/// use bus_core::Saga;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, Default, Serialize, Deserialize)]
/// struct OrderState { items: u32, paid: bool }
///
/// struct OrderSaga;
///
/// impl Saga for OrderSaga {
///     type State = OrderState;
///     const PARTITION_KEY: &'static str = "order";
///     fn time_to_live(&self) -> Duration {
///         Duration::from_secs(7 * 24 * 3600)
///     }
/// }
/// ```
pub trait Saga: Send + Sync + 'static {
    /// The saga's state, stored as JSON. A start message begins with `State::default()`.
    type State: Serialize + DeserializeOwned + Default + Send + Sync + 'static;

    /// The partition of this saga type: instances are stored under
    /// `sagas:<PARTITION_KEY>:<id>`. Checked at registration like a queue name (ASCII
    /// letters, digits, `.`, `_`, `-`; not empty).
    const PARTITION_KEY: &'static str;

    /// How long an instance lives after its start message created it (24 hours by
    /// default). Updates do not extend it; an expired saga is gone.
    fn time_to_live(&self) -> Duration {
        Duration::from_secs(24 * 3600)
    }
}

/// The message that starts a saga of type `Self`.
///
/// Before [`StartSaga::start`] runs, the host creates the saga with the default state, so
/// a second start message for the same id is detected: it goes to
/// [`StartSaga::on_duplicate_start`] and is acknowledged. When `start` fails (or panics),
/// the saga is deleted again so that the retried message can start it afresh.
#[async_trait]
pub trait StartSaga<C: Command>: Saga {
    /// The id of the saga this message starts.
    fn saga_id(&self, message: &C) -> String;

    /// Handles the start message. The state begins as `State::default()`; change it with
    /// [`SagaData::state_mut`], or end the saga at once with [`SagaData::complete`].
    async fn start(
        &self,
        message: C,
        saga: &mut SagaData<Self::State>,
        ctx: &Context,
    ) -> Result<(), ProcessError>;

    /// Called instead of [`StartSaga::start`] when the saga already exists. The message
    /// is acknowledged when this returns `Ok` (the default); an error retries it.
    async fn on_duplicate_start(&self, message: C, ctx: &Context) -> Result<(), ProcessError> {
        let _ = (message, ctx);
        Ok(())
    }

    /// How the start message's queue is consumed.
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
    }
}

/// A message of a saga that is already running.
///
/// The host loads the saga, calls [`ContinueSaga::handle`], and writes the state back
/// with the stamp it read. When another message wrote the saga in between, the write
/// fails with a conflict and this message is retried on the fresh state, so handlers
/// must be safe to run again (as every handler of an at-least-once bus must).
#[async_trait]
pub trait ContinueSaga<C: Command>: Saga {
    /// The id of the saga this message belongs to.
    fn saga_id(&self, message: &C) -> String;

    /// Handles the message with the saga's current state.
    async fn handle(
        &self,
        message: C,
        saga: &mut SagaData<Self::State>,
        ctx: &Context,
    ) -> Result<(), ProcessError>;

    /// Called when no saga exists for the message (not started yet, completed, or
    /// expired); `error` is the store's [`Error::SagaNotFound`].
    ///
    /// The default retries the message after the backoff: its start message may still be
    /// waiting on another queue. Once the delivery limit is reached the message is
    /// dead-lettered with the not-found error in its history. Return `Ok(())` to drop
    /// such messages instead (say, late messages of completed sagas), or
    /// [`ProcessError::dead_letter`] to dead-letter them at once.
    async fn on_not_found(
        &self,
        message: C,
        error: Error,
        ctx: &Context,
    ) -> Result<(), ProcessError> {
        let _ = (message, ctx);
        Err(ProcessError::retry(error))
    }

    /// How this message's queue is consumed.
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
    }
}

/// A saga's id and state while its handler runs.
///
/// After the handler returns `Ok`, the host writes: a delete if [`SagaData::complete`]
/// was called, an update if the state was borrowed through [`SagaData::state_mut`], and
/// nothing otherwise. Nothing is written when the handler fails.
///
/// Build one with [`SagaData::new`] to unit-test a handler without a host.
#[derive(Debug, Clone)]
pub struct SagaData<S> {
    id: String,
    state: S,
    modified: bool,
    completed: bool,
}

impl<S> SagaData<S> {
    /// A saga with this id and state, neither modified nor completed.
    pub fn new(id: impl Into<String>, state: S) -> Self {
        SagaData {
            id: id.into(),
            state,
            modified: false,
            completed: false,
        }
    }

    /// The saga's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The state, for reading.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The state, for changing; marks the saga as modified so that it is written back.
    pub fn state_mut(&mut self) -> &mut S {
        self.modified = true;
        &mut self.state
    }

    /// Ends the saga: its state is deleted once the handler returns `Ok`.
    pub fn complete(&mut self) {
        self.completed = true;
    }

    /// Whether [`SagaData::complete`] was called.
    pub fn is_completed(&self) -> bool {
        self.completed
    }

    /// Whether [`SagaData::state_mut`] was called.
    pub fn is_modified(&self) -> bool {
        self.modified
    }

    /// The state, consumed.
    pub fn into_state(self) -> S {
        self.state
    }
}
