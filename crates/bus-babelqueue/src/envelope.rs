//! BabelQueue's canonical envelope `{job, trace_id, data, meta, attempts}`, decoded the
//! way the Python codec (babelqueue 1.24.0, `codec.py`, `_envelope_shape.py`) does.
//!
//! Every member is kept as raw JSON text in document order, so what this crate does not
//! own (unknown top-level and `meta` members, big integers, `[]` in `data`) survives a
//! retry or dead-letter hop unchanged. The non-canonical members are dropped on decode and
//! never written; an inbound `urn` folds into `job`.

use std::borrow::Cow;
use std::fmt;

use serde_json::value::RawValue;

use crate::json::{self, Pairs, RawMembers};
use crate::{Error, Result};

/// The envelope schema version this crate writes and accepts.
pub const SCHEMA_VERSION: i64 = 1;
/// The `meta.lang` this crate writes.
pub const LANG: &str = "rust";

static EMPTY_OBJECT: std::sync::LazyLock<Box<RawValue>> =
    std::sync::LazyLock::new(|| json::raw("{}".to_owned()));

/// Non-canonical top-level members: dropped on decode, never written.
const FORBIDDEN_TOP: [&str; 1] = ["timestamp"];
/// Non-canonical `meta` members: dropped on decode, never written.
const FORBIDDEN_META: [&str; 4] = ["max_retries", "attempts", "source", "ts"];

/// ASCII whitespace as BabelQueue trims it (never Unicode spaces).
fn is_blank(text: &str) -> bool {
    text.bytes()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
}

/// Why a stored body is poison: it can never be decoded, retried or routed, so it is
/// dead-lettered on its first delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Poison {
    /// The bytes are not valid UTF-8.
    InvalidUtf8,
    /// Arrays or objects nest deeper than [`bus_core::transport::MAX_NESTING`].
    TooDeep,
    /// Not exactly one JSON value.
    NotJson(String),
    /// The JSON root is not an object.
    NotAnObject,
    /// A known member has the wrong type.
    BadMember(String),
    /// Neither a valid string `job` nor a valid string `urn`.
    NoIdentity,
    /// (Laravel layout) the reserve script could not count the attempt: `attempts` missing,
    /// null or not a number.
    NotCountable,
}

impl fmt::Display for Poison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Poison::InvalidUtf8 => f.write_str("the body is not valid UTF-8"),
            Poison::TooDeep => write!(
                f,
                "the body nests deeper than {} levels",
                bus_core::transport::MAX_NESTING
            ),
            Poison::NotJson(e) => write!(f, "invalid JSON: {e}"),
            Poison::NotAnObject => f.write_str("the JSON root is not an object"),
            Poison::BadMember(e) => f.write_str(e),
            Poison::NoIdentity => f.write_str(
                "the body carries no valid 'job' or 'urn' identity (ADR-0032 section 6)",
            ),
            Poison::NotCountable => f.write_str("the body has no numeric 'attempts'"),
        }
    }
}

impl std::error::Error for Poison {}

/// The `meta` block's core members, as read (each may be absent or null).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Meta {
    /// `meta.id`: the message id.
    pub id: Option<String>,
    /// `meta.queue`: the bare queue name it was produced to.
    pub queue: Option<String>,
    /// `meta.lang`: the producer's language.
    pub lang: Option<String>,
    /// `meta.schema_version`.
    pub schema_version: Option<i64>,
    /// `meta.created_at`, milliseconds since the Unix epoch.
    pub created_at: Option<i64>,
}

/// A decoded (or newly made) canonical envelope.
#[derive(Debug, Clone)]
pub struct Envelope {
    members: Vec<(String, Box<RawValue>)>,
    job: String,
    trace_id: Option<String>,
    attempts: Option<i64>,
    meta: Meta,
}

/// Milliseconds since the Unix epoch (bus-core's clock), as BabelQueue's JSON numbers.
pub(crate) fn now_ms() -> i64 {
    i64::try_from(bus_core::transport::now_ms()).unwrap_or(i64::MAX)
}

/// A fresh UUID v4, the form BabelQueue SDKs use for ids and trace ids.
pub(crate) fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn string_raw(text: &str) -> Box<RawValue> {
    let mut out = Vec::with_capacity(text.len() + 2);
    json::write_string(&mut out, text);
    json::raw(String::from_utf8(out).unwrap_or_default())
}

fn int_raw(n: i64) -> Box<RawValue> {
    json::raw(n.to_string())
}

/// A string member: `Ok(None)` for null, an error for any other type.
fn as_string(raw: &RawValue) -> Option<Option<String>> {
    match raw.get().as_bytes().first() {
        Some(b'n') => Some(None),
        Some(b'"') => serde_json::from_str::<String>(raw.get()).ok().map(Some),
        _ => None,
    }
}

/// An integer member (a literal without fraction or exponent that fits i64), or null.
fn as_int(raw: &RawValue) -> Option<Option<i64>> {
    let text = raw.get();
    if text == "null" {
        return Some(None);
    }
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<i64>().ok().map(Some)
}

fn is_object_or_null(raw: &RawValue) -> bool {
    matches!(raw.get().as_bytes().first(), Some(b'{') | Some(b'n'))
}

#[derive(Clone, Copy)]
enum Kind {
    Str,
    Int,
}

const META_KINDS: [(&str, Kind); 5] = [
    ("id", Kind::Str),
    ("queue", Kind::Str),
    ("lang", Kind::Str),
    ("schema_version", Kind::Int),
    ("created_at", Kind::Int),
];
const DEAD_LETTER_KINDS: [(&str, Kind); 7] = [
    ("reason", Kind::Str),
    ("error", Kind::Str),
    ("exception", Kind::Str),
    ("original_queue", Kind::Str),
    ("lang", Kind::Str),
    ("failed_at", Kind::Int),
    ("attempts", Kind::Int),
];

fn check_kind(kind: Kind, name: &str, raw: &RawValue) -> std::result::Result<(), Poison> {
    let ok = match kind {
        Kind::Str => as_string(raw).is_some(),
        Kind::Int => as_int(raw).is_some(),
    };
    if ok {
        Ok(())
    } else {
        let what = match kind {
            Kind::Str => "a string",
            Kind::Int => "an int64 integer",
        };
        Err(Poison::BadMember(format!("member '{name}' is not {what}")))
    }
}

/// Checks the members of a nested object (`meta`, `dead_letter`), every occurrence.
fn check_nested(
    raw: &RawValue,
    kinds: &[(&str, Kind)],
    prefix: &str,
) -> std::result::Result<(), Poison> {
    if raw.get() == "null" {
        return Ok(());
    }
    // A member of the element `Scan::of` checked for depth.
    let members = RawMembers::parse_member(raw.get())
        .ok_or_else(|| Poison::BadMember(format!("member '{prefix}' is not an object")))?;
    for (key, value) in &members.0 {
        if let Some((_, kind)) = kinds.iter().find(|(k, _)| *k == key.as_ref()) {
            check_kind(*kind, &format!("{prefix}.{key}"), value)?;
        }
    }
    Ok(())
}

/// The type checks of BabelQueue's strict decode (`_envelope_shape.py`).
fn check_shape(members: &[(Cow<'_, str>, &RawValue)]) -> std::result::Result<(), Poison> {
    for (key, value) in members {
        match key.as_ref() {
            "trace_id" => check_kind(Kind::Str, key, value)?,
            "attempts" => check_kind(Kind::Int, key, value)?,
            "data" => {
                if !is_object_or_null(value) {
                    return Err(Poison::BadMember("member 'data' is not an object".into()));
                }
                // BabelQueue requires every number in `data` to be a finite double.
                if !json::numbers_are_finite(value.get()) {
                    return Err(Poison::BadMember(
                        "member 'data' holds a number that is not a finite double".into(),
                    ));
                }
            }
            "meta" => {
                if !is_object_or_null(value) {
                    return Err(Poison::BadMember("member 'meta' is not an object".into()));
                }
                check_nested(value, &META_KINDS, "meta")?;
            }
            "dead_letter" => {
                if !is_object_or_null(value) {
                    return Err(Poison::BadMember(
                        "member 'dead_letter' is not an object".into(),
                    ));
                }
                check_nested(value, &DEAD_LETTER_KINDS, "dead_letter")?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// A stored body classified and read once, borrowing from the body: the members that
/// BabelQueue's strict decode keeps (deduplicated, the non-canonical ones dropped, `urn`
/// folded into the identity) and the identity. Both readers start here, so both classify
/// poison alike: [`Envelope::decode`] (owned, for retries and dead letters) and the bus's
/// wire format ([`crate::BabelFormat`], the receive path, which copies nothing).
pub(crate) struct Scan<'a> {
    members: Vec<(Cow<'a, str>, &'a RawValue)>,
    job: String,
    /// The identity came from an `urn` alias: the `job` member is written anew.
    aliased: bool,
}

impl<'a> Scan<'a> {
    /// Classifies a stored body; poison comes back as the reason.
    pub(crate) fn of(body: &'a [u8]) -> std::result::Result<Self, Poison> {
        let text = std::str::from_utf8(body).map_err(|_| Poison::InvalidUtf8)?;
        if json::too_deep(body) {
            return Err(Poison::TooDeep);
        }
        let first = text.bytes().find(|b| !json::is_json_space(*b));
        if first != Some(b'{') {
            // Valid JSON of another type, or not JSON at all.
            return Err(match serde_json::from_str::<&RawValue>(text) {
                Ok(_) => Poison::NotAnObject,
                Err(e) => Poison::NotJson(e.to_string()),
            });
        }
        let members: RawMembers<'a> =
            serde_json::from_str(text).map_err(|e| Poison::NotJson(e.to_string()))?;
        check_shape(&members.0)?;
        let mut members = members.dedup();
        members.retain(|(k, _)| {
            let forbidden = FORBIDDEN_TOP.contains(&k.as_ref());
            if forbidden {
                tracing::warn!(key = %k, "dropped a non-canonical envelope member");
            }
            !forbidden
        });
        // The identity: a valid `job` wins; else a valid `urn` becomes `job`.
        let job = valid_urn(find(&members, "job"));
        let urn_alias = valid_urn(find(&members, "urn"));
        members.retain(|(k, _)| k != "urn");
        let (job, aliased) = match (job, urn_alias) {
            (Some(job), _) => (job, false),
            (None, Some(alias)) => (alias, true),
            (None, None) => return Err(Poison::NoIdentity),
        };
        Ok(Scan {
            members,
            job,
            aliased,
        })
    }

    /// The message URN (`job`).
    pub(crate) fn urn(&self) -> &str {
        &self.job
    }

    /// A top-level member, as written in the body.
    pub(crate) fn member(&self, name: &str) -> Option<&'a RawValue> {
        self.members
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }

    /// `trace_id`, when a string.
    pub(crate) fn trace_id(&self) -> Option<String> {
        self.member("trace_id").and_then(|v| as_string(v).flatten())
    }

    /// The top-level attempts counter (absent or null reads as 0).
    pub(crate) fn attempts(&self) -> i64 {
        self.member("attempts")
            .and_then(|v| as_int(v).flatten())
            .unwrap_or(0)
    }

    /// `meta.id` and `meta.created_at`, the last occurrence of each (as a decoded `meta`
    /// keeps them).
    pub(crate) fn id_and_created_at(&self) -> (Option<String>, Option<i64>) {
        let (mut id, mut created_at) = (None, None);
        let members = self
            .member("meta")
            .and_then(|m| RawMembers::parse_member(m.get()));
        for (k, v) in members.iter().flat_map(|m| &m.0) {
            match k.as_ref() {
                "id" => id = as_string(v).flatten(),
                "created_at" => created_at = as_int(v).flatten(),
                _ => {}
            }
        }
        (id, created_at)
    }

    /// `data` as written, unless absent or null.
    pub(crate) fn data(&self) -> Option<&'a RawValue> {
        self.member("data").filter(|v| v.get() != "null")
    }

    /// The owned envelope: every member compacted, `meta` without its non-canonical
    /// members, the identity in `job`.
    fn into_envelope(self) -> Envelope {
        let Scan {
            members,
            job,
            aliased,
        } = self;
        let mut members: Vec<(String, Box<RawValue>)> = members
            .into_iter()
            .map(|(k, v)| (k.into_owned(), v.to_owned()))
            .collect();
        if aliased {
            let value = string_raw(&job);
            match members.iter_mut().find(|(k, _)| k == "job") {
                Some(slot) => slot.1 = value,
                None => members.push(("job".to_owned(), value)),
            }
        }
        let mut meta = Meta::default();
        for (key, value) in members.iter_mut() {
            *value = json::compact(std::mem::replace(value, json::null()));
            if key == "meta" && value.get() != "null" {
                let pairs = Pairs::parse(value.get())
                    .map(Pairs::dedup)
                    .unwrap_or_default();
                let kept: Vec<_> = pairs
                    .into_iter()
                    .filter(|(k, _)| !FORBIDDEN_META.contains(&k.as_str()))
                    .collect();
                for (k, v) in &kept {
                    match k.as_str() {
                        "id" => meta.id = as_string(v).flatten(),
                        "queue" => meta.queue = as_string(v).flatten(),
                        "lang" => meta.lang = as_string(v).flatten(),
                        "schema_version" => meta.schema_version = as_int(v).flatten(),
                        "created_at" => meta.created_at = as_int(v).flatten(),
                        _ => {}
                    }
                }
                let mut text = Vec::new();
                json::write_object(&mut text, &kept);
                *value = json::raw(String::from_utf8(text).unwrap_or_default());
            }
        }
        let trace_id = member(&members, "trace_id").and_then(|v| as_string(v).flatten());
        let attempts = member(&members, "attempts").and_then(|v| as_int(v).flatten());
        Envelope {
            members,
            job,
            trace_id,
            attempts,
            meta,
        }
    }
}

fn find<'m>(members: &[(Cow<'m, str>, &'m RawValue)], name: &str) -> Option<&'m RawValue> {
    members.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
}

fn valid_urn(raw: Option<&RawValue>) -> Option<String> {
    let text = as_string(raw?)??;
    (!is_blank(&text)).then_some(text)
}

impl Envelope {
    /// A new envelope as a BabelQueue producer makes it: `attempts` 0, `lang` `rust`, a
    /// fresh UUID `meta.id` and `trace_id` unless given. `data` must be a JSON object.
    pub fn new(urn: &str, data: &RawValue, queue: &str) -> Result<Self> {
        Self::build(urn, data, queue, None, None, None)
    }

    /// Like [`Envelope::new`], with the id, trace id and creation time chosen by the
    /// caller (the bus adapter keeps the bus's message id and send time).
    pub fn build(
        urn: &str,
        data: &RawValue,
        queue: &str,
        id: Option<String>,
        trace_id: Option<String>,
        created_at_ms: Option<i64>,
    ) -> Result<Self> {
        let trimmed = urn.trim_matches(|c: char| c.is_ascii_whitespace() || c == '\x0b');
        if trimmed.is_empty() {
            return Err(Error::Envelope("a message needs a non-empty URN".into()));
        }
        if !data.get().trim_start().starts_with('{') {
            return Err(Error::Envelope(format!(
                "the data of {trimmed} must be a JSON object"
            )));
        }
        let id = id.filter(|s| !is_blank(s)).unwrap_or_else(new_uuid);
        let trace_id = trace_id.filter(|s| !is_blank(s)).unwrap_or_else(new_uuid);
        let created_at = created_at_ms.unwrap_or_else(now_ms);
        let meta = Meta {
            id: Some(id),
            queue: Some(queue.to_owned()),
            lang: Some(LANG.to_owned()),
            schema_version: Some(SCHEMA_VERSION),
            created_at: Some(created_at),
        };
        let meta_members = vec![
            (
                "id".to_owned(),
                string_raw(meta.id.as_deref().unwrap_or("")),
            ),
            ("queue".to_owned(), string_raw(queue)),
            ("lang".to_owned(), string_raw(LANG)),
            ("schema_version".to_owned(), int_raw(SCHEMA_VERSION)),
            ("created_at".to_owned(), int_raw(created_at)),
        ];
        let mut meta_text = Vec::new();
        json::write_object(&mut meta_text, &meta_members);
        let members = vec![
            ("job".to_owned(), string_raw(trimmed)),
            ("trace_id".to_owned(), string_raw(&trace_id)),
            ("data".to_owned(), json::compact(data.to_owned())),
            (
                "meta".to_owned(),
                json::raw(String::from_utf8(meta_text).unwrap_or_default()),
            ),
            ("attempts".to_owned(), int_raw(0)),
        ];
        Ok(Envelope {
            members,
            job: trimmed.to_owned(),
            trace_id: Some(trace_id),
            attempts: Some(0),
            meta,
        })
    }

    /// Classifies and decodes a stored body. A poison body comes back as the reason.
    pub fn decode(body: &[u8]) -> std::result::Result<Self, Poison> {
        Scan::of(body).map(Scan::into_envelope)
    }

    /// Compact UTF-8 JSON, members in their order.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        json::write_object(&mut out, &self.members);
        out
    }

    /// The message URN (`job`).
    pub fn urn(&self) -> &str {
        &self.job
    }

    /// The cross-service correlation id, when present.
    pub fn trace_id(&self) -> Option<&str> {
        self.trace_id.as_deref()
    }

    /// The top-level attempts counter (absent or null reads as 0).
    pub fn attempts(&self) -> i64 {
        self.attempts.unwrap_or(0)
    }

    /// The core `meta` members.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// `data` as raw JSON (`{}` when absent or null).
    pub fn data(&self) -> &RawValue {
        match member(&self.members, "data") {
            Some(v) if v.get() != "null" => v,
            _ => &EMPTY_OBJECT,
        }
    }

    /// Any member as raw JSON.
    pub fn member(&self, name: &str) -> Option<&RawValue> {
        member(&self.members, name)
    }

    /// Sets `attempts`.
    pub fn set_attempts(&mut self, attempts: i64) {
        self.attempts = Some(attempts);
        self.set_member("attempts", int_raw(attempts));
    }

    /// Removes a member (the redrive drops `dead_letter`).
    pub(crate) fn remove_member(&mut self, name: &str) {
        self.members.retain(|(k, _)| k != name);
    }

    /// Sets (or adds at the end) a member.
    pub(crate) fn set_member(&mut self, name: &str, value: Box<RawValue>) {
        match self.members.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value,
            None => self.members.push((name.to_owned(), value)),
        }
    }
}

fn member<'a>(members: &'a [(String, Box<RawValue>)], name: &str) -> Option<&'a RawValue> {
    members.iter().find(|(k, _)| k == name).map(|(_, v)| &**v)
}
