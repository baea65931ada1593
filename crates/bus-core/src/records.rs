//! The records of stored messages that every transport, the management API, the `bus`
//! tool and the dashboard share: a message's errors, a dead letter, a queue's counts, and
//! an envelope decoded for reading. Defined once here, so each reader shows the same
//! thing whichever transport wrote it.

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::address::Source;
use crate::{Envelope, Format, Headers};

/// How many error records a message keeps (the most recent ones).
pub const ERROR_HISTORY: usize = 10;

/// One failed delivery: the error text and when it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRecord {
    /// The error, as displayed (with its sources, each once).
    pub message: String,
    /// Milliseconds since the Unix epoch (the transport's clock: Redis's for Redis).
    pub at_ms: u64,
}

impl ErrorRecord {
    /// An error that happened now.
    pub fn now(message: impl Into<String>) -> Self {
        ErrorRecord {
            message: message.into(),
            at_ms: crate::envelope::now_ms(),
        }
    }
}

/// A dead letter: the original element unchanged, plus why and what happened.
///
/// What a transport read back may be damaged or written by a foreign consumer, so the
/// reason is the text as stored and the times are optional; nothing that was stored is
/// hidden because one part of it is unreadable.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct DeadLetter {
    /// Its place in the dead-letter list, from 0 (the oldest).
    pub position: u64,
    /// Its storage id (read lossily as UTF-8): what requeue and delete take.
    pub storage_id: String,
    /// The original element, unchanged; empty when none is stored (damaged by hand).
    #[serde(skip)]
    pub payload: Bytes,
    /// As stored: `delivery_limit`, `rejected`, `undecodable` or `unknown_type` (see
    /// [`DeadLetter::known_reason`]), or whatever a foreign consumer wrote.
    pub reason: Option<String>,
    /// When it was dead-lettered, in ms since the Unix epoch (the transport's clock).
    pub dead_lettered_at_ms: Option<u64>,
    /// How many times it was delivered.
    pub delivery_count: u64,
    /// Its last errors, oldest first (at most [`ERROR_HISTORY`]).
    pub errors: Vec<ErrorRecord>,
    /// The decoded envelope; `None` when it is not readable (reason `undecodable`).
    pub message: Option<MessageSummary>,
    /// Why there is no readable envelope.
    pub decode_error: Option<String>,
}

impl DeadLetter {
    /// A dead letter as read from storage; its envelope is decoded for reading here.
    /// `payload` is `None` when no element is stored for it.
    pub fn new(
        position: u64,
        storage_id: impl Into<String>,
        payload: Option<Bytes>,
        reason: Option<String>,
        dead_lettered_at_ms: Option<u64>,
        delivery_count: u64,
        errors: Vec<ErrorRecord>,
    ) -> Self {
        let (message, decode_error) = match &payload {
            Some(payload) => MessageSummary::read(payload),
            None => (None, Some("no stored envelope".to_owned())),
        };
        DeadLetter {
            position,
            storage_id: storage_id.into(),
            payload: payload.unwrap_or_default(),
            reason,
            dead_lettered_at_ms,
            delivery_count,
            errors,
            message,
            decode_error,
        }
    }

    /// The reason, when it is one the bus writes.
    pub fn known_reason(&self) -> Option<DeadLetterReason> {
        self.reason.as_deref().and_then(DeadLetterReason::parse)
    }
}

/// The counts of one queue or subscription, by state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct QueueStats {
    /// `queue`, or `topic/subscription`.
    pub queue: String,
    /// Messages waiting, recovered ones waiting to run alone included.
    pub ready: u64,
    /// Messages of an ordered queue waiting for their key (per-key ordering: they start
    /// once their key has a free slot), not counted in `ready`.
    pub keyed: u64,
    /// Messages reserved by consumers, running or prefetched, including those whose lock
    /// expired.
    pub in_flight: u64,
    /// Of those in flight, the ones whose lock deadline is past (the transport's clock):
    /// their consumer died or lost its connection, and recovery will put them back (or
    /// dead-letter them) once a consumer of the queue runs. The in-memory transport,
    /// which lives and dies with its consumers, reports 0.
    pub expired_locks: u64,
    /// Delayed sends and retries waiting for their time.
    pub delayed: u64,
    /// Dead letters (`dead` in JSON, as the `bus` tool has always printed it).
    #[serde(rename = "dead")]
    pub dead_letters: u64,
    /// When the next ready message was first sent, in ms since the Unix epoch (its
    /// envelope's send time, the producer's clock): a retried, recovered or requeued
    /// message keeps the time of its first send, so this is not how long it has been
    /// ready. `None` when nothing is ready, the element is not a readable envelope, or
    /// the transport does not tell.
    pub oldest_sent_at_ms: Option<u64>,
    /// How long ago that was (by this machine's clock), in ms.
    pub oldest_age_ms: Option<u64>,
    /// The transport's clock when the counts were taken, in ms since the Unix epoch (the
    /// clock lock deadlines are measured against: Redis's for Redis).
    pub redis_now_ms: u64,
    /// Whether the queue is paused (flow control: consumers take nothing, sends enqueue).
    pub paused: bool,
    /// A fleet-wide circuit breaker is open on the queue (or its probe runs) until this
    /// time, in ms since the Unix epoch (the transport's clock); `None`: none is set. A
    /// time in the past: the cool-down is over and the next reserve takes the probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker_until_ms: Option<u64>,
}

impl QueueStats {
    /// Zero counts for `source`, taken now.
    pub fn new(source: &Source) -> Self {
        QueueStats {
            queue: source_name(source),
            redis_now_ms: crate::envelope::now_ms(),
            ..QueueStats::default()
        }
    }

    /// Whether the queue holds no message in any state (ready, in flight, delayed, dead).
    pub fn is_empty(&self) -> bool {
        self.ready + self.in_flight + self.delayed + self.dead_letters == 0
    }
}

/// `queue`, or `topic/subscription`: how the bus tool names a source.
pub fn source_name(source: &Source) -> String {
    match source {
        Source::Queue(queue) => queue.clone(),
        Source::Subscription { topic, name } => format!("{topic}/{name}"),
    }
}

/// A stored envelope (docs/wire-format.md), decoded for reading.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct MessageSummary {
    /// The message id (what handlers see, not the storage id).
    pub id: String,
    /// The message type (wire name).
    #[serde(rename = "type")]
    pub message_type: String,
    /// When it was sent, in milliseconds since the Unix epoch.
    pub sent_at_ms: u64,
    /// Its headers.
    pub headers: Headers,
    /// `json` or `msgpack`.
    pub format: &'static str,
    /// The body as JSON: exactly as sent for a JSON envelope, converted for MessagePack
    /// (or a string describing a MessagePack body that does not convert).
    pub body: Box<RawValue>,
}

impl MessageSummary {
    /// A message of another wire format (BabelQueue's, say), described for reading: its
    /// id, type (URN, wire name), send time, headers, `format` name and JSON body.
    pub fn new(
        id: impl Into<String>,
        message_type: impl Into<String>,
        sent_at_ms: u64,
        headers: Headers,
        format: &'static str,
        body: Box<RawValue>,
    ) -> Self {
        MessageSummary {
            id: id.into(),
            message_type: message_type.into(),
            sent_at_ms,
            headers,
            format,
            body,
        }
    }

    /// Decodes an element as stored: `Err` says why it is not a readable envelope.
    pub fn decode(element: &[u8]) -> Result<Self, String> {
        let envelope = Envelope::decode(element).map_err(|e| e.to_string())?;
        let (format, body) = match envelope.format {
            Format::MessagePack => ("msgpack", msgpack_body(&envelope)),
            _ => ("json", json_body(&envelope.body)),
        };
        Ok(MessageSummary {
            id: envelope.id.to_string(),
            message_type: envelope.message_type,
            sent_at_ms: envelope.sent_at_ms,
            headers: envelope.headers,
            format,
            body,
        })
    }

    /// A decoded message, or why an element is not one (with a printable excerpt of it).
    pub fn read(element: &[u8]) -> (Option<Self>, Option<String>) {
        match MessageSummary::decode(element) {
            Ok(message) => (Some(message), None),
            Err(error) => {
                let excerpt: String = String::from_utf8_lossy(&element[..element.len().min(80)])
                    .chars()
                    .map(|c| if c.is_control() { '.' } else { c })
                    .collect();
                let more = if element.len() > 80 { "…" } else { "" };
                (
                    None,
                    Some(format!("{excerpt:?}{more} is not an envelope: {error}")),
                )
            }
        }
    }
}

fn json_body(body: &[u8]) -> Box<RawValue> {
    std::str::from_utf8(body)
        .ok()
        .and_then(|text| RawValue::from_string(text.to_owned()).ok())
        .unwrap_or_else(|| describe(&format!("<{} bytes that are not JSON>", body.len())))
}

fn msgpack_body(envelope: &Envelope) -> Box<RawValue> {
    Format::MessagePack
        .decode::<serde_json::Value>(&envelope.message_type, &envelope.body)
        .ok()
        .and_then(|value| serde_json::value::to_raw_value(&value).ok())
        .unwrap_or_else(|| {
            describe(&format!(
                "<{} bytes of MessagePack that do not convert to JSON>",
                envelope.body.len()
            ))
        })
}

fn describe(text: &str) -> Box<RawValue> {
    // A string always serializes.
    serde_json::value::to_raw_value(text).unwrap_or_default()
}

/// Why a message was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DeadLetterReason {
    /// Its delivery count reached the limit.
    DeliveryLimit,
    /// Its handler said "do not retry".
    Rejected,
    /// The element or its body could not be decoded.
    Undecodable,
    /// No processor of this queue knows its type.
    UnknownType,
    /// Its deadline ([`headers::EXPIRES_AT`](crate::headers::EXPIRES_AT)) passed before a
    /// handler started it.
    Expired,
}

impl DeadLetterReason {
    /// The reason as stored and shown: `delivery_limit`, `rejected`, `undecodable`,
    /// `unknown_type`, `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::DeliveryLimit => "delivery_limit",
            DeadLetterReason::Rejected => "rejected",
            DeadLetterReason::Undecodable => "undecodable",
            DeadLetterReason::UnknownType => "unknown_type",
            DeadLetterReason::Expired => "expired",
        }
    }

    /// Reads a reason as stored ([`DeadLetterReason::as_str`]); `None` for any other text.
    pub fn parse(text: &str) -> Option<Self> {
        [
            DeadLetterReason::DeliveryLimit,
            DeadLetterReason::Rejected,
            DeadLetterReason::Undecodable,
            DeadLetterReason::UnknownType,
            DeadLetterReason::Expired,
        ]
        .into_iter()
        .find(|reason| reason.as_str() == text)
    }
}

impl fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_bodies_are_kept_as_sent() {
        let mut envelope = Envelope::new("orders", Format::Json, &br#"{"n": 1.50}"#[..]);
        envelope.headers.insert("k".into(), "v".into());
        let summary = MessageSummary::decode(&envelope.encode().unwrap()).unwrap();
        assert_eq!(summary.body.get(), r#"{"n": 1.50}"#);
        assert_eq!(summary.format, "json");
        assert_eq!(summary.headers["k"], "v");
        assert_eq!(summary.id, envelope.id.to_string());
    }

    #[test]
    fn msgpack_bodies_convert_to_json() {
        let body = Format::MessagePack
            .encode("t", &serde_json::json!({"key": "home"}))
            .unwrap();
        let envelope = Envelope::new("t", Format::MessagePack, body);
        let summary = MessageSummary::decode(&envelope.encode().unwrap()).unwrap();
        assert_eq!(summary.format, "msgpack");
        assert_eq!(summary.body.get(), r#"{"key":"home"}"#);
    }

    #[test]
    fn garbage_is_described_not_fatal() {
        let (message, error) = MessageSummary::read(b"hello\n");
        assert!(message.is_none());
        let error = error.unwrap();
        assert!(error.contains("hello."), "{error}");
    }

    #[test]
    fn a_dead_letter_without_an_element_says_so() {
        let dead = DeadLetter::new(0, "~1", None, Some("rejected".into()), None, 1, vec![]);
        assert_eq!(dead.known_reason(), Some(DeadLetterReason::Rejected));
        assert_eq!(dead.decode_error.as_deref(), Some("no stored envelope"));
        let foreign = DeadLetter::new(0, "x", None, Some("gave up".into()), None, 0, vec![]);
        assert_eq!(foreign.known_reason(), None);
    }
}
