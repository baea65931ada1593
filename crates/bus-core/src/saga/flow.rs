//! The saga flows behind a host registration: create-then-start, load-handle-write.
//!
//! A saga registration is an ordinary [`Registration`] on the command's queue whose
//! invoke function runs the flow; it is bound to the store when the host is built.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;

use super::cache::StateCache;
use super::store::saga_key;
use super::timeout;
use super::{ContinueSaga, SagaData, SagaStore, Stamp, StartSaga};
use crate::host::{invoke, Registration};
use crate::transport::{validate_name, Source};
use crate::{Command, Context, Error, ProcessError, Result};

type Bind = Box<dyn FnOnce(Sagas) -> Registration + Send + Sync>;

/// Where a host's sagas live: the store, and what this host last wrote to it.
#[derive(Debug, Clone)]
struct Sagas {
    store: Arc<dyn SagaStore>,
    cache: Arc<StateCache>,
}

/// How often a continue step runs again at once on fresh state after a conflict, before
/// its message is retried after the backoff.
const IMMEDIATE_ATTEMPTS: u32 = 3;

/// A saga registration waiting for the host's store.
pub(crate) struct PendingSaga {
    source: Source,
    rust_type: &'static str,
    bind: Bind,
}

impl fmt::Debug for PendingSaga {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingSaga")
            .field("source", &self.source)
            .field("saga", &self.rust_type)
            .finish_non_exhaustive()
    }
}

impl PendingSaga {
    /// `S` started by `C`.
    pub(crate) fn start<C: Command, S: StartSaga<C>>(saga: Arc<S>) -> Result<Self> {
        let source = Self::check::<C, S>()?;
        let queue = source.clone();
        let bind: Bind = Box::new(move |sagas| {
            let settings = <S as StartSaga<C>>::settings(&saga);
            let invoke = invoke(move |body, format, ctx| {
                let message: C = format.decode_body(C::NAME, body)?;
                let flow = start_flow(Arc::clone(&saga), sagas.clone(), message, ctx);
                Ok(Box::pin(flow))
            });
            Registration::from_parts(queue, C::descriptor(), settings, invoke)
        });
        Ok(PendingSaga {
            source,
            rust_type: std::any::type_name::<S>(),
            bind,
        })
    }

    /// `S` continued by `C`.
    pub(crate) fn continuation<C: Command, S: ContinueSaga<C>>(saga: Arc<S>) -> Result<Self> {
        let source = Self::check::<C, S>()?;
        let queue = source.clone();
        let bind: Bind = Box::new(move |sagas| {
            let settings = <S as ContinueSaga<C>>::settings(&saga);
            let invoke = invoke(move |body, format, ctx| {
                let message: C = format.decode_body(C::NAME, body)?;
                // A step that runs again after a conflict needs the message again.
                let body = body.clone();
                let again = move || format.decode_body::<C>(C::NAME, &body);
                let flow = continue_flow(Arc::clone(&saga), sagas.clone(), message, again, ctx);
                Ok(Box::pin(flow))
            });
            Registration::from_parts(queue, C::descriptor(), settings, invoke)
        });
        Ok(PendingSaga {
            source,
            rust_type: std::any::type_name::<S>(),
            bind,
        })
    }

    fn check<C: Command, S: super::Saga>() -> Result<Source> {
        validate_name("saga partition key", S::PARTITION_KEY)?;
        Source::queue(C::NAME)
    }

    /// The registration, bound to the host's store and cache.
    pub(crate) fn bind(self, store: Arc<dyn SagaStore>, cache: Arc<StateCache>) -> Registration {
        (self.bind)(Sagas { store, cache })
    }
}

/// What a saga holds between its creation and the end of its start handler: continue
/// messages that find it retry, and a retried start takes it over.
const STARTING: Bytes = Bytes::new();

/// Start message: create the saga, marked as starting (detecting duplicates), run the
/// handler on the default state, write the state. A failed start deletes the saga so a
/// retry can start it again.
async fn start_flow<C: Command, S: StartSaga<C>>(
    saga: Arc<S>,
    sagas: Sagas,
    message: C,
    ctx: &Context,
) -> Result<(), ProcessError> {
    let Sagas { store, cache } = sagas;
    let partition = S::PARTITION_KEY;
    let id = checked_id(<S as StartSaga<C>>::saga_id(&saga, &message))?;
    let ttl = saga.time_to_live();
    // Taken before the create is sent, so the saga expires no earlier than this.
    let sent_at = Instant::now();
    let (stamp, expires_at) = match store.create(partition, &id, STARTING, ttl).await {
        Ok(stamp) => (stamp, sent_at.checked_add(ttl)),
        Err(Error::SagaExists { key }) => match store.get(partition, &id).await {
            // An earlier attempt of a start that never finished (a crash): take it over.
            Ok((data, stamp)) if data.is_empty() => {
                tracing::debug!(%key, "taking over an unfinished saga start");
                // Created by an earlier attempt, at a time this one does not know.
                (stamp, None)
            }
            Ok(_) => {
                tracing::debug!(%key, "saga already started: calling on_duplicate_start");
                return saga.on_duplicate_start(message, ctx).await;
            }
            Err(e) => return Err(into_process_error(e)),
        },
        Err(e) => return Err(into_process_error(e)),
    };
    // From here until the outcome is written, a panic or an aborted handler deletes the
    // saga again (in the background), like a failed start.
    let guard = DeleteOnDrop {
        armed: Some((Arc::clone(&store), partition, id.clone())),
    };
    let mut data = SagaData::new(id, S::State::default());
    let (started, timeouts) = timeout::in_step(saga.start(message, &mut data, ctx)).await;
    if let Err(error) = started {
        guard.delete_now().await;
        return Err(error);
    }
    // Always written, even unmodified: this is what ends the "starting" mark.
    data.state_mut();
    let id = data.id().to_owned();
    let key = saga_key(partition, &id);
    match write_back(&*store, partition, data, &stamp).await {
        Ok(written) => {
            guard.disarm();
            let left = written.stamp(&stamp);
            written.remember(&cache, key, expires_at);
            match left {
                Some(left) => timeout::send(timeouts, partition, &id, &left).await,
                None => Ok(()),
            }
        }
        // A duplicate start took the saga over meanwhile and finished first: the retry
        // of this one goes to `on_duplicate_start`.
        Err(e @ Error::SagaConflict { .. }) => {
            guard.disarm();
            Err(into_process_error(e))
        }
        Err(e) => {
            guard.delete_now().await;
            Err(into_process_error(e))
        }
    }
}

/// Any other message: load (from the cache when this host wrote the saga last), run the
/// handler, write back with the stamp read. On a conflict the step runs again at once on
/// a fresh read, a few times, before the message is retried after its backoff.
async fn continue_flow<C: Command, S: ContinueSaga<C>>(
    saga: Arc<S>,
    sagas: Sagas,
    message: C,
    again: impl Fn() -> Result<C>,
    ctx: &Context,
) -> Result<(), ProcessError> {
    let Sagas { store, cache } = sagas;
    let partition = S::PARTITION_KEY;
    let id = checked_id(<S as ContinueSaga<C>>::saga_id(&saga, &message))?;
    let key = saga_key(partition, &id);
    let mut message = Some(message);
    let mut attempt = 1;
    loop {
        let cached = if attempt == 1 { cache.get(&key) } else { None };
        // Read from the store, the saga's expiry is unknown: it will not be cached.
        let (bytes, stamp, expires_at) = match cached {
            Some((bytes, stamp, expires_at)) => (bytes, stamp, Some(expires_at)),
            None => match store.get(partition, &id).await {
                Ok((bytes, stamp)) => (bytes, stamp, None),
                Err(Error::SagaNotFound { .. }) if timeout::asked_for(ctx).is_some() => {
                    tracing::debug!(%key, "timeout of a saga that ended: dropped");
                    return Ok(());
                }
                Err(e @ Error::SagaNotFound { .. }) => {
                    let message = take_or_decode(&mut message, &again)?;
                    return saga.on_not_found(message, e, ctx).await;
                }
                Err(e) => return Err(into_process_error(e)),
            },
        };
        if bytes.is_empty() {
            // Its start handler is still running: come back when it has written the state.
            return Err(ProcessError::retry(format!("saga {key} is still starting")));
        }
        if let Some(asked) = timeout::asked_for(ctx) {
            if !timeout::still_current(asked, &key, &stamp) {
                tracing::debug!(%key, "timeout of an earlier state of the saga: dropped");
                return Ok(());
            }
        }
        let state: S::State = decode(partition, &id, &bytes).map_err(into_process_error)?;
        let mut data = SagaData::new(id.clone(), state);
        let current = take_or_decode(&mut message, &again)?;
        let (handled, timeouts) = timeout::in_step(saga.handle(current, &mut data, ctx)).await;
        handled?;
        match write_back(&*store, partition, data, &stamp).await {
            Ok(written) => {
                let left = written.stamp(&stamp);
                match written {
                    Written::Unchanged => cache.put(key, bytes, stamp, expires_at),
                    written => written.remember(&cache, key, expires_at),
                }
                return match left {
                    Some(left) => timeout::send(timeouts, partition, &id, &left).await,
                    None => Ok(()),
                };
            }
            // Written by someone else since it was read (or gone): run again on a fresh read.
            Err(Error::SagaConflict { .. } | Error::SagaNotFound { .. })
                if attempt < IMMEDIATE_ATTEMPTS =>
            {
                cache.forget(&key);
                attempt += 1;
            }
            Err(e) => {
                cache.forget(&key);
                return Err(into_process_error(e));
            }
        }
    }
}

/// The message for this attempt: the one decoded for the first, a fresh decode after.
fn take_or_decode<C>(
    message: &mut Option<C>,
    again: &impl Fn() -> Result<C>,
) -> Result<C, ProcessError> {
    match message.take() {
        Some(message) => Ok(message),
        None => again().map_err(into_process_error),
    }
}

/// What `write_back` wrote.
enum Written {
    Completed,
    Unchanged,
    Updated(Bytes, Stamp),
}

impl Written {
    /// The stamp the saga has after this write (`read`: the one read before it), `None`
    /// when it was completed.
    fn stamp(&self, read: &Stamp) -> Option<Stamp> {
        match self {
            Written::Completed => None,
            Written::Unchanged => Some(read.clone()),
            Written::Updated(_, stamp) => Some(stamp.clone()),
        }
    }

    /// Keeps the cache in step with what was written; `expires_at` as for
    /// [`StateCache::put`] (a write never changes it).
    fn remember(self, cache: &StateCache, key: String, expires_at: Option<Instant>) {
        match self {
            Written::Updated(data, stamp) => cache.put(key, data, stamp, expires_at),
            Written::Completed => cache.forget(&key),
            Written::Unchanged => {}
        }
    }
}

/// Writes the handler's outcome: delete if completed, update if modified, else nothing.
async fn write_back<S: Serialize>(
    store: &dyn SagaStore,
    partition: &str,
    data: SagaData<S>,
    stamp: &Stamp,
) -> Result<Written> {
    if data.is_completed() {
        match store.complete(partition, data.id(), stamp).await {
            // Gone already (expired, or our own delete sent twice): completed all the same.
            Err(Error::SagaNotFound { key }) => {
                tracing::debug!(%key, "completed saga was already gone");
                Ok(Written::Completed)
            }
            other => other.map(|()| Written::Completed),
        }
    } else if data.is_modified() {
        let bytes = encode(partition, data.id(), data.state())?;
        let stamp = store
            .update(partition, data.id(), bytes.clone(), stamp)
            .await?;
        Ok(Written::Updated(bytes, stamp))
    } else {
        Ok(Written::Unchanged)
    }
}

/// Deletes a started saga if the start does not finish (panic, abort).
struct DeleteOnDrop {
    armed: Option<(Arc<dyn SagaStore>, &'static str, String)>,
}

impl DeleteOnDrop {
    fn disarm(mut self) {
        self.armed = None;
    }

    async fn delete_now(mut self) {
        if let Some((store, partition, id)) = self.armed.take() {
            delete_started(&*store, partition, &id).await;
        }
    }
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        let Some((store, partition, id)) = self.armed.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { delete_started(&*store, partition, &id).await });
            }
            Err(_) => tracing::warn!(
                partition, %id,
                "saga start did not finish and no runtime is left to delete it; \
                 a retry will see it as a duplicate start"
            ),
        }
    }
}

async fn delete_started(store: &dyn SagaStore, partition: &str, id: &str) {
    if let Err(e) = store.delete(partition, id).await {
        tracing::warn!(partition, %id, error = %e,
            "could not delete the saga of a failed start; a retry will see it as a duplicate start");
    }
}

fn checked_id(id: String) -> Result<String, ProcessError> {
    if id.is_empty() {
        return Err(ProcessError::dead_letter(Error::InvalidName {
            what: "saga id",
            name: id,
            reason: "saga ids must not be empty",
        }));
    }
    Ok(id)
}

fn encode<S: Serialize>(partition: &str, id: &str, state: &S) -> Result<Bytes> {
    serde_json::to_vec(state)
        .map(Bytes::from)
        .map_err(|e| Error::Encode {
            message_type: format!("saga state of {}", saga_key(partition, id)),
            source: e.into(),
        })
}

fn decode<S: DeserializeOwned>(partition: &str, id: &str, bytes: &[u8]) -> Result<S> {
    serde_json::from_slice(bytes).map_err(|e| Error::Decode {
        what: format!("saga state of {}", saga_key(partition, id)),
        reason: e.to_string(),
        source: Some(e.into()),
    })
}

/// A store or serializer failure as a handler outcome: what a retry cannot fix is
/// dead-lettered at once; conflicts, missing sagas and transport errors are retried.
fn into_process_error(error: Error) -> ProcessError {
    match error {
        Error::NotASaga { .. }
        | Error::Encode { .. }
        | Error::Decode { .. }
        | Error::InvalidName { .. } => ProcessError::dead_letter(error),
        _ => ProcessError::retry(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_retry_cannot_fix_is_dead_lettered() {
        use crate::Disposition::{DeadLetter, Retry};
        let key = || "sagas:p:1".to_owned();
        let cases = [
            (Error::SagaConflict { key: key() }, Retry),
            (Error::SagaNotFound { key: key() }, Retry),
            (Error::transport("down"), Retry),
            (
                Error::NotASaga {
                    key: key(),
                    reason: "a string".into(),
                },
                DeadLetter,
            ),
        ];
        for (error, expected) in cases {
            let text = error.to_string();
            assert_eq!(into_process_error(error).disposition(), expected, "{text}");
        }
        assert!(checked_id(String::new()).is_err());
        assert_eq!(checked_id("a".into()).unwrap(), "a");
    }
}
