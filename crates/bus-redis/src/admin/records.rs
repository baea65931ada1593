//! The records bus-redis's scripts write for a message (`common.lua`'s `bury` and
//! `append_error`), read back: written by Redis's cjson, or by a foreign consumer in any
//! shape, so read lossily and never failing.

use bus_core::records::ErrorRecord;
use serde::Deserialize;

/// The `dead-info` document: `{"reason":…,"at_ms":…}` written by Redis's cjson.
#[derive(Debug, Deserialize)]
pub(super) struct DeadInfo {
    pub(super) reason: Option<String>,
    #[serde(default, deserialize_with = "millis")]
    pub(super) at_ms: Option<u64>,
}

impl DeadInfo {
    /// Reads the document lossily (invalid UTF-8 becomes U+FFFD); anything that is not
    /// such a document (a foreign consumer's plain text, say) is shown as the reason.
    pub(super) fn parse(raw: &[u8]) -> Self {
        let text = String::from_utf8_lossy(raw);
        serde_json::from_str(&text).unwrap_or_else(|_| DeadInfo {
            reason: Some(text.into_owned()),
            at_ms: None,
        })
    }
}

#[derive(Debug, Deserialize)]
struct RawError {
    #[serde(default)]
    message: String,
    #[serde(default, deserialize_with = "millis")]
    at_ms: Option<u64>,
}

/// The `errors` document: a JSON array of `{"message":…,"at_ms":…}`, read lossily (invalid
/// UTF-8 becomes U+FFFD). cjson writes an empty array as `{}`; anything else that is not
/// such an array shows as one error with the raw text and time 0.
pub(crate) fn parse_errors(raw: &[u8]) -> Vec<ErrorRecord> {
    let text = String::from_utf8_lossy(raw);
    match serde_json::from_str::<Vec<RawError>>(&text) {
        Ok(errors) => errors
            .into_iter()
            .map(|e| ErrorRecord {
                message: e.message,
                at_ms: e.at_ms.unwrap_or_default(),
            })
            .collect(),
        Err(_) if text.trim() == "{}" || text.trim().is_empty() => Vec::new(),
        Err(_) => vec![ErrorRecord {
            message: text.into_owned(),
            at_ms: 0,
        }],
    }
}

/// cjson may write a large integer as a float (`1.712345679901e+12`): read either.
fn millis<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    let value = Option::<serde_json::Number>::deserialize(deserializer)?;
    Ok(value.and_then(|n| n.as_u64().or_else(|| n.as_f64().map(|f| f.max(0.0) as u64))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cjson_documents_parse() {
        let info = DeadInfo::parse(br#"{"at_ms":1712345679901,"reason":"rejected"}"#);
        assert_eq!(info.reason.as_deref(), Some("rejected"));
        assert_eq!(info.at_ms, Some(1712345679901));
        let info = DeadInfo::parse(br#"{"reason":"x","at_ms":1.712345679901e+12}"#);
        assert_eq!(info.at_ms, Some(1712345679901));
        let errors =
            parse_errors(br#"[{"message":"boom","at_ms":5},{"at_ms":6,"message":"again"}]"#);
        assert_eq!(
            errors,
            vec![
                ErrorRecord {
                    message: "boom".into(),
                    at_ms: 5
                },
                ErrorRecord {
                    message: "again".into(),
                    at_ms: 6
                }
            ]
        );
        assert!(parse_errors(b"{}").is_empty());
        assert_eq!(parse_errors(b"garbage")[0].message, "garbage");
    }

    #[test]
    fn invalid_utf8_reads_lossily() {
        let info = DeadInfo::parse(b"{\"reason\":\"bad \xff\",\"at_ms\":5}");
        assert_eq!(info.reason.as_deref(), Some("bad \u{fffd}"));
        assert_eq!(info.at_ms, Some(5));
        let errors = parse_errors(b"[{\"message\":\"x\xc3(\",\"at_ms\":5}]");
        assert_eq!(errors[0].message, "x\u{fffd}(");
        assert_eq!(
            DeadInfo::parse(b"plain \xfe").reason.as_deref(),
            Some("plain \u{fffd}")
        );
    }
}
