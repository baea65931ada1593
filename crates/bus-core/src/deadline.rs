//! The grammar of the [`headers::EXPIRES_AT`](crate::headers::EXPIRES_AT) value
//! (docs/wire-format.md, "Expiry"): milliseconds since the Unix epoch as the canonical
//! decimal of an unsigned 64-bit integer, `0|[1-9][0-9]*`, at most 20 digits and at most
//! 18446744073709551615. One reader for every path, so that two consumers of a mixed
//! fleet never disagree on one message: anything else is malformed, and the message is
//! dead-lettered as `undecodable`.

/// The most digits a deadline has (`u64::MAX` has 20).
const MAX_DIGITS: usize = 20;

/// The deadline `text` spells, if it follows the grammar exactly: no sign, no space, no
/// leading zero, not empty, nothing but ASCII digits, no larger than `u64::MAX`.
pub(crate) fn parse(text: &str) -> Option<u64> {
    let canonical = match text.as_bytes() {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if !canonical || text.len() > MAX_DIGITS {
        return None;
    }
    // Canonical digits: only a value past `u64::MAX` fails here.
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_edges_of_the_grammar() {
        for (text, read) in [
            ("0", Some(0)),
            ("1712345708901", Some(1_712_345_708_901)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("99999999999999999999", None),
            ("100000000000000000000", None),
            ("", None),
            (" 1712345708901", None),
            ("1712345708901 ", None),
            ("\t1", None),
            ("+1712345708901", None),
            ("-1", None),
            ("-0", None),
            ("01712345708901", None),
            ("00", None),
            ("1_000", None),
            ("1e3", None),
            ("1.0", None),
            ("0x10", None),
            ("\u{ff11}", None),
        ] {
            assert_eq!(parse(text), read, "{text:?}");
        }
    }

    proptest! {
        #[test]
        fn every_u64_written_in_decimal_is_read_back(value: u64) {
            prop_assert_eq!(parse(&value.to_string()), Some(value));
        }

        #[test]
        fn only_the_canonical_decimal_is_accepted(text in "[ +\\-0-9a]{0,24}") {
            if let Some(value) = parse(&text) {
                prop_assert_eq!(value.to_string(), text);
            }
        }

        #[test]
        fn a_sign_a_space_or_a_leading_zero_is_malformed(
            value: u64,
            how in 0..5usize,
        ) {
            let text = value.to_string();
            let spoiled = match how {
                0 => format!("+{text}"),
                1 => format!(" {text}"),
                2 => format!("{text} "),
                3 => format!("0{text}"),
                _ => format!("-{text}"),
            };
            prop_assert_eq!(parse(&spoiled), None);
        }
    }
}
