//! Saga timeouts: a step asks for a message to come back to its saga after a delay
//! ([`Context::request_timeout`]). The rule (docs/sagas.md, "Timeouts"): a timeout is for
//! the state its step left. It is sent, delayed, once that step's write is stored, and
//! carries the saga's key and the stamp of that write (header [`headers::SAGA_TIMEOUT`]);
//! when it arrives, it is handled only if the saga still has that stamp. Any later write
//! (another step, a completion) or the saga's end drops it, acknowledged, unhandled.
//!
//! The requests of a step are collected in a task-local scope around its handler, so the
//! handler's [`Context`] needs no field of its own; a request outside a saga step (or
//! from a task the handler spawned) is an error.

use crate::headers;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;

use super::store::saga_key;
use super::Stamp;
use crate::{Command, Context, Error, ProcessError, Result, SendOptions};

/// One requested timeout, sent once the step's write is known.
type Request = Box<dyn FnOnce(String) -> BoxFuture<'static, Result<()>> + Send>;

/// The timeouts a step asked for.
#[derive(Default)]
pub(super) struct Requests(Mutex<Vec<Request>>);

tokio::task_local! {
    static STEP: Arc<Requests>;
}

impl Context {
    /// In a saga step's handler: sends `message` (a command of this saga, registered with
    /// [`HostBuilder::saga_continue`](crate::HostBuilder::saga_continue)) back after
    /// `delay`, once this step's state is stored. It is handled only if the saga was not
    /// written since (not moved on, not completed): otherwise it is dropped unhandled
    /// (docs/sagas.md, "Timeouts"). Nothing is sent if the step fails or completes the
    /// saga. An error outside a saga step's handler (and its own task).
    pub fn request_timeout<C: Command>(&self, delay: Duration, message: C) -> Result<()> {
        let bus = self.bus().clone();
        let request: Request = Box::new(move |token| {
            Box::pin(async move {
                let options = SendOptions::new()
                    .delay(delay)
                    .header(headers::SAGA_TIMEOUT, token);
                bus.send_with(&message, &options).await.map(|_| ())
            })
        });
        STEP.try_with(|requests| {
            requests
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(request);
        })
        .map_err(|_| {
            Error::Config(
                "request_timeout: only a saga step's handler can ask for a timeout".into(),
            )
        })
    }
}

/// Runs a step's handler, collecting the timeouts it asks for.
pub(super) async fn in_step<T>(handler: impl std::future::Future<Output = T>) -> (T, Vec<Request>) {
    let requests = Arc::new(Requests::default());
    let out = STEP.scope(Arc::clone(&requests), handler).await;
    let asked = std::mem::take(&mut *requests.0.lock().unwrap_or_else(PoisonError::into_inner));
    (out, asked)
}

/// Sends the step's timeouts, each carrying the saga's key and the stamp its write left.
/// A failure retries the message (the step runs again on the state it wrote).
pub(super) async fn send(
    requests: Vec<Request>,
    partition: &str,
    id: &str,
    stamp: &Stamp,
) -> Result<(), ProcessError> {
    let token = format!("{} {}", saga_key(partition, id), stamp.as_str());
    for request in requests {
        request(token.clone()).await.map_err(ProcessError::retry)?;
    }
    Ok(())
}

/// What a delivery's headers say: not a timeout (`None`), or the timeout of the saga
/// `key` at `stamp`.
pub(super) fn asked_for(ctx: &Context) -> Option<(&str, &str)> {
    ctx.headers().get(headers::SAGA_TIMEOUT)?.rsplit_once(' ')
}

/// Whether a timeout asked for at `asked` is for the saga `key` as it is now (`stamp`).
pub(super) fn still_current(asked: (&str, &str), key: &str, stamp: &Stamp) -> bool {
    asked == (key, stamp.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_outside_a_saga_step_is_an_error_and_one_inside_is_kept() {
        let ctx = Context::detached();
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Later;
        impl crate::Message for Later {
            const NAME: &'static str = "later";
            const KIND: crate::MessageKind = crate::MessageKind::Command;
        }
        impl Command for Later {}
        let outside = ctx.request_timeout(Duration::from_secs(1), Later);
        assert!(outside.unwrap_err().to_string().contains("saga step"));
        let (inside, asked) =
            in_step(async { ctx.request_timeout(Duration::from_secs(1), Later) }).await;
        assert!(inside.is_ok());
        assert_eq!(asked.len(), 1);
    }
}
