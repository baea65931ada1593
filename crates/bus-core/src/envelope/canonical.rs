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
//! [`read`] takes only that exact form, with an id and a type that need no escape, which
//! serde_json reads as their bytes. The headers are read by serde_json itself. The body is
//! checked as serde_json checks the `RawValue` it reads it as (any JSON value, as UTF-8),
//! by a checker that builds nothing and scans strings eight bytes at a time: serde_json's
//! check took ~1,000 instructions of the ~2,500 a decoding took, the body's own
//! `Deserialize` then reads it again. Anything else, whitespace around the head, another
//! order, an unknown field, an escape in the id, a body nested deeper than [`DEPTH`], is
//! `None`, and the caller reads the element with serde_json as a whole: this reader never
//! accepts an element that serde_json would read differently or refuse. [`write_head`]
//! writes the same form, byte for byte what serde_json writes.

use std::borrow::Cow;

use serde::Deserialize;

use super::{Headers, JsonHead, WireHead};
use crate::json_writer::{self, unescaped_run};

/// How deeply a body's containers are followed; deeper ones are left to serde_json.
const DEPTH: u32 = 64;

/// Writes `head` as serde_json does, without its closing `}`: the keys as written, the id
/// and the type by [`json_writer::string`] (an id's bytes without the UTF-8 check
/// `MessageId::as_str` makes).
pub(super) fn write_head(out: &mut Vec<u8>, head: &JsonHead<'_>) -> serde_json::Result<()> {
    out.extend_from_slice(br#"{"v":"#);
    serde_json::to_writer(&mut *out, &head.v)?;
    out.extend_from_slice(br#","id":"#);
    if !json_writer::quoted(out, head.id.as_bytes()) {
        json_writer::string(out, head.id.as_str());
    }
    out.extend_from_slice(br#","type":"#);
    json_writer::string(out, head.message_type);
    out.extend_from_slice(br#","sent":"#);
    serde_json::to_writer(&mut *out, &head.sent)?;
    if !head.headers.is_empty() {
        out.extend_from_slice(br#","headers":"#);
        json_writer::write(out, head.headers)?;
    }
    Ok(())
}

/// Reads `bytes` if it is an envelope in the form a bus writes; `None` otherwise.
pub(super) fn read(bytes: &[u8]) -> Option<WireHead<'_>> {
    let mut reader = Reader {
        bytes,
        at: 0,
        ascii: true,
    };
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
    let body = reader.raw_value()?;
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
    /// Whether the strings read since [`Reader::raw_value`] began were all ASCII.
    ascii: bool,
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

    /// A string without escapes, as serde_json reads one: its text is its bytes, which
    /// must be UTF-8.
    fn plain_string(&mut self) -> Option<&'a str> {
        let rest = self.rest().strip_prefix(b"\"")?;
        let (len, _) = unescaped_run(rest);
        (rest.get(len) == Some(&b'"')).then_some(())?;
        self.at += len + 2;
        std::str::from_utf8(&rest[..len]).ok()
    }

    /// The rest of a string whose opening `"` was read, as serde_json checks it: no
    /// control characters, escapes that JSON has (a `\u` escape's code point is not
    /// looked at).
    fn string_rest(&mut self) -> Option<()> {
        loop {
            let (run, ascii) = unescaped_run(self.rest());
            self.at += run;
            self.ascii &= ascii;
            match *self.rest().first()? {
                b'"' => {
                    self.at += 1;
                    return Some(());
                }
                b'\\' => {
                    let escaped = *self.rest().get(1)?;
                    self.at += 2;
                    match escaped {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            let hex = self.rest().get(..4)?;
                            hex.iter().all(u8::is_ascii_hexdigit).then_some(())?;
                            self.at += 4;
                        }
                        _ => return None,
                    }
                }
                _ => return None, // a control character
            }
        }
    }

    /// A number as JSON writes one (serde_json checks the same grammar).
    fn number(&mut self) -> Option<()> {
        self.byte(b'-');
        let digits = |reader: &mut Self| {
            let n = reader
                .rest()
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            reader.at += n;
            n
        };
        match self.rest().first()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => _ = digits(self),
            _ => return None,
        }
        if self.byte(b'.') && digits(self) == 0 {
            return None;
        }
        if matches!(self.rest().first(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.rest().first(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return None;
            }
        }
        Some(())
    }

    /// An object's key and its colon, after the whitespace before the key.
    fn key(&mut self) -> Option<()> {
        self.whitespace();
        self.byte(b'"').then_some(())?;
        self.string_rest()?;
        self.whitespace();
        self.byte(b':').then_some(())
    }

    /// One JSON value (after whitespace), checked as serde_json checks a `RawValue`, and
    /// its bytes, without building anything. `None` for what is not one, and for one
    /// nested deeper than [`DEPTH`], which serde_json reads (it is left to it).
    fn raw_value(&mut self) -> Option<&'a [u8]> {
        self.whitespace();
        let start = self.at;
        self.ascii = true;
        // One bit per open container, the innermost lowest: set for an object.
        let (mut open, mut depth) = (0u64, 0u32);
        loop {
            let opened = match *self.rest().first()? {
                container @ (b'{' | b'[') => {
                    if depth == DEPTH {
                        return None;
                    }
                    let object = container == b'{';
                    self.at += 1;
                    self.whitespace();
                    if self.byte(if object { b'}' } else { b']' }) {
                        false // empty: a whole value
                    } else {
                        (open, depth) = (open << 1 | u64::from(object), depth + 1);
                        if object {
                            self.key()?;
                        }
                        true
                    }
                }
                b'"' => {
                    self.at += 1;
                    self.string_rest()?;
                    false
                }
                b't' => self.literal(b"true").map(|()| false)?,
                b'f' => self.literal(b"false").map(|()| false)?,
                b'n' => self.literal(b"null").map(|()| false)?,
                b'-' | b'0'..=b'9' => self.number().map(|()| false)?,
                _ => return None,
            };
            if !opened {
                // A whole value: close what ends here, until a comma calls for the next.
                loop {
                    if depth == 0 {
                        // (Bytes past ASCII are only in strings: not there, none.)
                        let raw = &self.bytes[start..self.at];
                        return (self.ascii || std::str::from_utf8(raw).is_ok()).then_some(raw);
                    }
                    self.whitespace();
                    let object = open & 1 == 1;
                    match (*self.rest().first()?, object) {
                        (b',', _) => {
                            self.at += 1;
                            if object {
                                self.key()?;
                            }
                            break;
                        }
                        (b'}', true) | (b']', false) => {
                            self.at += 1;
                            (open, depth) = (open >> 1, depth - 1);
                        }
                        _ => return None,
                    }
                }
            }
            self.whitespace();
        }
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
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// Whether the next byte is `b`, taken if so.
    fn byte(&mut self, b: u8) -> bool {
        let next = self.bytes.get(self.at) == Some(&b);
        self.at += usize::from(next);
        next
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

    /// Whether serde_json writes `text` in a string as its bytes.
    fn unescaped(text: &str) -> bool {
        unescaped_run(text.as_bytes()).0 == text.len()
    }

    /// An envelope as a bus writes it: an id and a type without escapes are read by the
    /// reader.
    fn written() -> impl Strategy<Value = (Vec<u8>, bool)> {
        (
            prop_oneof!["[ -~]{1,30}", ".{1,12}"],
            prop_oneof!["[ -~]{1,30}", ".{1,12}"],
            any::<u64>(),
            proptest::collection::btree_map(".{0,12}", ".{0,24}", 0..3),
            json(),
        )
            .prop_map(|(id, message_type, sent, headers, body)| {
                let readable = unescaped(&id) && unescaped(&message_type);
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
            let id = MessageId::from(id);
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

    /// Bodies made of JSON's pieces, valid or not, with the cases a checker gets wrong:
    /// numbers, escapes, control characters, bytes that are not UTF-8, whitespace.
    fn body_text() -> impl Strategy<Value = Vec<u8>> {
        let pieces: Vec<&[u8]> = vec![
            b"{",
            b"}",
            b"[",
            b"]",
            b",",
            b":",
            br#""k""#,
            br#""a\"b\\c\/\b\f\n\r\t""#,
            br#""\u00e9\uD800\uABcd""#,
            br#""\u12G4""#,
            br#""\x""#,
            b"\"\t\"",
            b"\"\x7f\"",
            "\"é\"".as_bytes(),
            b"\"\xff\"",
            b"\"\xc3\"",
            b"\xc3\xa9",
            br#""0123456789abcdefghijklmnopqrstuvwxyz""#,
            b"\"",
            b"0",
            b"-0",
            b"01",
            b"12.50e+3",
            b"-1E-9",
            b"1.",
            b".5",
            b"1e",
            b"1e+",
            b"-",
            b"true",
            b"false",
            b"null",
            b"nul",
            b" ",
            b"\n\t\r",
            b"\x0c",
        ];
        let piece = proptest::sample::select(pieces);
        let soup = proptest::collection::vec(piece.clone(), 1..24).prop_map(|p| p.concat());
        // Valid JSON, compact or pretty, with one piece put in, put over a byte, or a byte
        // taken out.
        let edited = (
            json(),
            any::<bool>(),
            any::<prop::sample::Index>(),
            0u8..3,
            piece,
        )
            .prop_map(|(value, pretty, at, edit, piece)| {
                let mut text = if pretty {
                    serde_json::to_vec_pretty(&value).unwrap()
                } else {
                    serde_json::to_vec(&value).unwrap()
                };
                let i = at.index(text.len());
                match edit {
                    0 => _ = text.splice(i..i, piece.iter().copied()),
                    1 => _ = text.splice(i..=i, piece.iter().copied()),
                    _ => _ = text.remove(i),
                }
                text
            });
        prop_oneof![soup, edited]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Every body serde_json takes is taken, as the same bytes, and no other.
        #[test]
        fn a_body_is_checked_as_serde_json_checks_it(body in body_text()) {
            let mut bytes = br#"{"v":1,"id":"a","type":"t","sent":0,"body":"#.to_vec();
            bytes.extend_from_slice(&body);
            bytes.push(b'}');
            prop_assert_eq!(read(&bytes), by_serde(&bytes), "{}", String::from_utf8_lossy(&bytes));
        }
    }

    #[test]
    fn a_body_nested_deeper_than_followed_is_left_to_serde_json() {
        let nested = |depth: usize| {
            let mut bytes = br#"{"v":1,"id":"a","type":"t","sent":0,"body":"#.to_vec();
            bytes.extend(std::iter::repeat_n(b'[', depth));
            bytes.extend(std::iter::repeat_n(b']', depth));
            bytes.push(b'}');
            bytes
        };
        let followed = nested(DEPTH as usize);
        assert_eq!(read(&followed), by_serde(&followed));
        assert!(read(&followed).is_some());
        let deeper = nested(DEPTH as usize + 1);
        assert!(read(&deeper).is_none());
        assert!(by_serde(&deeper).is_some());
    }

    #[test]
    fn only_the_written_form_is_read() {
        let read_ok = |text: &str| read(text.as_bytes()).is_some();
        assert!(read_ok(r#"{"v":1,"id":"a","type":"t","sent":0,"body":{}}"#));
        assert!(read_ok(
            r#"{"v":1,"id":"a","type":"t","sent":0,"headers":null,"body":[1] } "#
        ));
        assert!(read_ok(r#"{"v":1,"id":"é","type":"t","sent":0,"body":{}}"#));
        // Serde reads these, the reader leaves them to it:
        for other in [
            r#" {"v":1,"id":"a","type":"t","sent":0,"body":{}}"#,
            r#"{"v":1,"type":"t","id":"a","sent":0,"body":{}}"#,
            r#"{"v":1,"id":"\u0041","type":"t","sent":0,"body":{}}"#,
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
