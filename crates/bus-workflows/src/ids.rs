//! The values workflows put on the wire: a batch's id, a member's place in its batch, and
//! the headers that carry them (docs/wire-format.md, "Workflows").

use std::fmt;
use std::str::FromStr;

use bus_core::Headers;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// On a batch member: `<batch id>:<index>`, the member's place in its batch.
pub const BATCH_HEADER: &str = "bus-batch";
/// On a callback or continuation: `<batch id>:<kind>`, the batch that sent it and why.
pub const CALLBACK_HEADER: &str = "bus-batch-callback";
/// On a resumed run (after a sleep, a wait or the children of a fan-out): the ordinal of
/// the durable step it resumes (1 for the handler's first durable step).
pub const RESUME_HEADER: &str = "bus-resume";

/// A batch's id: a ULID by default, any 1–100 characters of `[A-Za-z0-9._-]` (so that it
/// can name Redis keys and headers without escaping).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BatchId(String);

/// The longest batch id.
pub const MAX_BATCH_ID: usize = 100;

impl BatchId {
    /// A new, unique, time-ordered id.
    pub fn generate() -> Self {
        BatchId(ulid::Ulid::new().to_string())
    }

    /// An id given as text, checked.
    pub fn parse(text: &str) -> Result<Self> {
        let valid = !text.is_empty()
            && text.len() <= MAX_BATCH_ID
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if valid {
            Ok(BatchId(text.to_owned()))
        } else {
            Err(Error::invalid(
                "batch id",
                format!("{text:?}: 1-{MAX_BATCH_ID} characters of [A-Za-z0-9._-]"),
            ))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for BatchId {
    type Err = Error;
    fn from_str(text: &str) -> Result<Self> {
        BatchId::parse(text)
    }
}

impl TryFrom<String> for BatchId {
    type Error = Error;
    fn try_from(text: String) -> Result<Self> {
        BatchId::parse(&text)
    }
}

impl From<BatchId> for String {
    fn from(id: BatchId) -> Self {
        id.0
    }
}

/// A member's place in its batch: the batch and the member's index (0, 1, ... in the
/// order members were added). What the [`BATCH_HEADER`] carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MemberRef {
    /// Its batch.
    pub batch: BatchId,
    /// Its index in the batch.
    pub index: u64,
}

impl MemberRef {
    /// The member of a message with `headers`, if it is one.
    pub fn from_headers(headers: &Headers) -> Result<Option<Self>> {
        headers.get(BATCH_HEADER).map(|v| v.parse()).transpose()
    }
}

impl fmt::Display for MemberRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.batch, self.index)
    }
}

impl FromStr for MemberRef {
    type Err = Error;
    fn from_str(text: &str) -> Result<Self> {
        let invalid = || Error::invalid("batch member", format!("{text:?}: not <batch>:<index>"));
        let (batch, index) = text.rsplit_once(':').ok_or_else(invalid)?;
        Ok(MemberRef {
            batch: BatchId::parse(batch)?,
            index: index.parse().map_err(|_| invalid())?,
        })
    }
}

/// Why a batch sends a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallbackKind {
    /// Every member was acknowledged.
    Success,
    /// Every member settled, and some were dead-lettered.
    Complete,
    /// A member was dead-lettered (sent once, at the first).
    Death,
    /// The children of a parent settled (or, with [`ChildPolicy::FailParent`], one died):
    /// the parent's continuation.
    Continuation,
}

impl CallbackKind {
    /// Every kind.
    pub const ALL: [CallbackKind; 4] = [
        CallbackKind::Success,
        CallbackKind::Complete,
        CallbackKind::Death,
        CallbackKind::Continuation,
    ];

    /// As stored and shown: `success`, `complete`, `death`, `continuation`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallbackKind::Success => "success",
            CallbackKind::Complete => "complete",
            CallbackKind::Death => "death",
            CallbackKind::Continuation => "continuation",
        }
    }

    /// Reads a kind as stored.
    pub fn parse(text: &str) -> Result<Self> {
        CallbackKind::ALL
            .into_iter()
            .find(|k| k.as_str() == text)
            .ok_or_else(|| Error::invalid("callback kind", text))
    }
}

impl fmt::Display for CallbackKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a parent's continuation does when one of its children is dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ChildPolicy {
    /// The continuation is sent at once, and reading its children's results fails with
    /// [`Error::ChildDied`] (a dead letter of the continuation unless it handles it).
    FailParent,
    /// The continuation waits for every child and sees the dead one as failed, with its
    /// error.
    #[default]
    Continue,
    /// The continuation waits for every child and does not see the dead ones.
    Ignore,
}

impl ChildPolicy {
    /// As stored: `fail`, `continue`, `ignore`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildPolicy::FailParent => "fail",
            ChildPolicy::Continue => "continue",
            ChildPolicy::Ignore => "ignore",
        }
    }

    /// Reads a policy as stored (empty: none, a plain batch).
    pub fn parse(text: &str) -> Result<Option<Self>> {
        Ok(match text {
            "" => None,
            "fail" => Some(ChildPolicy::FailParent),
            "continue" => Some(ChildPolicy::Continue),
            "ignore" => Some(ChildPolicy::Ignore),
            other => return Err(Error::invalid("child policy", other)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_refs_round_trip_and_bad_ones_are_refused() {
        let member: MemberRef = "01HXYZ:42".parse().unwrap();
        assert_eq!(member.batch.as_str(), "01HXYZ");
        assert_eq!(member.index, 42);
        assert_eq!(member.to_string(), "01HXYZ:42");
        for bad in ["", "x", "a:b", ":1", "a b:1", "a:-1", "a:1.0"] {
            assert!(bad.parse::<MemberRef>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn batch_ids_are_names() {
        assert!(BatchId::parse("order-7.lines_2").is_ok());
        for bad in ["", "a:b", "a{b}", "é", &"x".repeat(MAX_BATCH_ID + 1)] {
            assert!(BatchId::parse(bad).is_err(), "{bad:?}");
        }
    }
}
