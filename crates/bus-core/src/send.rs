//! What a send or publish can carry besides the message ([`SendOptions`]), what it
//! returns ([`Sent`]), and the layers that run on every one ([`SendMiddleware`]).
//!
//! ```
//! # use std::time::Duration;
//! # use bus_core::{SendOptions, Sent};
//! let options = SendOptions::new()
//!     .header("tenant", "acme")
//!     .trace_id("t-42")
//!     .delay(Duration::from_secs(30))
//!     .key("customer-7");
//! assert_eq!(options.headers["tenant"], "acme");
//! ```

use crate::headers;
use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::transport::Destination;
use crate::{Headers, MessageId, Result};

/// A trace id for a message sent without one ([`headers::TRACE_ID`]), in the form
/// BabelQueue's SDKs mint: a UUID. When `headers` carry a valid W3C `traceparent`
/// (version `00`), it is that trace's 128-bit id written as a UUID, as the SDK's
/// OpenTelemetry producer stamps it (its consumer maps a UUID `trace_id` back to the same
/// trace id, and hashes any other string); otherwise a random (version 4) UUID.
///
/// ```
/// # use bus_core::{new_trace_id, Headers};
/// let mut headers = Headers::new();
/// headers.insert(
///     "traceparent".into(),
///     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
/// );
/// assert_eq!(new_trace_id(&headers), "4bf92f35-77b3-4da6-a3ce-929d0e0e4736");
/// assert_eq!(new_trace_id(&Headers::new()).len(), 36);
/// ```
pub fn new_trace_id(headers: &Headers) -> String {
    let id = headers
        .get("traceparent")
        .and_then(|t| w3c_trace_id(t))
        .unwrap_or_else(|| uuid::Uuid::new_v4().into_bytes());
    uuid::Uuid::from_bytes(id).hyphenated().to_string()
}

/// The trace id of a version-00 `traceparent`: lowercase hex fields of 2, 32, 16 and 2
/// digits, the trace id not all zeros.
fn w3c_trace_id(traceparent: &str) -> Option<[u8; 16]> {
    let fields: Vec<&str> = traceparent.split('-').collect();
    let lower_hex = |f: &str| {
        f.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let [version, trace, span, flags] = fields[..] else {
        return None;
    };
    let shape = [(version, 2), (trace, 32), (span, 16), (flags, 2)];
    if version != "00"
        || shape
            .iter()
            .any(|(f, len)| f.len() != *len || !lower_hex(f))
    {
        return None;
    }
    let id = u128::from_str_radix(trace, 16).ok().filter(|id| *id != 0)?;
    Some(id.to_be_bytes())
}

/// The options of one send or publish. The short methods (`send`, `send_keyed`,
/// `send_delayed`, ...) are this with one option set.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SendOptions {
    /// Headers the message carries, beside those the bus adds (trace context); a header
    /// given here wins over an inherited one of the same name.
    pub headers: Headers,
    /// When the message becomes ready (`None`: at once); for an event, each
    /// subscription's copy.
    pub due: Option<SystemTime>,
    /// The partition key (see [`Bus::send_keyed`](crate::Bus::send_keyed)). Commands
    /// only. With a due time on a queue ordered per key, the message joins its key's
    /// order at its due time (docs/concepts.md, "Per-key ordering").
    pub key: Option<String>,
    /// The message's deadline: a host that receives it later does not run it, and
    /// dead-letters it with reason `expired` or drops it
    /// ([`ProcessingSettings::on_expiry`](crate::ProcessingSettings::on_expiry)). Carried
    /// in the [`headers::EXPIRES_AT`](crate::headers::EXPIRES_AT) header; wins over the
    /// type's [`BusConfig::time_to_live`](crate::BusConfig::time_to_live).
    pub expires_at: Option<SystemTime>,
    /// The deduplication key: the message is stored only if no message with this key was
    /// stored in its queue within [`SendOptions::dedup_window`]; otherwise nothing is
    /// stored and [`Sent`] names the first message (docs/concepts.md, "Deduplication").
    /// Commands only.
    pub dedup_key: Option<String>,
    /// How long a deduplication key holds after the send that stored it (`None`:
    /// [`defaults::DEDUP_WINDOW`](crate::defaults::DEDUP_WINDOW)).
    pub dedup_window: Option<Duration>,
}

impl SendOptions {
    /// No options: a plain send.
    pub fn new() -> Self {
        SendOptions::default()
    }
    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
    /// Sets the trace id ([`headers::TRACE_ID`]): BabelQueue's `trace_id` on a BabelQueue
    /// queue, a header on a native one; handlers' sends inherit it.
    pub fn trace_id(self, id: impl Into<String>) -> Self {
        self.header(headers::TRACE_ID, id)
    }
    /// Ready after `delay` from now.
    pub fn delay(self, delay: Duration) -> Self {
        self.at(SystemTime::now() + delay)
    }
    /// Ready at `due`.
    pub fn at(mut self, due: SystemTime) -> Self {
        self.due = Some(due);
        self
    }
    /// Expires `time_to_live` from now (the sender's clock), however long it waits
    /// delayed, queued or between retries.
    pub fn expires_in(self, time_to_live: Duration) -> Self {
        self.expires_at(SystemTime::now() + time_to_live)
    }
    /// Expires at `deadline`.
    pub fn expires_at(mut self, deadline: SystemTime) -> Self {
        self.expires_at = Some(deadline);
        self
    }
    /// Stored only if no message with deduplication key `key` was stored in the same
    /// queue within the window (an hour unless [`SendOptions::dedup_window`] says).
    pub fn dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup_key = Some(key.into());
        self
    }
    /// How long the deduplication key holds after the send that stores the message.
    pub fn dedup_window(mut self, window: Duration) -> Self {
        self.dedup_window = Some(window);
        self
    }
    /// With a partition key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

/// What a send or publish stored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sent {
    /// The message's id.
    pub id: MessageId,
    /// The trace id stored with it ([`headers::TRACE_ID`]): the one given or inherited, or
    /// the one the destination's wire format made (a BabelQueue queue always has one).
    pub trace_id: Option<String>,
    /// Whether nothing was stored because a message with the same deduplication key was
    /// stored within its window: [`Sent::id`] is then that first message's id, and
    /// `trace_id` is `None` (it is not known).
    pub duplicate: bool,
    /// For a publish: how many subscriptions stored a copy (`None` for a send). What a
    /// resource shared by every copy counts its holders with (an event's attachment).
    pub copies: Option<usize>,
}

/// A message encoded for its destination but not stored ([`Bus::prepare`](crate::Bus::prepare)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Prepared {
    /// Where it goes: the queue or topic under its run-time name.
    pub destination: Destination<'static>,
    /// Its id and the encoded element, as a transport stores it.
    pub message: crate::transport::Outgoing,
    /// Its trace id ([`headers::TRACE_ID`]), when it has one.
    pub trace_id: Option<String>,
}

/// One message about to be sent or published, as a [`SendMiddleware`] sees it.
#[derive(Debug)]
#[non_exhaustive]
pub struct OutgoingMessage<'a> {
    /// Where it goes.
    pub destination: Destination<'a>,
    /// Its type on the wire.
    pub message_type: &'a str,
    /// Its id.
    pub id: &'a MessageId,
    /// Its headers, to read or change.
    pub headers: &'a mut Headers,
}

/// A layer that runs on every send and publish of a bus (and of the handlers' bus), in the
/// order added, before the messages are encoded: it may add or change headers (trace
/// injection, a tenant, an attachment's reference) or refuse the send by returning an
/// error, which the sender gets back; a refused batch stores nothing.
///
/// ```
/// use async_trait::async_trait;
/// use bus_core::{OutgoingMessage, SendMiddleware};
///
/// #[derive(Debug)]
/// struct Tenant(&'static str);
///
/// #[async_trait]
/// impl SendMiddleware for Tenant {
///     async fn before_send(&self, message: &mut OutgoingMessage<'_>) -> bus_core::Result<()> {
///         message.headers.insert("tenant".into(), self.0.into());
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait SendMiddleware: Send + Sync + 'static {
    /// Runs before `message` is encoded.
    async fn before_send(&self, message: &mut OutgoingMessage<'_>) -> Result<()>;
}

impl fmt::Debug for dyn SendMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SendMiddleware")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_traceparent(value: &str) -> Headers {
        [("traceparent".to_owned(), value.to_owned())].into()
    }

    #[test]
    fn a_trace_id_is_the_traceparents_trace_as_a_uuid() {
        let headers = with_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        assert_eq!(
            new_trace_id(&headers),
            "0af76519-16cd-43dd-8448-eb211c80319c"
        );
    }

    #[test]
    fn without_a_valid_traceparent_it_is_a_random_v4_uuid() {
        for bad in [
            "",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
            "00-+af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            let id = new_trace_id(&with_traceparent(bad));
            let parsed = uuid::Uuid::parse_str(&id).expect("a UUID");
            assert_eq!(parsed.get_version_num(), 4, "{bad:?} gave {id}");
            assert_eq!(id, parsed.hyphenated().to_string(), "not canonical");
        }
        assert_ne!(new_trace_id(&Headers::new()), new_trace_id(&Headers::new()));
    }
}
