//! Processor traits and the error a handler returns.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::{BoxError, Command, Context, DeadLettering, ProcessingSettings, Subscription};

/// Handles one command type. One type may implement it for several commands.
///
/// Return `Ok(())` to acknowledge; an error retries the message after the backoff,
/// unless it says otherwise (see [`ProcessError`]).
#[async_trait]
pub trait CommandProcessor<C: Command>: Send + Sync + 'static {
    /// Handles one command.
    async fn process(&self, command: C, ctx: &Context) -> Result<(), ProcessError>;

    /// Runs when a command of this processor is about to be dead-lettered (KnightBus's
    /// `IProcessBeforeDeadLetter`): its handler failed for the last time, rejected it,
    /// or it expired or passed the delivery limit before it ran. `dead_letter` says why,
    /// with the error history. An error, a panic or a run longer than
    /// [`defaults::DEAD_LETTER_HOOK_BOUND`](crate::defaults::DEAD_LETTER_HOOK_BOUND) is logged and the message
    /// is dead-lettered all the same. Messages that never decode or whose type no
    /// processor knows reach no hook. Does nothing by default.
    async fn before_dead_letter(
        &self,
        command: C,
        dead_letter: &DeadLettering<'_>,
        ctx: &Context,
    ) -> Result<(), BoxError> {
        let _ = (command, dead_letter, ctx);
        Ok(())
    }

    /// How this processor consumes its queue.
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
    }
}

/// Handles one event type for one named subscription ([`Subscription`]).
#[async_trait]
pub trait EventProcessor<S: Subscription>: Send + Sync + 'static {
    /// Handles one event.
    async fn process(&self, event: S::Event, ctx: &Context) -> Result<(), ProcessError>;

    /// Runs when an event of this subscription is about to be dead-lettered; see
    /// [`CommandProcessor::before_dead_letter`]. Does nothing by default.
    async fn before_dead_letter(
        &self,
        event: S::Event,
        dead_letter: &DeadLettering<'_>,
        ctx: &Context,
    ) -> Result<(), BoxError> {
        let _ = (event, dead_letter, ctx);
        Ok(())
    }

    /// How this processor consumes its subscription.
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
    }
}

/// What the bus does with a message whose handler failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Disposition {
    /// Retry after the processor's backoff (dead-letter once the delivery limit is reached).
    Retry,
    /// Retry after this delay (dead-letter once the delivery limit is reached).
    RetryAfter(Duration),
    /// Do not retry: dead-letter now with reason `rejected`.
    DeadLetter,
}

/// A handler's failure: the cause plus what to do with the message.
///
/// Any error converts into a plain retry with `?`:
///
/// ```
/// # use bus_core::ProcessError;
/// fn parse(text: &str) -> Result<u32, ProcessError> {
///     let n: u32 = text.parse()?; // a failure here means "retry"
///     if n == 0 {
///         return Err(ProcessError::dead_letter("zero is never valid")); // no retry
///     }
///     Ok(n)
/// }
/// # assert!(parse("x").is_err());
/// ```
pub struct ProcessError {
    disposition: Disposition,
    source: BoxError,
}

impl ProcessError {
    /// Retry after the backoff.
    pub fn retry(source: impl Into<BoxError>) -> Self {
        ProcessError {
            disposition: Disposition::Retry,
            source: source.into(),
        }
    }
    /// Retry after `delay`.
    pub fn retry_after(delay: Duration, source: impl Into<BoxError>) -> Self {
        ProcessError {
            disposition: Disposition::RetryAfter(delay),
            source: source.into(),
        }
    }
    /// Do not retry; dead-letter the message now (reason `rejected`).
    pub fn dead_letter(source: impl Into<BoxError>) -> Self {
        ProcessError {
            disposition: Disposition::DeadLetter,
            source: source.into(),
        }
    }
    /// What the bus will do with the message.
    pub fn disposition(&self) -> Disposition {
        self.disposition
    }
    /// The underlying error.
    pub fn source(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }
}

impl<E: Into<BoxError>> From<E> for ProcessError {
    fn from(error: E) -> Self {
        ProcessError::retry(error)
    }
}

impl fmt::Debug for ProcessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessError")
            .field("disposition", &self.disposition)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for ProcessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}
