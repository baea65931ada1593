//! Request/reply (docs/concepts.md, "Request and reply"): [`Bus::request`] sends a
//! command that says where to answer, and waits on this bus's reply inbox;
//! [`Context::reply`] answers. A transport gives the inbox and the push
//! ([`Replies`](crate::transport::Replies)); the routing of replies to requests is here,
//! the same for every transport.

use crate::defaults;
use crate::headers;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::{Bus, Command, Context, Envelope, Error, Format, Result, SendOptions, Transport};

/// Longest one wait of the inbox blocks before it is issued again: bounds how long a
/// dropped bus's listener lingers.
const INBOX_WAIT: Duration = Duration::from_secs(1);
/// How long the listener pauses after a failed wait (Redis down, say) before the next.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// A requesting bus's inbox: where replies to its requests arrive, read by one listener.
#[async_trait]
pub trait ReplyInbox: Send + Sync + fmt::Debug {
    /// Its name, as requests carry it in [`headers::REPLY_TO`].
    fn name(&self) -> &str;
    /// Takes the replies that arrived, waiting up to `wait` for one when none has (it may
    /// return none).
    async fn receive(&self, wait: Duration) -> Result<Vec<Bytes>>;
    /// Deletes the inbox and what is left in it, and closes its connections.
    async fn close(&self) -> Result<()>;
}

/// A bus's requests: its inbox (opened at the first request) and the requests that wait
/// for a reply. Dropped with the last clone of the bus, which stops the listener; the
/// listener then closes the inbox.
#[derive(Default)]
pub(crate) struct Requests {
    waiting: tokio::sync::OnceCell<Arc<Waiting>>,
    stop: CancellationToken,
}

impl fmt::Debug for Requests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Requests")
            .field("inbox", &self.waiting.get().map(|w| &w.inbox))
            .finish()
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The requests waiting for a reply, by correlation id.
struct Waiting {
    inbox: String,
    pending: Mutex<HashMap<String, oneshot::Sender<Envelope>>>,
}

impl Waiting {
    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Envelope>>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands a reply to its request; drops it when none waits (it timed out).
    fn deliver(&self, element: &Bytes) {
        let envelope = match Envelope::decode_shared(element) {
            Ok(envelope) => envelope,
            Err(e) => {
                tracing::warn!(inbox = %self.inbox, error = %e, "dropping an undecodable reply");
                return;
            }
        };
        let waiter = envelope
            .headers
            .get(headers::CORRELATION_ID)
            .and_then(|id| self.pending().remove(id));
        match waiter {
            Some(waiter) => {
                let _ = waiter.send(envelope); // The request may have just given up.
            }
            None => tracing::debug!(
                inbox = %self.inbox,
                "dropping a reply that no request waits for (it timed out)"
            ),
        }
    }
}

/// Takes a request out of the waiting ones however its wait ends.
struct Forget<'a> {
    waiting: &'a Waiting,
    correlation: &'a str,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.waiting.pending().remove(self.correlation);
    }
}

impl Requests {
    /// The waiting requests, with the inbox opened and its listener started the first
    /// time.
    async fn waiting(&self, transport: &Arc<dyn Transport>) -> Result<&Arc<Waiting>> {
        self.waiting
            .get_or_try_init(|| async {
                let inbox = replies(&**transport)?
                    .reply_inbox(&ulid::Ulid::new().to_string())
                    .await?;
                let waiting = Arc::new(Waiting {
                    inbox: inbox.name().to_owned(),
                    pending: Mutex::default(),
                });
                tokio::spawn(listen(inbox, Arc::clone(&waiting), self.stop.clone()));
                Ok(waiting)
            })
            .await
    }
}

/// Reads the inbox until the bus is dropped, then deletes it.
async fn listen(inbox: Box<dyn ReplyInbox>, waiting: Arc<Waiting>, stop: CancellationToken) {
    loop {
        let received = tokio::select! {
            () = stop.cancelled() => break,
            received = inbox.receive(INBOX_WAIT) => received,
        };
        match received {
            Ok(replies) => replies.iter().for_each(|r| waiting.deliver(r)),
            Err(e) => {
                tracing::warn!(inbox = %waiting.inbox, error = %e, "waiting for replies failed; waiting again");
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(RETRY_PAUSE) => {}
                }
            }
        }
    }
    if let Err(e) = inbox.close().await {
        tracing::warn!(inbox = %waiting.inbox, error = %e, "could not delete the reply inbox; it expires by itself");
    }
}

impl Bus {
    /// Sends `request` to its queue and waits up to `timeout` for the reply a processor
    /// sends with [`Context::reply`]. The request carries [`headers::REPLY_TO`] and
    /// [`headers::CORRELATION_ID`]; the reply comes through this bus's inbox, opened at its
    /// first request (docs/concepts.md, "Request and reply"). No reply in time is
    /// [`Error::RequestTimeout`]; the request may still be handled later (its reply is
    /// then dropped).
    pub async fn request<Req: Command, Reply: DeserializeOwned>(
        &self,
        request: &Req,
        timeout: Duration,
    ) -> Result<Reply> {
        let deadline = tokio::time::Instant::now() + timeout;
        let waiting = self.requests().waiting(self.transport()).await?;
        let correlation = ulid::Ulid::new().to_string();
        let (sender, reply) = oneshot::channel();
        waiting.pending().insert(correlation.clone(), sender);
        let _forget = Forget {
            waiting,
            correlation: &correlation,
        };
        let options = SendOptions::new()
            .header(headers::REPLY_TO, waiting.inbox.as_str())
            .header(headers::CORRELATION_ID, correlation.as_str());
        let timed_out = || Error::RequestTimeout {
            message_type: Req::TYPE.to_owned(),
            timeout,
        };
        tokio::time::timeout_at(deadline, self.send_with(request, &options))
            .await
            .map_err(|_| timed_out())??;
        let envelope = match tokio::time::timeout_at(deadline, reply).await {
            Ok(Ok(envelope)) => envelope,
            // The sender is dropped only when the reply is taken or the request given up.
            Ok(Err(_)) | Err(_) => return Err(timed_out()),
        };
        envelope.format.decode(headers::REPLY_TYPE, &envelope.body)
    }
}

impl Context {
    /// Answers the request being handled with `reply` (sent by [`Bus::request`]): pushes
    /// it onto the requester's inbox, named by the message's [`headers::REPLY_TO`]. Returns
    /// `false`, sending nothing, when the message is not a request (it has no such
    /// header), so one processor can serve plain sends and requests alike. Replying twice
    /// (a retried handler) sends twice; the requester takes the first.
    pub async fn reply<R: Serialize>(&self, reply: &R) -> Result<bool> {
        let (Some(inbox), Some(correlation)) = (
            self.headers.get(headers::REPLY_TO),
            self.headers.get(headers::CORRELATION_ID),
        ) else {
            return Ok(false);
        };
        crate::transport::validate_name("reply inbox", inbox)?;
        let format = Format::Json;
        let mut envelope = Envelope::new(
            headers::REPLY_TYPE,
            format,
            format.encode(headers::REPLY_TYPE, reply)?,
        );
        envelope
            .headers
            .insert(headers::CORRELATION_ID.to_owned(), correlation.clone());
        for name in ["traceparent", "tracestate"] {
            if let Some(value) = self.headers.get(name) {
                envelope.headers.insert(name.to_owned(), value.clone());
            }
        }
        let element = Bytes::from(envelope.encode()?);
        replies(&**self.scope.host_bus.transport())?
            .reply(inbox, element, defaults::REPLY_KEEP)
            .await?;
        Ok(true)
    }
}

/// The transport's request/reply, or the refusal of one without it.
fn replies(transport: &dyn crate::Transport) -> Result<&dyn crate::transport::Replies> {
    transport
        .extras()
        .replies
        .ok_or_else(|| crate::transport::unsupported(crate::Capability::RequestReply))
}
