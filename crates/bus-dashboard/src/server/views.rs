//! What the pages show, as JSON, beyond what management reads: bodies clipped to a
//! page's size, dead letters grouped by error. (Every read of the layout, the messages in
//! flight and the error histories included, is `bus_redis::admin`'s.)

use std::collections::BTreeMap;

use bus_management::DeadLetter;
use serde::Serialize;
use serde_json::value::RawValue;

/// The largest body a page is sent whole (a queue page holds up to 100 messages, a
/// dead-letter page up to 1,000): larger ones are replaced by their size and a prefix.
pub(crate) const MAX_SHOWN_BODY: usize = 16 * 1024;

/// Replaces a body larger than [`MAX_SHOWN_BODY`] by a string with its size and start.
pub(crate) fn clip(body: &mut Box<RawValue>) {
    let text = body.get();
    if text.len() <= MAX_SHOWN_BODY {
        return;
    }
    let mut end = 2048;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    *body = describe(&format!(
        "<{} bytes, too large to show here; it begins: {}…>",
        text.len(),
        &text[..end]
    ));
}

/// [`clip`] for a management summary, if there is one.
pub(crate) fn clip_summary(message: &mut Option<bus_management::MessageSummary>) {
    if let Some(message) = message {
        clip(&mut message.body);
    }
}

fn describe(text: &str) -> Box<RawValue> {
    // A string always serializes.
    serde_json::value::to_raw_value(text).unwrap_or_default()
}

/// Dead letters that failed the same way: one reason and one last error, with numbers
/// masked (`timeout after 3012 ms` and `... 2990 ms` are one group).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DeadGroup {
    /// Stable within a page: reason and masked error.
    key: String,
    reason: Option<String>,
    /// The masked error text (`#` for each number).
    error: String,
    /// The last error of the group's newest dead letter, unmasked.
    example: String,
    count: usize,
    /// Storage ids, oldest first: what requeue and delete take.
    ids: Vec<String>,
    first_ms: Option<u64>,
    last_ms: Option<u64>,
}

/// Replaces each run of digits with `#`.
pub(crate) fn mask_numbers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_number = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push('#');
            }
            in_number = true;
        } else {
            out.push(c);
            in_number = false;
        }
    }
    out
}

/// Groups dead letters by reason and masked last error, largest group first.
pub(crate) fn group(letters: &[DeadLetter]) -> Vec<DeadGroup> {
    let mut groups: BTreeMap<(String, String), DeadGroup> = BTreeMap::new();
    for letter in letters {
        let last = letter
            .errors
            .last()
            .map(|e| e.message.clone())
            .or_else(|| letter.decode_error.clone())
            .unwrap_or_else(|| "(no error recorded)".to_owned());
        let masked = mask_numbers(&last);
        let reason = letter.reason.clone();
        let key = format!("{}\u{1f}{masked}", reason.as_deref().unwrap_or(""));
        let group = groups
            .entry((reason.clone().unwrap_or_default(), masked.clone()))
            .or_insert_with(|| DeadGroup {
                key,
                reason,
                error: masked,
                example: last.clone(),
                count: 0,
                ids: Vec::new(),
                first_ms: None,
                last_ms: None,
            });
        group.count += 1;
        group.ids.push(letter.storage_id.clone());
        group.example = last;
        if let Some(at) = letter.dead_lettered_at_ms {
            group.first_ms = Some(group.first_ms.map_or(at, |first| first.min(at)));
            group.last_ms = Some(group.last_ms.map_or(at, |last| last.max(at)));
        }
    }
    let mut groups: Vec<DeadGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    groups
}

/// Escapes text for HTML (the one value the server writes into the page itself).
pub(crate) fn html_escape(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '<' => "&lt;".to_owned(),
            '>' => "&gt;".to_owned(),
            '&' => "&amp;".to_owned(),
            '"' => "&quot;".to_owned(),
            '\'' => "&#39;".to_owned(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_masked_for_grouping() {
        assert_eq!(
            mask_numbers("timeout after 3012 ms (try 2)"),
            "timeout after # ms (try #)"
        );
        assert_eq!(mask_numbers("no digits"), "no digits");
    }

    #[test]
    fn large_bodies_are_clipped() {
        let big = format!("\"{}\"", "é".repeat(MAX_SHOWN_BODY));
        let mut body = RawValue::from_string(big.clone()).unwrap();
        clip(&mut body);
        let shown: String = serde_json::from_str(body.get()).unwrap();
        assert!(
            shown.starts_with(&format!("<{} bytes, too large", big.len())),
            "{shown}"
        );
        assert!(shown.len() < 4096);
        let mut small = RawValue::from_string(r#"{"n":1}"#.to_owned()).unwrap();
        clip(&mut small);
        assert_eq!(small.get(), r#"{"n":1}"#);
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            html_escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
