//! Byte-level JSON helpers: the nesting-depth guard (bus-core's), order-preserving object
//! readers that keep every value as raw text (numbers, `{}` and unknown members survive a
//! hop exactly as written; one owns its values, one borrows them from the text), a check
//! that every number is a finite double, a minifier and the unpaired-surrogate check of
//! poison records.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The JSON whitespace set (RFC 8259).
pub(crate) fn is_json_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// Whether `text` nests arrays or objects deeper than
/// [`bus_core::transport::MAX_NESTING`] (the bus's one depth guard; Python's decoder gives
/// up near 1,000 levels, serde_json at 128).
pub(crate) fn too_deep(text: &[u8]) -> bool {
    bus_core::transport::too_deep(bus_core::Format::Json, text)
}

/// The members of a JSON object in document order, duplicates included, each value as
/// its raw text.
pub(crate) struct Pairs(pub Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PairsVisitor;
        impl<'de> Visitor<'de> for PairsVisitor {
            type Value = Pairs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs, A::Error> {
                let mut pairs = Vec::new();
                while let Some(pair) = map.next_entry::<String, Box<RawValue>>()? {
                    pairs.push(pair);
                }
                Ok(Pairs(pairs))
            }
        }
        deserializer.deserialize_map(PairsVisitor)
    }
}

impl Pairs {
    /// Reads `text` as an object; `None` unless it is exactly one JSON object.
    pub(crate) fn parse(text: &str) -> Option<Pairs> {
        if too_deep(text.as_bytes()) {
            return None;
        }
        serde_json::from_str(text).ok()
    }

    /// Keeps the last value of a repeated name at the place of its first occurrence (what
    /// Python's `json.loads` does).
    pub(crate) fn dedup(self) -> Vec<(String, Box<RawValue>)> {
        let mut out: Vec<(String, Box<RawValue>)> = Vec::with_capacity(self.0.len());
        for (key, value) in self.0 {
            match out.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = value,
                None => out.push((key, value)),
            }
        }
        out
    }
}

/// A member name: borrowed from the text unless it holds an escape.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

/// [`Pairs`] borrowed from the text: the members of a JSON object in document order,
/// duplicates included, each value the raw text inside the element (no copy). What the
/// receive path reads an element with.
pub(crate) struct RawMembers<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for RawMembers<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = RawMembers<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMembers<'de>, A::Error> {
                let mut members = Vec::with_capacity(8);
                while let Some((name, value)) = map.next_entry::<Name<'de>, &'de RawValue>()? {
                    members.push((name.0, value));
                }
                Ok(RawMembers(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

impl<'a> RawMembers<'a> {
    /// Reads `text`, a member of an element whose depth [`too_deep`] already checked, as
    /// an object (no second scan); `None` unless it is exactly one JSON object.
    pub(crate) fn parse_member(text: &'a str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }

    /// Keeps the last value of a repeated name at the place of its first occurrence (what
    /// Python's `json.loads` does).
    pub(crate) fn dedup(self) -> Vec<(Cow<'a, str>, &'a RawValue)> {
        let mut out: Vec<(Cow<'a, str>, &'a RawValue)> = Vec::with_capacity(self.0.len());
        for (key, value) in self.0 {
            match out.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = value,
                None => out.push((key, value)),
            }
        }
        out
    }
}

/// Whether every number in the (valid) JSON `text` is a finite double, as BabelQueue
/// requires of `data`: serde_json refuses the others (`1e400`) when it reads a number's
/// value. Reads every value without building anything.
pub(crate) fn numbers_are_finite(text: &str) -> bool {
    struct Finite;
    impl<'de> Deserialize<'de> for Finite {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_any(FiniteVisitor)
        }
    }
    struct FiniteVisitor;
    impl<'de> Visitor<'de> for FiniteVisitor {
        type Value = Finite;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<Finite, E> {
            Ok(Finite)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Finite, E> {
            Ok(Finite)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Finite, E> {
            Ok(Finite)
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Finite, E> {
            if v.is_finite() {
                Ok(Finite)
            } else {
                Err(E::custom("not a finite double"))
            }
        }
        fn visit_str<E>(self, _: &str) -> Result<Finite, E> {
            Ok(Finite)
        }
        fn visit_unit<E>(self) -> Result<Finite, E> {
            Ok(Finite)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Finite, A::Error> {
            while seq.next_element::<Finite>()?.is_some() {}
            Ok(Finite)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Finite, A::Error> {
            while map.next_entry::<serde::de::IgnoredAny, Finite>()?.is_some() {}
            Ok(Finite)
        }
    }
    serde_json::from_str::<Finite>(text).is_ok()
}

/// Writes `{"k":v,...}` from raw members.
pub(crate) fn write_object(out: &mut Vec<u8>, members: &[(String, Box<RawValue>)]) {
    out.push(b'{');
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(out, key);
        out.push(b':');
        out.extend_from_slice(value.get().as_bytes());
    }
    out.push(b'}');
}

/// Writes a JSON string literal (non-ASCII kept as is, like Python's `ensure_ascii=False`).
pub(crate) fn write_string(out: &mut Vec<u8>, text: &str) {
    // Serializing a &str cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// A raw value from JSON text that is known to be valid.
pub(crate) fn raw(text: String) -> Box<RawValue> {
    RawValue::from_string(text).unwrap_or_else(|_| null())
}

/// The raw `null`.
pub(crate) fn null() -> Box<RawValue> {
    RawValue::NULL.to_owned()
}

/// `raw` without whitespace outside string literals, so a re-encoded envelope stays
/// compact; every other byte (numbers, escapes) is kept as written.
pub(crate) fn compact(raw: Box<RawValue>) -> Box<RawValue> {
    let text = raw.get();
    if !text.bytes().any(is_json_space) {
        return raw;
    }
    let (mut out, mut in_string, mut escaped) = (String::with_capacity(text.len()), false, false);
    for c in text.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            out.push(c);
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !(c.is_ascii() && is_json_space(c as u8)) {
            out.push(c);
        }
    }
    match RawValue::from_string(out) {
        Ok(compacted) => compacted,
        Err(_) => raw,
    }
}

/// Whether a string literal of the (syntactically valid) JSON `text` holds a `\uD800`-style
/// escape that is not half of a high+low pair.
pub(crate) fn has_unpaired_surrogate_escape(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    let mut pending_high = false;
    while i < bytes.len() {
        let b = bytes[i];
        if !in_string {
            if b == b'"' {
                in_string = true;
                pending_high = false;
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => {
                if pending_high {
                    return true;
                }
                in_string = false;
                i += 1;
            }
            b'\\' => {
                let next = bytes.get(i + 1).copied();
                let code = if next == Some(b'u') {
                    text.get(i + 2..i + 6)
                        .and_then(|hex| u16::from_str_radix(hex, 16).ok())
                } else {
                    None
                };
                let is_high = code.is_some_and(|c| (0xD800..=0xDBFF).contains(&c));
                let is_low = code.is_some_and(|c| (0xDC00..=0xDFFF).contains(&c));
                if (pending_high && !is_low) || (is_low && !pending_high) {
                    return true;
                }
                pending_high = is_high;
                i += if code.is_some() { 6 } else { 2 };
            }
            _ => {
                if pending_high {
                    return true;
                }
                i += 1;
            }
        }
    }
    pending_high
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_guard_counts_only_outside_strings() {
        let max = bus_core::transport::MAX_NESTING;
        let deep = "[".repeat(max + 1);
        assert!(too_deep(deep.as_bytes()));
        let ok = format!("{}{}", "[".repeat(max), "]".repeat(max));
        assert!(!too_deep(ok.as_bytes()));
        let quoted = format!("\"{}\"", "[".repeat(1000));
        assert!(!too_deep(quoted.as_bytes()));
    }

    #[test]
    fn raw_members_borrow_and_keep_order() {
        let text = r#"{"b":9007199254740993,"a\u0041":[],"b":1e400}"#;
        let members = RawMembers::parse_member(text).unwrap();
        let keys: Vec<_> = members.0.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, ["b", "aA", "b"]);
        assert!(matches!(members.0[0].0, Cow::Borrowed(_)));
        let within = text.as_bytes().as_ptr_range();
        assert!(within.contains(&members.0[1].1.get().as_ptr()));
        let dedup = members.dedup();
        assert_eq!(dedup[0].1.get(), "1e400");
        assert!(RawMembers::parse_member("[1]").is_none());
    }

    #[test]
    fn finite_numbers() {
        assert!(numbers_are_finite(
            r#"{"a":[1,-2.5e10,9007199254740993,{"b":null}],"c":"1e400"}"#
        ));
        assert!(!numbers_are_finite(r#"{"a":[1e400]}"#));
        assert!(!numbers_are_finite(r#"{"a":{"b":-1e999}}"#));
    }

    #[test]
    fn pairs_keep_order_duplicates_and_raw_numbers() {
        let pairs = Pairs::parse(r#"{"b":9007199254740993,"a":[],"b":1e400}"#).unwrap();
        let keys: Vec<_> = pairs.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["b", "a", "b"]);
        let dedup = pairs.dedup();
        assert_eq!(dedup[0].1.get(), "1e400");
        assert_eq!(dedup[1].1.get(), "[]");
        assert!(Pairs::parse("[1]").is_none());
        assert!(Pairs::parse("{} x").is_none());
    }

    #[test]
    fn compact_keeps_strings() {
        let v = compact(raw(r#"{ "a" : "x  y", "b" : [ 1 , 2 ] }"#.into()));
        assert_eq!(v.get(), r#"{"a":"x  y","b":[1,2]}"#);
    }

    #[test]
    fn surrogates() {
        assert!(!has_unpaired_surrogate_escape(r#"{"a":"\ud83d\ude00"}"#));
        assert!(has_unpaired_surrogate_escape(r#"{"a":"\ud83d"}"#));
        assert!(has_unpaired_surrogate_escape(r#"{"a":"\ude00x"}"#));
        assert!(!has_unpaired_surrogate_escape(r#"{"a":"\\ud83d"}"#));
    }
}
