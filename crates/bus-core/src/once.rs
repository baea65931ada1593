//! Effects that run once (docs/concepts.md, "Effects that run once"): [`Context::once`]
//! marks a step of a handler as done, with its result, under a key of the message and the
//! step, so that a later delivery of the same message skips it.

use crate::defaults;
use std::future::Future;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Context, Error, ProcessError};

impl Context {
    /// Runs `step` unless an earlier delivery of this message (to this queue or
    /// subscription) completed a step named `name`; then returns the result that step
    /// stored instead of running it. The mark, with the result (as JSON), is written only
    /// after `step` succeeded, and `once` returns only after the transport stored it, so
    /// a crash after `once` returned never runs the step again (within [`defaults::ONCE_KEEP`]).
    ///
    /// What is not guaranteed: a crash (or a failed write of the mark) between the end
    /// of `step` and the mark runs the step again on the next delivery, so an effect
    /// outside the bus (a payment, an e-mail) happens twice in that window; and two
    /// deliveries that run at once (after a lock loss) may both run it, the second then
    /// getting the first one's result. A failed `step` leaves no mark.
    ///
    /// `name` is checked like a queue name (letters, digits, `.`, `_`, `-`): another one
    /// fails the message with no retry.
    pub async fn once<T, F, Fut, E>(&self, name: &str, step: F) -> Result<T, ProcessError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Into<ProcessError>,
    {
        crate::transport::validate_name("step", name).map_err(ProcessError::dead_letter)?;
        let marks = self
            .scope
            .host_bus
            .transport()
            .extras()
            .marks
            .ok_or_else(|| crate::transport::unsupported(crate::Capability::StepMarks))?;
        let (source, id) = (&self.scope.source, &self.message_id);
        if let Some(done) = marks.step_mark(source, id, name).await? {
            tracing::debug!(
                step = name,
                "step already done in an earlier delivery: skipped"
            );
            return stored(name, &done);
        }
        let result = step().await.map_err(Into::into)?;
        let encoded = serde_json::to_vec(&result).map_err(|e| Error::Encode {
            message_type: format!("the result of step `{name}`"),
            source: e.into(),
        })?;
        match marks
            .mark_step(source, id, name, Bytes::from(encoded), defaults::ONCE_KEEP)
            .await?
        {
            // Another delivery ran it at the same time and marked it first.
            Some(first) => stored(name, &first),
            None => Ok(result),
        }
    }
}

/// A step's stored result.
fn stored<T: DeserializeOwned>(name: &str, mark: &Bytes) -> Result<T, ProcessError> {
    serde_json::from_slice(mark).map_err(|e| {
        ProcessError::retry(Error::decode(
            format!("the stored result of step `{name}`"),
            e.to_string(),
        ))
    })
}
