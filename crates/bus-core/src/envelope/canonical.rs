//! The JSON envelope in the form a bus writes it, written and read without serde's
//! per-field work.
//!
//! Nearly every element a consumer reads was written by a bus:
//! `{"v":1,"id":"…","type":"…","sent":…,"headers":{…},"body":…}`, fields in that order,
//! no whitespace, `headers` only when there are some. serde_json writes and reads such a
//! head one field at a time through its serializers and visitors, escaping or scanning
//! each key and value (under `valgrind --tool=callgrind`, about 2,700 instructions of the
//! 3,700 an envelope's decoding took; docs/performance.md).
//!
//! [`read`] takes only that exact form, with an id and a type of printable ASCII without
//! `"` or `\` ([`plain`]), which serde_json reads as the same bytes. The headers and the
//! body are read by serde_json itself (the body as the same `RawValue`, so it is checked
//! exactly as before). Anything else, whitespace, another order, an unknown field, an
//! escape, is `None`, and the caller reads the element with serde_json as a whole: this
//! reader never accepts an element that serde_json would read differently or refuse.
//! [`write_head`] writes the same form, byte for byte what serde_json writes.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Headers, JsonHead, WireHead};

/// Whether serde_json writes and reads `b`, in a string, as itself: printable ASCII other
/// than `"` and `\`.
fn plain(b: u8) -> bool {
    matches!(b, 0x20..=0x7e) && b != b'"' && b != b'\\'
}

/// Writes `head` as serde_json does, without its closing `}`: by hand when its id and type
/// are [`plain`], with serde_json otherwise.
pub(super) fn write_head(out: &mut Vec<u8>, head: &JsonHead<'_>) -> serde_json::Result<()> {
    if !(head.id.bytes().all(plain) && head.message_type.bytes().all(plain)) {
        serde_json::to_writer(&mut *out, head)?;
        out.pop(); // the closing '}'
        return Ok(());
    }
    out.extend_from_slice(br#"{"v":"#);
    serde_json::to_writer(&mut *out, &head.v)?;
    out.extend_from_slice(br#","id":""#);
    out.extend_from_slice(head.id.as_bytes());
    out.extend_from_slice(br#"","type":""#);
    out.extend_from_slice(head.message_type.as_bytes());
    out.extend_from_slice(br#"","sent":"#);
    serde_json::to_writer(&mut *out, &head.sent)?;
    if !head.headers.is_empty() {
        out.extend_from_slice(br#","headers":"#);
        serde_json::to_writer(&mut *out, head.headers)?;
    }
    Ok(())
}

/// Reads `bytes` if it is an envelope in the form a bus writes; `None` otherwise.
pub(super) fn read(bytes: &[u8]) -> Option<WireHead<'_>> {
    let mut reader = Reader { bytes, at: 0 };
    reader.literal(br#"{"v":"#)?;
    let v = u32::try_from(reader.integer()?).ok()?;
    reader.literal(br#","id":"#)?;
    let id = reader.plain_string()?;
    reader.literal(br#","type":"#)?;
    let message_type = reader.plain_string()?;
    reader.literal(br#","sent":"#)?;
    let sent = reader.integer()?;
    let mut headers = Headers::new();
    if reader.literal(br#","headers":"#).is_some() {
        // (`null` means none, as `null_as_none` reads it.)
        headers = reader.value::<Option<Headers>>()?.unwrap_or_default();
    }
    reader.literal(br#","body":"#)?;
    let body = reader.value::<&RawValue>()?.get().as_bytes();
    reader.whitespace();
    reader.literal(b"}")?;
    reader.whitespace();
    (reader.at == bytes.len()).then_some(WireHead {
        v,
        id: Cow::Borrowed(id),
        message_type: Cow::Borrowed(message_type),
        sent,
        headers,
        body,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at..]
    }

    fn literal(&mut self, text: &[u8]) -> Option<()> {
        self.rest().starts_with(text).then(|| self.at += text.len())
    }

    /// A JSON integer as serde_json reads a `u64`: `0`, or digits without a leading zero.
    fn integer(&mut self) -> Option<u64> {
        let rest = self.rest();
        let (mut n, mut digits) = (0u64, 0);
        for &b in rest.iter().take_while(|b| b.is_ascii_digit()) {
            n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            digits += 1;
        }
        if digits == 0 || (digits > 1 && rest[0] == b'0') {
            return None;
        }
        self.at += digits;
        Some(n)
    }

    /// A string of [`plain`] bytes: its text is its bytes.
    fn plain_string(&mut self) -> Option<&'a str> {
        let rest = self.rest().strip_prefix(b"\"")?;
        for (len, &b) in rest.iter().enumerate() {
            if b == b'"' {
                self.at += len + 2;
                return std::str::from_utf8(&rest[..len]).ok();
            }
            if !plain(b) {
                return None;
            }
        }
        None
    }

    /// One JSON value, read by serde_json as `T`.
    fn value<T: Deserialize<'a>>(&mut self) -> Option<T> {
        let mut values = serde_json::Deserializer::from_slice(self.rest()).into_iter::<T>();
        let value = values.next()?.ok()?;
        self.at += values.byte_offset();
        Some(value)
    }

    /// JSON's whitespace, which serde_json allows around values.
    fn whitespace(&mut self) {
        let skipped = self
            .rest()
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\n' | b'\t' | b'\r'))
            .count();
        self.at += skipped;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{Envelope, JsonEnvelope, JsonHead};
    use crate::{Format, MessageId};
    use proptest::prelude::*;

    /// What serde_json reads of `bytes` as a whole, in the reader's terms.
    fn by_serde(bytes: &[u8]) -> Option<WireHead<'_>> {
        serde_json::from_slice::<JsonEnvelope<'_>>(bytes)
            .ok()
            .map(WireHead::from)
    }

    fn json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(serde_json::Value::from),
            ".{0,16}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                proptest::collection::btree_map(".{0,8}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// An envelope as a bus writes it: a printable id and type are read by the reader.
    fn written() -> impl Strategy<Value = (Vec<u8>, bool)> {
        (
            prop_oneof!["[ -~]{1,30}", ".{1,12}"],
            prop_oneof!["[ -~]{1,30}", ".{1,12}"],
            any::<u64>(),
            proptest::collection::btree_map(".{0,12}", ".{0,24}", 0..3),
            json(),
        )
            .prop_map(|(id, message_type, sent, headers, body)| {
                let readable = id.bytes().all(plain) && message_type.bytes().all(plain);
                let mut envelope = Envelope::new(
                    message_type,
                    Format::Json,
                    serde_json::to_vec(&body).unwrap(),
                );
                envelope.id = MessageId::from(id);
                envelope.sent_at_ms = sent;
                envelope.headers = headers;
                (envelope.encode().unwrap(), readable)
            })
    }

    /// Edits that take an element out of the written form, or break it.
    fn edited() -> impl Strategy<Value = Vec<u8>> {
        (written(), any::<prop::sample::Index>(), 0u8..7, any::<u8>()).prop_map(
            |((mut bytes, _), at, edit, byte)| {
                let i = at.index(bytes.len() + 1);
                match edit {
                    0 => bytes.insert(i, b' '),
                    1 => bytes.insert(i, byte),
                    2 if i < bytes.len() => bytes[i] = byte,
                    3 => bytes.truncate(i),
                    4 => bytes.extend_from_slice(b" \n"),
                    5 => {
                        bytes.pop();
                        bytes.extend_from_slice(br#","extra":[1,{"a":2}]}"#);
                    }
                    _ => bytes
                        .splice(i..i, br#""x":1,"#.iter().copied())
                        .for_each(drop),
                }
                bytes
            },
        )
    }

    proptest! {
        #[test]
        fn a_head_is_written_as_serde_json_writes_it(
            id in prop_oneof!["[ -~]{1,30}", ".{1,12}"],
            message_type in prop_oneof!["[ -~]{1,30}", ".{1,12}"],
            v in any::<u32>(),
            sent in any::<u64>(),
            headers in proptest::collection::btree_map(".{0,12}", ".{0,24}", 0..3),
        ) {
            let head = JsonHead { v, id: &id, message_type: &message_type, sent, headers: &headers };
            let mut by_hand = Vec::new();
            write_head(&mut by_hand, &head).unwrap();
            let mut by_serde = serde_json::to_vec(&head).unwrap();
            by_serde.pop();
            prop_assert_eq!(String::from_utf8_lossy(&by_hand), String::from_utf8_lossy(&by_serde));
        }

        #[test]
        fn a_written_envelope_is_read_as_serde_json_reads_it((bytes, readable) in written()) {
            let read = read(&bytes);
            prop_assert_eq!(read.is_some(), readable, "{}", String::from_utf8_lossy(&bytes));
            if let Some(read) = read {
                prop_assert_eq!(Some(read), by_serde(&bytes));
            }
        }

        #[test]
        fn an_edited_envelope_is_read_as_serde_json_reads_it_or_left_to_it(bytes in edited()) {
            if let Some(read) = read(&bytes) {
                prop_assert_eq!(Some(read), by_serde(&bytes), "{}", String::from_utf8_lossy(&bytes));
            }
        }
    }

    #[test]
    fn only_the_written_form_is_read() {
        let read_ok = |text: &str| read(text.as_bytes()).is_some();
        assert!(read_ok(r#"{"v":1,"id":"a","type":"t","sent":0,"body":{}}"#));
        assert!(read_ok(
            r#"{"v":1,"id":"a","type":"t","sent":0,"headers":null,"body":[1] } "#
        ));
        // Serde reads these, the reader leaves them to it:
        for other in [
            r#" {"v":1,"id":"a","type":"t","sent":0,"body":{}}"#,
            r#"{"v":1,"type":"t","id":"a","sent":0,"body":{}}"#,
            r#"{"v":1,"id":"\u0041","type":"t","sent":0,"body":{}}"#,
            r#"{"v":1,"id":"é","type":"t","sent":0,"body":{}}"#,
            r#"{"v":1,"id":"a","type":"t","sent":0,"body":{},"more":1}"#,
            r#"{"v":1,"id":"a","type":"t","sent":1.0,"body":{}}"#,
        ] {
            assert!(!read_ok(other), "{other}");
        }
        // Serde refuses these, and so does the reader:
        for bad in [
            r#"{"v":01,"id":"a","type":"t","sent":0,"body":{}}"#,
            r#"{"v":4294967296,"id":"a","type":"t","sent":0,"body":{}}"#,
            r#"{"v":1,"id":"a","type":"t","sent":18446744073709551616,"body":{}}"#,
            r#"{"v":1,"id":"a","type":"t","sent":0,"body":{]}"#,
            r#"{"v":1,"id":"a","type":"t","sent":0,"body":{}}x"#,
            r#"{"v":1,"id":"a","type":"t","sent":0,"body":{}"#,
            r#"{"v":1,"id":"a","type":"t","sent":0,"body":"\x"}"#,
        ] {
            assert!(!read_ok(bad), "{bad}");
            assert!(
                serde_json::from_str::<JsonEnvelope<'_>>(bad).is_err(),
                "{bad}"
            );
        }
    }
}
