//! The legacy layout's header frame `{"__bq_frame":1,"headers":{...},"body":"<envelope>"}`
//! (BabelQueue ADR-0028): out-of-band headers beside the frozen envelope. A send without
//! headers stores the bare envelope, byte for byte.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::Serialize;

use crate::json::Pairs;

/// Message headers, string to string.
pub type Headers = BTreeMap<String, String>;

/// The reserved member that marks a frame (a frozen envelope never carries it).
pub const FRAME_KEY: &str = "__bq_frame";
const FRAME_VERSION: u32 = 1;

/// Headers without blank names or values (BabelQueue drops those).
pub fn sanitize(headers: &Headers) -> Headers {
    headers
        .iter()
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[derive(Serialize)]
struct Frame<'a> {
    #[serde(rename = "__bq_frame")]
    version: u32,
    headers: &'a Headers,
    body: &'a str,
}

/// The value to store for `body` with `headers`: the bare body when no header survives
/// [`sanitize`], else the frame.
pub fn frame(body: &[u8], headers: &Headers) -> Vec<u8> {
    let clean = sanitize(headers);
    let text = match std::str::from_utf8(body) {
        Ok(text) if !clean.is_empty() => text,
        // A frame carries text only; a body that is not UTF-8 (poison) stays bare.
        _ => return body.to_vec(),
    };
    serde_json::to_vec(&Frame {
        version: FRAME_VERSION,
        headers: &clean,
        body: text,
    })
    .unwrap_or_else(|_| body.to_vec())
}

/// Whether a stored value may be a frame: the cheap test before any parse (the common
/// case is a bare envelope).
fn may_be_framed(stored: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(stored).ok()?;
    (text.starts_with('{') && text.contains("\"__bq_frame\"")).then_some(text)
}

/// [`unframe`] of a value held as `Bytes`: a bare envelope (the common case) comes back
/// as the same buffer, not a copy.
pub(crate) fn unframe_shared(stored: &Bytes) -> (Bytes, Headers) {
    if may_be_framed(stored).is_none() {
        return (stored.clone(), Headers::new());
    }
    let (body, headers) = unframe(stored);
    (Bytes::from(body), headers)
}

/// Reads a stored legacy value: `(body, headers)`. Anything that is not a frame (a bare
/// envelope, garbage) is returned verbatim with no headers.
pub fn unframe(stored: &[u8]) -> (Vec<u8>, Headers) {
    let bare = || (stored.to_vec(), Headers::new());
    let Some(text) = may_be_framed(stored) else {
        return bare();
    };
    let Some(pairs) = Pairs::parse(text) else {
        return bare();
    };
    let members = pairs.dedup();
    let get = |name: &str| {
        members
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.get())
    };
    let marked = get(FRAME_KEY)
        .is_some_and(|v| !matches!(v, "null" | "false" | "0" | "\"\"" | "0.0" | "[]" | "{}"));
    let body = get("body").and_then(|v| serde_json::from_str::<String>(v).ok());
    let (true, Some(body)) = (marked, body) else {
        return bare();
    };
    let mut headers = Headers::new();
    if let Some(raw) = get("headers").and_then(Pairs::parse) {
        for (key, value) in raw.dedup() {
            let text = value.get();
            // Python keeps any non-null value as str(value); strings and numbers are what
            // SDKs write, other values are dropped here.
            let value = if text.starts_with('"') {
                serde_json::from_str::<String>(text).ok()
            } else if text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
                Some(text.to_owned())
            } else {
                None
            };
            if let Some(value) = value {
                headers.insert(key, value);
            }
        }
    }
    (body.into_bytes(), sanitize(&headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_headers_is_the_bare_body() {
        let body = br#"{"job":"urn:a","attempts":0}"#;
        assert_eq!(frame(body, &Headers::new()), body.to_vec());
        let blank: Headers = [("a".to_owned(), String::new())].into();
        assert_eq!(frame(body, &blank), body.to_vec());
    }

    #[test]
    fn frame_round_trips() {
        let body = br#"{"job":"urn:a","data":{"x":"\"/"},"attempts":0}"#;
        let headers: Headers = [("traceparent".to_owned(), "00-abc-01".to_owned())].into();
        let stored = frame(body, &headers);
        assert!(stored
            .starts_with(br#"{"__bq_frame":1,"headers":{"traceparent":"00-abc-01"},"body":""#));
        assert_eq!(unframe(&stored), (body.to_vec(), headers));
    }

    #[test]
    fn lookalikes_are_not_frames() {
        for value in [
            &br#"{"__bq_frame":0,"body":"x"}"#[..],
            br#"{"__bq_frame":1,"body":{}}"#,
            br#"{"__bq_frame":1}"#,
            br#"not json "__bq_frame""#,
            b"\xff\xfe",
        ] {
            assert_eq!(unframe(value), (value.to_vec(), Headers::new()));
        }
    }
}
