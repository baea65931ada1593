//! A nesting limit checked before a recursive decoder sees the bytes.
//!
//! serde's decoders recurse once per nesting level, and a debug build's frames are large:
//! 3 KB of nested MessagePack maps overflowed a 2 MiB worker stack and aborted the whole
//! process (rmp-serde only stops at 1,024 levels). Both formats are checked against one
//! limit here, with an iterative scan, so every build refuses the same inputs.

use crate::Format;

/// Deepest nesting of arrays and maps accepted in an envelope or a body. Far below what
/// the smallest stack survives in a debug build, far above what real messages use.
pub const MAX_NESTING: usize = 128;

/// Whether `bytes` nests arrays and objects (maps) deeper than [`MAX_NESTING`]: the one
/// depth guard of the bus, for wire formats and transports that decode foreign elements
/// (BabelQueue's envelope) as well as for the native one. A linear scan, no recursion;
/// malformed input is not refused here (the decoder that runs next reports it).
pub fn too_deep(format: Format, bytes: &[u8]) -> bool {
    check(format, bytes).is_err()
}

/// `Err` with a reason when `bytes` nests deeper than [`MAX_NESTING`]. Malformed input
/// passes: the decoder that runs next reports it.
pub(crate) fn check(format: Format, bytes: &[u8]) -> Result<(), String> {
    let depth = match format {
        Format::Json => json_depth(bytes),
        Format::MessagePack => msgpack_depth(bytes),
    };
    if depth > MAX_NESTING {
        Err(format!(
            "nested deeper than {MAX_NESTING} levels (refused before decoding)"
        ))
    } else {
        Ok(())
    }
}

/// Deepest nesting of `{`/`[` outside strings, stopping once past the limit.
fn json_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
                if deepest > MAX_NESTING {
                    break;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Deepest nesting of the first MessagePack value, walked with an explicit stack of the
/// items each open container still holds.
fn msgpack_depth(bytes: &[u8]) -> usize {
    let mut open: Vec<u64> = Vec::new();
    let mut deepest = 0;
    let mut pos = 0;
    loop {
        let Some(&marker) = bytes.get(pos) else {
            return deepest; // truncated: the decoder says so
        };
        pos += 1;
        let be = |pos: usize, n: usize| -> Option<u64> {
            let slice = bytes.get(pos..pos + n)?;
            Some(slice.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
        };
        // (items in a container, or bytes to skip for a scalar)
        let (items, skip): (Option<u64>, u64) = match marker {
            0x80..=0x8f => (Some(2 * u64::from(marker & 0x0f)), 0),
            0x90..=0x9f => (Some(u64::from(marker & 0x0f)), 0),
            0xa0..=0xbf => (None, u64::from(marker & 0x1f)),
            0xc4 | 0xd9 => (None, 1 + be(pos, 1).unwrap_or(0)),
            0xc5 | 0xda => (None, 2 + be(pos, 2).unwrap_or(0)),
            0xc6 | 0xdb => (None, 4 + be(pos, 4).unwrap_or(0)),
            0xc7 => (None, 2 + be(pos, 1).unwrap_or(0)),
            0xc8 => (None, 3 + be(pos, 2).unwrap_or(0)),
            0xc9 => (None, 5 + be(pos, 4).unwrap_or(0)),
            0xca | 0xce | 0xd2 => (None, 4),
            0xcb | 0xcf | 0xd3 => (None, 8),
            0xcc | 0xd0 => (None, 1),
            0xcd | 0xd1 => (None, 2),
            0xd4 => (None, 2),
            0xd5 => (None, 3),
            0xd6 => (None, 5),
            0xd7 => (None, 9),
            0xd8 => (None, 17),
            0xdc => (Some(be(pos, 2).unwrap_or(0)), 2),
            0xdd => (Some(be(pos, 4).unwrap_or(0)), 4),
            0xde => (Some(2 * be(pos, 2).unwrap_or(0)), 2),
            0xdf => (Some(2 * be(pos, 4).unwrap_or(0)), 4),
            _ => (None, 0), // fixints, nil, booleans, the unused 0xc1
        };
        pos = pos.saturating_add(usize::try_from(skip).unwrap_or(usize::MAX));
        match items {
            Some(n) if n > 0 => {
                open.push(n);
                deepest = deepest.max(open.len());
                if deepest > MAX_NESTING {
                    return deepest;
                }
                continue;
            }
            _ => {}
        }
        // One complete value: count it against the containers it closes.
        loop {
            match open.last_mut() {
                None => return deepest,
                Some(left) => {
                    *left -= 1;
                    if *left > 0 {
                        break;
                    }
                    open.pop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested_msgpack(levels: usize) -> Vec<u8> {
        let mut bytes = b"\x81\xa1a".repeat(levels);
        bytes.push(0);
        bytes
    }

    #[test]
    fn msgpack_depth_is_measured() {
        assert_eq!(msgpack_depth(&nested_msgpack(3)), 3);
        assert_eq!(msgpack_depth(b"\x93\x01\x91\x02\x03"), 2);
        assert_eq!(msgpack_depth(b"\x01"), 0);
        // A string holding container markers does not count.
        assert_eq!(msgpack_depth(b"\xa3\x81\x81\x81"), 0);
        assert!(check(Format::MessagePack, &nested_msgpack(700)).is_err());
        assert!(check(Format::MessagePack, &nested_msgpack(MAX_NESTING)).is_ok());
    }

    #[test]
    fn json_depth_ignores_strings() {
        assert_eq!(json_depth(br#"{"a":[1,{"b":"[[[{{"}]}"#), 3);
        assert_eq!(json_depth(br#"{"a":"\"[[["}"#), 1);
        let deep = format!("{}1{}", "[".repeat(700), "]".repeat(700));
        assert!(check(Format::Json, deep.as_bytes()).is_err());
    }

    #[test]
    fn real_values_pass() {
        let value = serde_json::json!({"a": [1, 2, {"b": null}], "c": "x"});
        let packed = rmp_serde::to_vec_named(&value).unwrap();
        assert_eq!(msgpack_depth(&packed), 3);
        assert_eq!(json_depth(value.to_string().as_bytes()), 3);
    }
}
