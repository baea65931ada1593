//! What management shows of a stored message: its envelope, decoded for reading.

use bus_core::{Envelope, Format, Headers};
use serde::Serialize;
use serde_json::value::RawValue;

/// A decoded envelope (docs/wire-format.md), as management shows it.
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
    /// Decodes an element as stored: `Err` says why it is not a readable envelope.
    pub(crate) fn decode(element: &[u8]) -> Result<Self, String> {
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

/// A decoded message, or why an element is not one (with a printable excerpt of it).
pub(crate) fn decode_element(element: &[u8]) -> (Option<MessageSummary>, Option<String>) {
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
        let (message, error) = decode_element(b"hello\n");
        assert!(message.is_none());
        let error = error.unwrap();
        assert!(error.contains("hello."), "{error}");
    }
}
