//! BabelQueue's dead letters: the additive `dead_letter` block on an envelope
//! (`dead_letter.py`) and the record of a poison body (`_poison_record.py`, ADR-0035).

use base64::Engine;
use serde::Serialize;

use crate::envelope::{now_ms, Envelope, LANG};
use crate::json::{self, Pairs};

/// Why a message was dead-lettered, as BabelQueue spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// Its handler failed on the last allowed attempt (or refused it).
    Failed,
    /// No handler knows its URN.
    UnknownUrn,
    /// The body can never be decoded.
    Poison,
}

/// The `dead_letter` block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DeadLetterBlock {
    /// Why.
    pub reason: Reason,
    /// The error text, if any.
    pub error: Option<String>,
    /// The error's kind (BabelQueue writes the exception class name), if any.
    pub exception: Option<String>,
    /// When, in milliseconds since the Unix epoch.
    pub failed_at: i64,
    /// The bare name of the queue it came from.
    pub original_queue: String,
    /// The attempts it had.
    pub attempts: i64,
    /// The language of the SDK that dead-lettered it (`rust`).
    pub lang: String,
}

impl DeadLetterBlock {
    /// A block written now by this crate.
    pub fn new(
        reason: Reason,
        original_queue: &str,
        attempts: i64,
        error: Option<String>,
        exception: Option<String>,
    ) -> Self {
        DeadLetterBlock {
            reason,
            error,
            exception,
            failed_at: now_ms(),
            original_queue: original_queue.to_owned(),
            attempts,
            lang: LANG.to_owned(),
        }
    }

    fn to_raw(&self) -> Box<serde_json::value::RawValue> {
        // A struct of strings and integers always serializes.
        json::raw(serde_json::to_string(self).unwrap_or_else(|_| "null".into()))
    }
}

impl Envelope {
    /// The DLQ record: this envelope with `attempts` and a `dead_letter` block set to the
    /// block's (an earlier block is replaced in place), every other member unchanged.
    pub fn dead_lettered(&self, block: &DeadLetterBlock) -> Vec<u8> {
        let mut copy = self.clone();
        copy.set_attempts(block.attempts);
        copy.set_member("dead_letter", block.to_raw());
        copy.encode()
    }
}

/// Whether `text` is one strict JSON object that may be spliced: valid, no NaN/Infinity,
/// no unpaired surrogate escape, no top-level `dead_letter` member.
fn spliceable(text: &str) -> bool {
    match Pairs::parse(text) {
        Some(pairs) => {
            !pairs.0.iter().any(|(k, _)| k == "dead_letter")
                && !json::has_unpaired_surrogate_escape(text)
        }
        None => false,
    }
}

/// The DLQ record of a poison body, as BabelQueue writes it: a strict JSON object gets a
/// `dead_letter` member appended byte-wise (nothing re-encoded); other UTF-8 text becomes
/// `{"raw":"<text>","dead_letter":...}`; other bytes `{"raw":"<base64>",
/// "raw_encoding":"base64","dead_letter":...}`.
pub fn poison_record(body: &[u8], block: &DeadLetterBlock) -> Vec<u8> {
    let block = block.to_raw();
    let block = block.get().as_bytes();
    let mut out = Vec::with_capacity(body.len() + block.len() + 40);
    match std::str::from_utf8(body) {
        Ok(text) if spliceable(text) => {
            let trimmed = text.trim_matches(|c: char| c.is_ascii() && json::is_json_space(c as u8));
            let inner = &trimmed[1..trimmed.len() - 1];
            if inner.bytes().all(json::is_json_space) {
                out.extend_from_slice(b"{\"dead_letter\":");
            } else {
                out.extend_from_slice(&trimmed.as_bytes()[..trimmed.len() - 1]);
                out.extend_from_slice(b",\"dead_letter\":");
            }
        }
        Ok(text) => {
            out.extend_from_slice(b"{\"raw\":");
            json::write_string(&mut out, text);
            out.extend_from_slice(b",\"dead_letter\":");
        }
        Err(_) => {
            out.extend_from_slice(b"{\"raw\":\"");
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(body)
                    .as_bytes(),
            );
            out.extend_from_slice(b"\",\"raw_encoding\":\"base64\",\"dead_letter\":");
        }
    }
    out.extend_from_slice(block);
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> DeadLetterBlock {
        let mut b = DeadLetterBlock::new(Reason::Poison, "orders", 0, Some("bad".into()), None);
        b.failed_at = 5;
        b
    }

    const BLOCK: &str = r#"{"reason":"poison","error":"bad","exception":null,"failed_at":5,"original_queue":"orders","attempts":0,"lang":"rust"}"#;

    #[test]
    fn objects_are_spliced_byte_wise() {
        let record = poison_record(br#" {"a":1e400,"a":9007199254740993} "#, &block());
        assert_eq!(
            String::from_utf8(record).unwrap(),
            format!(r#"{{"a":1e400,"a":9007199254740993,"dead_letter":{BLOCK}}}"#)
        );
        let record = poison_record(b"{ }", &block());
        assert_eq!(
            String::from_utf8(record).unwrap(),
            format!(r#"{{"dead_letter":{BLOCK}}}"#)
        );
    }

    #[test]
    fn other_text_is_wrapped_raw() {
        for body in [
            "hello",
            "[1]",
            r#"{"a":"\ud800"}"#,
            r#"{"dead_letter":1}"#,
            "{",
        ] {
            let record = poison_record(body.as_bytes(), &block());
            let value: serde_json::Value = serde_json::from_slice(&record).unwrap();
            assert_eq!(value["raw"], body);
            assert!(value.get("raw_encoding").is_none());
        }
    }

    #[test]
    fn invalid_utf8_is_base64() {
        let record = poison_record(b"\xff{\"a\":1}", &block());
        let value: serde_json::Value = serde_json::from_slice(&record).unwrap();
        assert_eq!(value["raw"], "/3siYSI6MX0=");
        assert_eq!(value["raw_encoding"], "base64");
        assert_eq!(value["dead_letter"]["reason"], "poison");
    }
}
