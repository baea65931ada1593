//! The versioned envelope stored in the transport (see `docs/wire-format.md`).
//!
//! JSON envelopes embed the JSON body as a raw value, so a producer in any language writes
//! one plain JSON object. MessagePack envelopes are a map with the same keys and the body
//! as a binary string. A decoder tells them apart by the first byte (`{` is JSON).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::{Error, Format, Result};

mod canonical;

/// The envelope format version this crate writes and reads.
pub const ENVELOPE_VERSION: u32 = 1;

/// Message headers: string to string, ordered for stable encoding.
pub type Headers = BTreeMap<String, String>;

/// A message id: a ULID string unless a foreign producer chose another unique string.
/// A ULID the bus makes, and any id of 26 ASCII characters read from an envelope, is kept
/// inline, so that making, reading and copying an id allocates nothing on the send and
/// receive paths; any other id is kept as given. Ids compare, hash and serialise as their
/// text.
#[derive(Clone)]
pub struct MessageId(Repr);

#[derive(Clone)]
enum Repr {
    /// 26 ASCII characters: a ULID's text (Crockford base32) or any id of its length.
    Inline([u8; ulid::ULID_LEN]),
    Text(String),
}

impl MessageId {
    /// A new, time-ordered, unique id.
    pub fn generate() -> Self {
        Self::from_ulid(ulid::Ulid::new())
    }

    pub(crate) fn from_ulid(ulid: ulid::Ulid) -> Self {
        let mut text = [0; ulid::ULID_LEN];
        ulid.array_to_str(&mut text);
        MessageId(Repr::Inline(text))
    }

    /// An id read from an envelope: inline when it has a ULID's length and is ASCII.
    fn read(text: Cow<'_, str>) -> Self {
        match <[u8; ulid::ULID_LEN]>::try_from(text.as_bytes()) {
            Ok(inline) if inline.is_ascii() => MessageId(Repr::Inline(inline)),
            _ => MessageId(Repr::Text(text.into_owned())),
        }
    }

    /// The id's text as bytes, without the UTF-8 check `as_str` makes of an inline one.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline(text) => text,
            Repr::Text(text) => text.as_bytes(),
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Inline ids are ASCII: the check cannot fail.
            Repr::Inline(text) => std::str::from_utf8(text).unwrap_or_default(),
            Repr::Text(text) => text,
        }
    }
}

impl From<String> for MessageId {
    fn from(id: String) -> Self {
        MessageId(Repr::Text(id))
    }
}

impl PartialEq for MessageId {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for MessageId {}

impl std::hash::Hash for MessageId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for MessageId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MessageId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Debug for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("MessageId").field(&self.as_str()).finish()
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for MessageId {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for MessageId {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        String::deserialize(deserializer).map(MessageId::from)
    }
}

/// One message as it travels: id, type, headers, send time and the encoded body.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Envelope {
    /// Unique message id.
    pub id: MessageId,
    /// The message's wire name.
    pub message_type: String,
    /// Headers, including W3C `traceparent` / `tracestate` when present.
    pub headers: Headers,
    /// When the message was sent, in milliseconds since the Unix epoch.
    pub sent_at_ms: u64,
    /// The encoding of both the envelope and the body.
    pub format: Format,
    /// The encoded body.
    pub body: Bytes,
}

#[derive(Serialize)]
struct JsonHead<'a> {
    v: u32,
    id: &'a MessageId,
    #[serde(rename = "type")]
    message_type: &'a str,
    sent: u64,
    // Omitted when empty: every queued byte counts (SPEC §8's memory target).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    headers: &'a Headers,
}

/// Writes a JSON envelope: the head, then the body written by `body` in place (JSON
/// bodies are spliced in, never re-serialized).
fn write_json(
    head: &JsonHead<'_>,
    size_hint: usize,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), crate::BoxError>,
) -> Result<Vec<u8>, crate::BoxError> {
    let mut out = Vec::with_capacity(size_hint + 96);
    write_json_into(&mut out, head, body)?;
    Ok(out)
}

/// [`write_json`] into `out` (empty).
fn write_json_into(
    out: &mut Vec<u8>,
    head: &JsonHead<'_>,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), crate::BoxError>,
) -> Result<(), crate::BoxError> {
    canonical::write_head(out, head)?;
    out.extend_from_slice(br#","body":"#);
    body(out)?;
    out.push(b'}');
    Ok(())
}

/// Encodes a message straight into a JSON envelope, with no intermediate body buffer
/// (the send path). It is written into a buffer the thread keeps, then copied once into
/// an allocation of its exact size: a `Bytes` made from a `Vec` with room to spare
/// allocates a second block to track it, so this is one allocation per envelope, not two.
pub(crate) fn encode_json_message<T: Serialize>(
    id: &MessageId,
    message_type: &str,
    headers: &Headers,
    sent_at_ms: u64,
    message: &T,
) -> Result<Bytes> {
    thread_local! {
        static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    }
    let head = JsonHead {
        v: ENVELOPE_VERSION,
        id,
        message_type,
        sent: sent_at_ms,
        headers,
    };
    // Taken, not borrowed: a `Serialize` that sends (it should not) finds an empty buffer
    // instead of a panic.
    let mut out = SCRATCH.take();
    out.clear();
    let written = write_json_into(&mut out, &head, |out| {
        Ok(crate::json_writer::write(out, message)?)
    });
    let encoded = written.map(|()| Bytes::copy_from_slice(&out));
    // A buffer grown by one huge message is not kept for the thread's life.
    if out.capacity() <= SCRATCH_KEPT {
        SCRATCH.set(out);
    }
    encoded.map_err(|source| Error::Encode {
        message_type: message_type.to_owned(),
        source,
    })
}

/// The largest encoding buffer a thread keeps between sends.
const SCRATCH_KEPT: usize = 64 * 1024;

#[derive(Deserialize)]
struct JsonEnvelope<'a> {
    v: u32,
    // Borrowed unless escaped, like the type: an id of a ULID's length is kept inline.
    #[serde(borrow)]
    id: Cow<'a, str>,
    // Borrowed from the element unless escaped: the host routes on it without a copy.
    #[serde(rename = "type", borrow)]
    message_type: Cow<'a, str>,
    sent: u64,
    #[serde(default, deserialize_with = "null_as_none")]
    headers: Headers,
    #[serde(borrow)]
    body: &'a RawValue,
}

/// An envelope's fields as read from an element, in either form, and its body's bytes.
#[derive(Debug, PartialEq)]
struct WireHead<'a> {
    v: u32,
    id: Cow<'a, str>,
    message_type: Cow<'a, str>,
    sent: u64,
    headers: Headers,
    body: &'a [u8],
}

impl<'a> From<JsonEnvelope<'a>> for WireHead<'a> {
    fn from(wire: JsonEnvelope<'a>) -> Self {
        WireHead {
            v: wire.v,
            id: wire.id,
            message_type: wire.message_type,
            sent: wire.sent,
            headers: wire.headers,
            body: wire.body.get().as_bytes(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct PackedEnvelope<'a> {
    v: u32,
    id: String,
    #[serde(rename = "type")]
    message_type: String,
    sent: u64,
    #[serde(default, deserialize_with = "null_as_none")]
    headers: Headers,
    #[serde(with = "serde_bytes", borrow)]
    body: &'a [u8],
}

/// `"headers": null` means no headers: many JSON writers write `null` for "none".
fn null_as_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Headers, D::Error> {
    Ok(Option::<Headers>::deserialize(d)?.unwrap_or_default())
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    epoch_ms(SystemTime::now())
}

/// Milliseconds since the Unix epoch at `at` (0 before it).
pub(crate) fn epoch_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Envelope {
    /// A new envelope with a fresh id, sent now.
    pub fn new(message_type: impl Into<String>, format: Format, body: impl Into<Bytes>) -> Self {
        Envelope {
            id: MessageId::generate(),
            message_type: message_type.into(),
            headers: Headers::new(),
            sent_at_ms: now_ms(),
            format,
            body: body.into(),
        }
    }

    /// Encodes the envelope for the transport.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let fail = |source: crate::BoxError| Error::Encode {
            message_type: self.message_type.clone(),
            source,
        };
        match self.format {
            Format::Json => {
                let head = JsonHead {
                    v: ENVELOPE_VERSION,
                    id: &self.id,
                    message_type: &self.message_type,
                    sent: self.sent_at_ms,
                    headers: &self.headers,
                };
                write_json(&head, self.body.len(), |out| {
                    out.extend_from_slice(&self.body);
                    Ok(())
                })
                .map_err(fail)
            }
            Format::MessagePack => rmp_serde::to_vec_named(&PackedEnvelope {
                v: ENVELOPE_VERSION,
                id: self.id.to_string(),
                message_type: self.message_type.clone(),
                sent: self.sent_at_ms,
                headers: self.headers.clone(),
                body: &self.body,
            })
            .map_err(|e| fail(e.into())),
        }
    }

    /// Decodes an envelope. Garbage gives [`Error::Decode`], never a panic.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        Self::decode_with(bytes, Bytes::copy_from_slice).map(Incoming::into_envelope)
    }

    /// Like [`Envelope::decode`], for an element already held as `Bytes`: the body
    /// shares its buffer instead of being copied.
    pub fn decode_shared(bytes: &Bytes) -> Result<Self> {
        Self::decode_incoming(bytes).map(Incoming::into_envelope)
    }

    /// The host's path, once per delivery: the body shares the element's buffer and the
    /// type is borrowed from it.
    pub(crate) fn decode_incoming(bytes: &Bytes) -> Result<Incoming<'_>> {
        Self::decode_with(bytes, |body| {
            // The body is a sub-slice of `bytes` (both decoders borrow it); checked, so
            // that `slice_ref` can never panic.
            let (start, end) = (
                bytes.as_ptr() as usize,
                bytes.as_ptr() as usize + bytes.len(),
            );
            let at = body.as_ptr() as usize;
            if at >= start && at + body.len() <= end {
                bytes.slice_ref(body)
            } else {
                Bytes::copy_from_slice(body)
            }
        })
    }

    fn decode_with<'a>(
        bytes: &'a [u8],
        body_of: impl FnOnce(&[u8]) -> Bytes,
    ) -> Result<Incoming<'a>> {
        let garbage = |what: &str, e: crate::BoxError| Error::Decode {
            what: "envelope".into(),
            reason: format!("{what}: {e}"),
            source: Some(e),
        };
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            None => Err(Error::decode("envelope", "empty element")),
            Some(b'{') => {
                // No separate nesting scan: serde_json skips the raw body without
                // recursing, and refuses more than 128 levels in whatever it does
                // recurse into (the envelope here, the body's `Deserialize` later).
                let head = match canonical::read(bytes) {
                    Some(head) => head,
                    None => serde_json::from_slice::<JsonEnvelope<'_>>(bytes)
                        .map_err(|e| garbage("not a JSON envelope", e.into()))?
                        .into(),
                };
                Self::from_wire(head, Format::Json, body_of)
            }
            Some(_) => {
                crate::depth::check(Format::MessagePack, bytes)
                    .map_err(|reason| Error::decode("envelope", reason))?;
                let wire: PackedEnvelope<'_> = rmp_serde::from_slice(bytes)
                    .map_err(|e| garbage("neither a JSON nor a MessagePack envelope", e.into()))?;
                let head = WireHead {
                    v: wire.v,
                    id: Cow::Owned(wire.id),
                    message_type: Cow::Owned(wire.message_type),
                    sent: wire.sent,
                    headers: wire.headers,
                    body: wire.body,
                };
                Self::from_wire(head, Format::MessagePack, body_of)
            }
        }
    }

    /// An envelope from its decoded fields, checked: a known version, a non-empty id.
    fn from_wire<'a>(
        head: WireHead<'a>,
        format: Format,
        body_of: impl FnOnce(&[u8]) -> Bytes,
    ) -> Result<Incoming<'a>> {
        let WireHead {
            v: version,
            id,
            message_type,
            sent: sent_at_ms,
            headers,
            body,
        } = head;
        if version != ENVELOPE_VERSION {
            return Err(Error::decode(
                "envelope",
                format!(
                    "unsupported envelope version {version} (this bus reads {ENVELOPE_VERSION})"
                ),
            ));
        }
        if id.is_empty() {
            return Err(Error::decode("envelope", "empty message id"));
        }
        Ok(Incoming {
            id: MessageId::read(id),
            message_type,
            headers,
            sent_at_ms,
            format,
            body: body_of(body),
        })
    }
}

/// An envelope as the host reads it: [`Envelope`] with the type possibly borrowed from
/// the element, since routing needs no copy of it.
#[derive(Debug)]
pub(crate) struct Incoming<'a> {
    pub(crate) id: MessageId,
    pub(crate) message_type: Cow<'a, str>,
    pub(crate) headers: Headers,
    pub(crate) sent_at_ms: u64,
    pub(crate) format: Format,
    pub(crate) body: Bytes,
}

impl Incoming<'_> {
    fn into_envelope(self) -> Envelope {
        Envelope {
            id: self.id,
            message_type: self.message_type.into_owned(),
            headers: self.headers,
            sent_at_ms: self.sent_at_ms,
            format: self.format,
            body: self.body,
        }
    }
}

impl From<Envelope> for Incoming<'static> {
    fn from(envelope: Envelope) -> Self {
        Incoming {
            id: envelope.id,
            message_type: Cow::Owned(envelope.message_type),
            headers: envelope.headers,
            sent_at_ms: envelope.sent_at_ms,
            format: envelope.format,
            body: envelope.body,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_made_id_is_its_text_however_it_is_held() {
        use std::collections::HashSet;
        let made = MessageId::generate();
        let text = made.as_str().to_owned();
        assert_eq!(text.len(), 26);
        assert_eq!(
            text.parse::<ulid::Ulid>().map(|u| u.to_string()),
            Ok(text.clone())
        );
        let read = MessageId::from(text.clone());
        assert_eq!(made, read);
        assert_eq!(HashSet::from([made.clone()]).get(&read), Some(&made));
        assert_eq!(made.to_string(), text);
        assert_eq!(format!("{made:?}"), format!("MessageId({text:?})"));
        assert_eq!(serde_json::to_string(&made).unwrap(), format!("\"{text}\""));
        let back: MessageId = serde_json::from_str(&format!("\"{text}\"")).unwrap();
        assert_eq!(back, made);
        assert_eq!(made.as_bytes(), text.as_bytes());
        let later = MessageId::generate();
        assert_eq!(made.cmp(&later), made.as_str().cmp(later.as_str()));
        assert_eq!(made.cmp(&read), std::cmp::Ordering::Equal);
        assert!(MessageId::from("a".to_owned()) < MessageId::from("b".to_owned()));
    }

    #[test]
    fn an_id_read_from_an_envelope_is_its_text_inline_or_not() {
        let element = |id: &str| {
            format!(r#"{{"v":1,"id":"{id}","type":"t","sent":0,"headers":null,"body":{{}}}}"#)
        };
        let ulid = MessageId::generate().as_str().to_owned();
        // (26 bytes, not ASCII: kept as a string; an escaped id is unescaped either way.)
        let cases = [
            (ulid.clone(), ulid.clone()),
            ("short".to_owned(), "short".to_owned()),
            ("é".repeat(13), "é".repeat(13)),
            (format!("\\u0041{}", &ulid[1..]), format!("A{}", &ulid[1..])),
        ];
        for (written, read) in cases {
            let decoded = Envelope::decode(element(&written).as_bytes()).unwrap();
            assert_eq!(decoded.id.as_str(), read);
            assert_eq!(decoded.id, MessageId::from(read.clone()));
        }
    }

    #[test]
    fn a_sent_message_is_encoded_as_its_envelope_each_time_on_one_thread() {
        #[derive(Serialize)]
        struct Body {
            text: String,
        }
        let mut headers = Headers::new();
        headers.insert("k".into(), "v\"".into());
        // Long, short (after long: nothing of the longer one may stay), then past the
        // buffer a thread keeps, then short again.
        for (n, len) in [200, 3, SCRATCH_KEPT * 2, 0].into_iter().enumerate() {
            let body = Body {
                text: "x".repeat(len),
            };
            let id = MessageId::generate();
            let shared = if n % 2 == 0 {
                Headers::new()
            } else {
                headers.clone()
            };
            let encoded = encode_json_message(&id, "t.y", &shared, 7, &body).unwrap();
            let mut envelope = Envelope::new(
                "t.y",
                Format::Json,
                Format::Json.encode("t.y", &body).unwrap(),
            );
            envelope.id = id;
            envelope.sent_at_ms = 7;
            envelope.headers = shared;
            assert_eq!(encoded, envelope.encode().unwrap(), "message {n}");
            // Exactly its size: a `Bytes` with room to spare would cost a second block.
            let len = encoded.len();
            assert_eq!(Vec::from(encoded).capacity(), len, "message {n}");
        }
    }

    fn headers() -> impl Strategy<Value = Headers> {
        proptest::collection::btree_map(".{0,12}", ".{0,24}", 0..4)
    }

    proptest! {
        #[test]
        fn json_round_trips(id in "[0-9A-Za-z-]{1,30}", ty in "[a-z.-]{1,20}", text in ".*",
                            n in any::<i64>(), sent in any::<u64>(), headers in headers()) {
            let body = serde_json::to_vec(&serde_json::json!({ "text": text, "n": n })).unwrap();
            let mut env = Envelope::new(ty, Format::Json, body);
            env.id = MessageId::from(id);
            env.sent_at_ms = sent;
            env.headers = headers;
            let encoded = Bytes::from(env.encode().unwrap());
            let decoded = Envelope::decode(&encoded).unwrap();
            prop_assert_eq!(&decoded, &env);
            // The shared decoding gives the same envelope, its body inside the element.
            let shared = Envelope::decode_shared(&encoded).unwrap();
            let within = encoded.as_ptr_range();
            prop_assert!(shared.body.is_empty() || within.contains(&shared.body.as_ptr()));
            prop_assert_eq!(shared, env);
        }

        #[test]
        fn msgpack_round_trips(ty in "[a-z.-]{1,20}", body in proptest::collection::vec(any::<u8>(), 0..300),
                               sent in any::<u64>(), headers in headers()) {
            let mut env = Envelope::new(ty, Format::MessagePack, body);
            env.sent_at_ms = sent;
            env.headers = headers;
            let encoded = Bytes::from(env.encode().unwrap());
            let decoded = Envelope::decode(&encoded).unwrap();
            prop_assert_eq!(&decoded, &env);
            // The shared decoding gives the same envelope, its body inside the element.
            let shared = Envelope::decode_shared(&encoded).unwrap();
            let within = encoded.as_ptr_range();
            prop_assert!(shared.body.is_empty() || within.contains(&shared.body.as_ptr()));
            prop_assert_eq!(shared, env);
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            // Whatever comes back, decoding must return rather than panic; a success must
            // at least carry a non-empty id.
            if let Ok(env) = Envelope::decode(&bytes) {
                prop_assert!(!env.id.as_str().is_empty());
            }
        }
    }

    #[test]
    fn typical_garbage_gives_typed_errors() {
        for bad in [
            &b""[..],
            b"   ",
            b"hello",
            b"{\"v\":1",
            b"{\"v\":2,\"id\":\"a\",\"type\":\"t\",\"sent\":1,\"body\":{}}",
            b"\xc1\xff",
        ] {
            match Envelope::decode(bad) {
                Err(Error::Decode { what, .. }) => assert_eq!(what, "envelope"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn an_escaped_type_is_decoded_too() {
        let json = br#"{"v":1,"id":"a","type":"caf\u00e9\"s","sent":1,"body":{}}"#;
        let element = Bytes::from_static(json);
        let incoming = Envelope::decode_incoming(&element).unwrap();
        assert!(matches!(incoming.message_type, Cow::Owned(_)));
        assert_eq!(Envelope::decode(json).unwrap().message_type, "caf\u{e9}\"s");
        let plain = Bytes::from_static(br#"{"v":1,"id":"a","type":"orders","sent":1,"body":{}}"#);
        let incoming = Envelope::decode_incoming(&plain).unwrap();
        assert!(matches!(incoming.message_type, Cow::Borrowed("orders")));
    }

    #[test]
    fn null_headers_are_no_headers() {
        let json = br#"{"v":1,"id":"a","type":"t","sent":1,"headers":null,"body":{}}"#;
        assert!(Envelope::decode(json).unwrap().headers.is_empty());
    }

    #[test]
    fn deep_nesting_is_refused_in_envelope_and_body() {
        // ~700 levels of one-entry maps: overflowed a debug build's stack before.
        let mut deep = b"\x81\xa1a".repeat(700);
        deep.push(0);
        let mut packed = b"\x87\xa1v\x01\xa2id\xa1x\xa4type\xa1t\xa4sent\x01\xa7headers\x80\xa4body\xc4\x00\xa5extra".to_vec();
        packed.extend_from_slice(&deep);
        match Envelope::decode(&packed) {
            Err(Error::Decode { reason, .. }) => assert!(reason.contains("nested"), "{reason}"),
            other => panic!("gave {other:?}"),
        }
        let body: Result<serde_json::Value> = Format::MessagePack.decode("t", &deep);
        assert!(matches!(body, Err(Error::Decode { .. })));
    }

    #[test]
    fn deep_json_is_refused_by_serde_json_without_a_scan() {
        // Far deeper than any stack survives if decoding recursed once per level.
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        let element = format!(r#"{{"v":1,"id":"a","type":"t","sent":1,"body":{deep}}}"#);
        let envelope = Envelope::decode_shared(&Bytes::from(element)).unwrap();
        let body: Result<serde_json::Value> = envelope.format.decode_body("t", &envelope.body);
        assert!(matches!(body, Err(Error::Decode { .. })), "{body:?}");
        let at_limit = format!("{}1{}", "[".repeat(MAX), "]".repeat(MAX));
        let body: Result<serde_json::Value> = Format::Json.decode_body("t", at_limit.as_bytes());
        assert!(body.is_ok(), "{body:?}");
        let element =
            format!(r#"{{"v":1,"id":"a","type":"t","sent":1,"headers":{deep},"body":1}}"#);
        assert!(Envelope::decode(element.as_bytes()).is_err());
    }

    const MAX: usize = crate::transport::MAX_NESTING - 1;

    #[test]
    fn json_envelope_is_plain_json_with_embedded_body() {
        let env = Envelope::new(
            "thumbnail-requested",
            Format::Json,
            &b"{\"image_id\":\"7\"}"[..],
        );
        let value: serde_json::Value = serde_json::from_slice(&env.encode().unwrap()).unwrap();
        assert_eq!(value["v"], 1);
        assert_eq!(value["type"], "thumbnail-requested");
        assert_eq!(value["body"]["image_id"], "7");
        assert_eq!(value["id"], env.id.as_str());
    }
}
