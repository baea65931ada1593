//! The Redis keys of an attachment (docs/wire-format.md, "Attachments"): both under the
//! scope's hash tag, so that they live on the queue's cluster slot and go together.

/// `<prefix>:{<scope>}:att:<id>:meta`: hash of name, content_type, length, chunks,
/// metadata (JSON). Written last: an attachment without it is incomplete.
pub(crate) fn meta(prefix: &str, scope: &str, id: &str) -> String {
    format!("{prefix}:{{{scope}}}:att:{id}:meta")
}

/// `<prefix>:{<scope>}:att:<id>:data`: list of the body's chunks, in order.
pub(crate) fn data(prefix: &str, scope: &str, id: &str) -> String {
    format!("{prefix}:{{{scope}}}:att:{id}:data")
}

/// `<prefix>:{<scope>}:att:<id>:refs`: hash of a shared attachment's `holders` count and
/// the tokens of the changes counted (`t:<token>`); absent when it is not shared.
pub(crate) fn refs(prefix: &str, scope: &str, id: &str) -> String {
    format!("{prefix}:{{{scope}}}:att:{id}:refs")
}
