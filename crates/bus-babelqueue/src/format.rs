//! BabelQueue's canonical envelope behind bus-core's wire-format seam
//! ([`bus_core::transport::WireFormat`]): the host reads and writes BabelQueue elements
//! the way it reads and writes its own envelopes, with no native envelope in between.
//!
//! | Bus envelope | BabelQueue element |
//! |---|---|
//! | `id` | `meta.id` (a fresh id when absent or empty) |
//! | `message_type` | the URN, `job` (or an inbound `urn`) |
//! | `body` (JSON) | `data` (`{}` when absent or null), a slice of the element where it can be |
//! | `sent_at_ms` | `meta.created_at` (0 when absent) |
//! | `headers` | the legacy frame's headers, plus [`TRACE_ID_HEADER`] = `trace_id` and [`ATTEMPTS_HEADER`] = `attempts` (read only) |

use bus_core::transport::WireFormat;
use bus_core::{Format, MessageId};
use bytes::Bytes;
use serde_json::value::RawValue;

use crate::envelope::Scan;
use crate::frame::{frame, unframe_shared, Headers};
use crate::keys::Layout;
use crate::{Envelope, Error, Poison};

/// The bus header that carries BabelQueue's `trace_id` (kept across hops: a message sent
/// with it keeps that `trace_id`): bus-core's [`bus_core::headers::TRACE_ID`].
pub const TRACE_ID_HEADER: &str = bus_core::headers::TRACE_ID;

/// The bus header that shows a handler the envelope's `attempts` as stored when the
/// delivery was reserved, in decimal (read it with
/// [`ContextExt::stored_attempts`](crate::ContextExt::stored_attempts)). Set on every
/// decode, over any header of that name a frame carried, and never written: a send
/// writes `attempts` 0.
pub const ATTEMPTS_HEADER: &str = "bq-attempts";

/// The elements of one BabelQueue queue, in one layout: what
/// [`BabelTransport`](crate::BabelTransport) gives the host for its queues.
///
/// Decoding reads the element once (BabelQueue's strict decode: poison is an error,
/// never a panic); encoding writes a new element as a BabelQueue producer does
/// (`attempts` 0, `lang` `rust`), keeping the bus's id, send time and `bq-trace-id`; on
/// the legacy layout the other headers ride in a `__bq_frame`, on Laravel they are
/// dropped, as BabelQueue does. Bodies must be JSON objects.
#[derive(Debug, Clone)]
pub struct BabelFormat {
    legacy: bool,
    queue: String,
}

/// What the receive path reads from an element: the bus envelope and the attempts the
/// element carries.
pub(crate) struct Read {
    pub(crate) envelope: bus_core::Envelope,
    pub(crate) attempts: i64,
}

impl BabelFormat {
    /// The format of `queue`'s elements (the bare name, written as `meta.queue`).
    pub fn new(layout: &Layout, queue: impl Into<String>) -> Self {
        BabelFormat {
            legacy: matches!(layout, Layout::Legacy),
            queue: queue.into(),
        }
    }

    /// Reads one stored element (legacy: framed or bare; Laravel: the job as it was
    /// stored); poison comes back as the reason.
    pub(crate) fn read(&self, element: &Bytes) -> Result<Read, Poison> {
        let (body, mut headers) = if self.legacy {
            unframe_shared(element)
        } else {
            (element.clone(), Headers::new())
        };
        let scan = Scan::of(&body)?;
        let data = match scan.data() {
            Some(data) => share(&body, data.get().as_bytes()),
            None => Bytes::from_static(b"{}"),
        };
        let (id, created_at) = scan.id_and_created_at();
        let mut envelope = bus_core::Envelope::new(scan.urn(), Format::Json, data);
        envelope.id = match id {
            Some(id) if !id.is_empty() => MessageId::from(id),
            _ => MessageId::generate(),
        };
        envelope.sent_at_ms = created_at
            .and_then(|ms| u64::try_from(ms).ok())
            .unwrap_or(0);
        if let Some(trace_id) = scan.trace_id() {
            headers.insert(TRACE_ID_HEADER.to_owned(), trace_id);
        }
        let attempts = scan.attempts();
        headers.insert(ATTEMPTS_HEADER.to_owned(), attempts.to_string());
        envelope.headers = headers;
        Ok(Read { envelope, attempts })
    }
}

/// `part` (a slice of `whole`) as a view of `whole`'s buffer; a copy if it is not one.
fn share(whole: &Bytes, part: &[u8]) -> Bytes {
    let range = whole.as_ptr_range();
    if range.contains(&part.as_ptr()) && part.as_ptr_range().end <= range.end {
        whole.slice_ref(part)
    } else {
        Bytes::copy_from_slice(part)
    }
}

impl WireFormat for BabelFormat {
    fn decode(&self, element: &Bytes) -> bus_core::Result<bus_core::Envelope> {
        self.read(element)
            .map(|read| read.envelope)
            .map_err(|poison| bus_core::Error::Decode {
                what: "BabelQueue envelope".into(),
                reason: poison.to_string(),
                source: Some(Box::new(poison)),
            })
    }

    fn encode(&self, envelope: &bus_core::Envelope) -> bus_core::Result<Vec<u8>> {
        let fail = |error: Error| bus_core::Error::Encode {
            message_type: envelope.message_type.clone(),
            source: Box::new(error),
        };
        if envelope.format != Format::Json {
            return Err(fail(Error::Envelope(format!(
                "BabelQueue carries JSON bodies only, not {:?}",
                envelope.format
            ))));
        }
        let text = std::str::from_utf8(&envelope.body)
            .map_err(|_| fail(Error::Envelope("the body is not UTF-8".into())))?;
        let data: &RawValue = serde_json::from_str(text)
            .map_err(|e| fail(Error::Envelope(format!("the body is not JSON: {e}"))))?;
        // The one BabelQueue's OpenTelemetry consumers map to the sender's trace.
        let trace_id = envelope
            .headers
            .get(TRACE_ID_HEADER)
            .filter(|id| !id.trim().is_empty())
            .cloned()
            .unwrap_or_else(|| bus_core::new_trace_id(&envelope.headers));
        let element = Envelope::build(
            &envelope.message_type,
            data,
            &self.queue,
            Some(envelope.id.to_string()),
            Some(trace_id),
            i64::try_from(envelope.sent_at_ms).ok(),
        )
        .map_err(fail)?
        .encode();
        let framed = self.legacy
            && envelope.headers.iter().any(|(k, v)| {
                k != TRACE_ID_HEADER && k != ATTEMPTS_HEADER && !k.is_empty() && !v.is_empty()
            });
        if !framed {
            return Ok(element);
        }
        let mut headers = envelope.headers.clone();
        headers.remove(TRACE_ID_HEADER);
        headers.remove(ATTEMPTS_HEADER);
        Ok(frame(&element, &headers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legacy() -> BabelFormat {
        BabelFormat::new(&Layout::Legacy, "orders")
    }

    #[test]
    fn the_body_is_a_slice_of_the_element() {
        let element = Bytes::from_static(
            br#"{"job":"urn:a","trace_id":"t-1","data":{"x":[1, 2]},"meta":{"id":"m-1","created_at":42,"id":"m-2"},"attempts":3}"#,
        );
        let read = legacy().read(&element).unwrap();
        let env = &read.envelope;
        assert_eq!(read.attempts, 3);
        assert_eq!(env.message_type, "urn:a");
        assert_eq!(env.id.as_str(), "m-2", "the last of a repeated member");
        assert_eq!(env.sent_at_ms, 42);
        assert_eq!(
            env.headers.get(TRACE_ID_HEADER).map(String::as_str),
            Some("t-1")
        );
        assert_eq!(&env.body[..], br#"{"x":[1, 2]}"#);
        assert!(element.as_ptr_range().contains(&env.body.as_ptr()));
        assert_eq!(
            env.headers.get(ATTEMPTS_HEADER).map(String::as_str),
            Some("3")
        );
    }

    #[test]
    fn a_message_without_a_trace_id_gets_its_traceparents_as_a_uuid() {
        let mut env = bus_core::Envelope::new("urn:a", Format::Json, &b"{}"[..]);
        env.headers.insert(
            "traceparent".into(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
        );
        let sent = Bytes::from(legacy().encode(&env).unwrap());
        let back = legacy().decode(&sent).unwrap();
        assert_eq!(
            back.headers[TRACE_ID_HEADER],
            "0af76519-16cd-43dd-8448-eb211c80319c"
        );
        // Without one, a random UUID, as the SDKs mint.
        let bare = bus_core::Envelope::new("urn:a", Format::Json, &b"{}"[..]);
        let sent = Bytes::from(legacy().encode(&bare).unwrap());
        let id = legacy().decode(&sent).unwrap().headers[TRACE_ID_HEADER].clone();
        assert_eq!(uuid::Uuid::parse_str(&id).unwrap().get_version_num(), 4);
    }

    #[test]
    fn the_attempts_header_is_read_not_written() {
        // A frame's own header of that name does not win over the envelope's count.
        let element = Bytes::from(frame(
            br#"{"job":"urn:a","data":{},"attempts":2}"#,
            &[(ATTEMPTS_HEADER.to_owned(), "9".to_owned())].into(),
        ));
        let env = legacy().decode(&element).unwrap();
        assert_eq!(env.headers[ATTEMPTS_HEADER], "2");
        // Sent on, it is neither framed nor counted: a new element starts at 0.
        let sent = Bytes::from(legacy().encode(&env).unwrap());
        assert!(
            !sent.starts_with(b"{\"__bq_frame\""),
            "framed for its own header"
        );
        assert_eq!(
            legacy().decode(&sent).unwrap().headers[ATTEMPTS_HEADER],
            "0"
        );
    }

    #[test]
    fn poison_is_a_decode_error() {
        for bad in [
            &b"[1]"[..],
            b"{\"job\":5}",
            b"\xff",
            b"{\"job\":\"urn:a\",\"data\":[]}",
        ] {
            let err = legacy().decode(&Bytes::copy_from_slice(bad)).unwrap_err();
            assert!(matches!(err, bus_core::Error::Decode { .. }), "{err}");
        }
    }

    #[test]
    fn encode_then_decode_keeps_the_message() {
        for layout in [Layout::Legacy, Layout::laravel()] {
            let format = BabelFormat::new(&layout, "orders");
            let mut env =
                bus_core::Envelope::new("urn:a", Format::Json, &br#"{"n":1,"s":"\u00fc"}"#[..]);
            env.headers.insert(TRACE_ID_HEADER.into(), "trace-7".into());
            env.headers
                .insert("traceparent".into(), "00-ab-cd-01".into());
            let element = Bytes::from(format.encode(&env).unwrap());
            let back = format.decode(&element).unwrap();
            assert_eq!(back.id, env.id);
            assert_eq!(back.message_type, env.message_type);
            assert_eq!(back.sent_at_ms, env.sent_at_ms);
            assert_eq!(
                serde_json::from_slice::<serde_json::Value>(&back.body).unwrap(),
                serde_json::json!({"n": 1, "s": "ü"})
            );
            let framed = matches!(layout, Layout::Legacy);
            assert_eq!(back.headers.contains_key("traceparent"), framed);
            assert_eq!(back.headers[TRACE_ID_HEADER], "trace-7");
            let stored = Envelope::decode(&crate::unframe(&element).0).unwrap();
            assert_eq!(stored.meta().queue.as_deref(), Some("orders"));
            assert_eq!(stored.attempts(), 0);
        }
    }

    #[test]
    fn only_json_objects_are_encoded() {
        let format = legacy();
        for (format_of, body) in [
            (Format::MessagePack, &b"\x80"[..]),
            (Format::Json, b"[1]"),
            (Format::Json, b"{"),
        ] {
            let env = bus_core::Envelope::new("urn:a", format_of, body);
            let err = format.encode(&env).unwrap_err();
            assert!(matches!(err, bus_core::Error::Encode { .. }), "{err}");
        }
    }
}
