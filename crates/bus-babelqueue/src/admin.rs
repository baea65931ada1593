//! Management of BabelQueue queues in both layouts: find them, count, peek, list dead
//! letters (redrive is in `redrive.rs`). Everything here only reads; the rules are in
//! `docs/babelqueue.md` ("Management").

use bytes::Bytes;
use fred::prelude::{Client, ClientLike, ListInterface};
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::client::now_secs;
use crate::frame::{unframe, Headers};
use crate::keys::{validate_queue, Layout, QueueKeys};
use crate::{BabelQueue, Content, Envelope, Error, Poison, Result};

/// SCAN's `COUNT` hint unless configured: small enough that no call blocks Redis.
const DEFAULT_SCAN_COUNT: u32 = 500;
/// The most elements one peek or dead-letter listing returns.
pub const MAX_PEEK: usize = 1_000;

/// Management of BabelQueue queues over one connection (a cheap `Clone`).
#[derive(Clone)]
pub struct Admin {
    pub(crate) client: Client,
    pub(crate) laravel_prefix: String,
    pub(crate) scan_count: u32,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("laravel_prefix", &self.laravel_prefix)
            .field("scan_count", &self.scan_count)
            .finish_non_exhaustive()
    }
}

/// The sizes of one queue. Read in one pipeline, not one atomic snapshot: a message that
/// moves between two reads can be counted twice or not at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Waiting in the ready list.
    pub ready: u64,
    /// Reserved: legacy, the `:processing` list; Laravel, the `:reserved` set.
    pub in_flight: u64,
    /// Of the reservations, how many lapsed (the next reserve recovers them). Legacy counts
    /// deadline members scored at or before now; Laravel, `:reserved` members.
    pub lapsed: u64,
    /// Laravel: in `:delayed` (`None` on legacy, which has no delayed set).
    pub delayed: Option<u64>,
    /// Laravel: of the delayed, how many are due.
    pub due: Option<u64>,
    /// In the dead-letter list.
    pub dead_letters: u64,
}

/// Which part of a queue to peek at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Area {
    /// The ready list, next first.
    Ready,
    /// Legacy: the `:processing` list, oldest first. Laravel: `:reserved`, earliest
    /// deadline first (members are Lua cjson's re-encoding with `attempts + 1`).
    InFlight,
    /// Laravel: `:delayed`, earliest due first.
    Delayed,
    /// The dead-letter list, oldest first.
    DeadLetters,
}

/// One stored element, decoded with the crate's codec.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Peeked {
    /// Its position in the list or sorted set when read (0 = next).
    pub position: usize,
    /// The bytes as stored (legacy: a frame when the message had headers).
    pub stored: Bytes,
    /// The body, unframed.
    pub body: Bytes,
    /// Legacy frame headers.
    pub headers: Headers,
    /// The envelope, or why the body is poison (then show [`Peeked::body`] raw).
    pub content: Content,
    /// The sorted-set score (deadline or due time, epoch seconds), for sorted sets.
    pub score: Option<f64>,
}

/// A dead-letter record and its `dead_letter` block.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The record, decoded like any stored element. A poison record (`{"raw":…}`, the
    /// base64 wrapper, or garbage) is [`Content::Poison`] and stays in the DLQ on redrive.
    pub record: Peeked,
    /// The block, read leniently (`None` when the record has none).
    pub block: Option<DeadLetterInfo>,
}

/// BabelQueue's `dead_letter` block as found (any SDK may have written it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterInfo {
    /// `failed`, `unknown_urn`, `poison` (or whatever the writer put).
    pub reason: Option<String>,
    /// The error text.
    pub error: Option<String>,
    /// The exception class name.
    pub exception: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub failed_at: Option<i64>,
    /// The bare queue it came from.
    pub original_queue: Option<String>,
    /// The attempts it had.
    pub attempts: Option<i64>,
    /// The writer's language.
    pub lang: Option<String>,
}

impl DeadLetterInfo {
    /// The block of a record, if it has one: read from the unframed body as JSON, so it is
    /// found on poison records too.
    pub fn of(body: &[u8]) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        let block = value.get("dead_letter")?.as_object()?;
        let text = |k: &str| block.get(k).and_then(|v| v.as_str()).map(str::to_owned);
        let int = |k: &str| block.get(k).and_then(serde_json::Value::as_i64);
        Some(DeadLetterInfo {
            reason: text("reason"),
            error: text("error"),
            exception: text("exception"),
            failed_at: int("failed_at"),
            original_queue: text("original_queue"),
            attempts: int("attempts"),
            lang: text("lang"),
        })
    }
}

/// The id of a stored record (a dead letter, say): the first 16 hex digits of the SHA-1
/// of its bytes (read lossily as UTF-8). BabelQueue records carry no storage id of their
/// own, so this is what the operator surface shows and takes to requeue or delete one:
/// stable while the record is unchanged, the same for identical copies (either may go).
pub fn record_id(stored: &[u8]) -> String {
    let mut id = fred::util::sha1_hash(&String::from_utf8_lossy(stored));
    id.truncate(16);
    id
}

/// Decodes a stored element of `layout` as a consumer of that layout would classify it.
pub(crate) fn decode_stored(layout: &Layout, stored: Bytes) -> (Bytes, Headers, Content) {
    let (body, headers) = match layout {
        Layout::Legacy => {
            let (body, headers) = unframe(&stored);
            (Bytes::from(body), headers)
        }
        // Laravel stores bare bodies; a frame there is poison (no identity).
        Layout::Laravel { .. } => (stored, Headers::new()),
    };
    let content = match Envelope::decode(&body) {
        // Laravel's pop cannot count a missing or null `attempts`: poison there.
        Ok(env)
            if matches!(layout, Layout::Laravel { .. })
                && !matches!(env.member("attempts"), Some(v) if v.get() != "null") =>
        {
            Content::Poison(Poison::NotCountable)
        }
        Ok(env) => Content::Envelope(env),
        Err(poison) => Content::Poison(poison),
    };
    (body, headers, content)
}

impl BabelQueue {
    /// Management over this client's connection, finding Laravel queues under the
    /// configured prefix (`queues:` unless the layout says otherwise).
    pub fn admin(&self) -> Admin {
        let admin = Admin::new(self.client().clone());
        match &self.options().layout {
            Layout::Laravel { prefix } => admin.laravel_prefix(prefix.clone()),
            Layout::Legacy => admin,
        }
    }
}

impl Admin {
    /// Management over a connected client.
    pub fn new(client: Client) -> Self {
        Admin {
            client,
            laravel_prefix: "queues:".to_owned(),
            scan_count: DEFAULT_SCAN_COUNT,
        }
    }

    /// The Laravel key prefix [`Admin::queues`] looks under (`queues:`); empty finds no
    /// Laravel queue.
    pub fn laravel_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.laravel_prefix = prefix.into();
        self
    }

    /// SCAN's `COUNT` hint (500; kept within 1–10,000).
    pub fn scan_count(mut self, count: u32) -> Self {
        self.scan_count = count.clamp(1, 10_000);
        self
    }

    /// The connection.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// `TYPE` of each key, in one pipeline.
    pub(crate) async fn types(&self, keys: &[&String]) -> Result<Vec<String>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let pipeline = self.client.pipeline();
        for key in keys {
            let cmd = CustomCommand::new_static("TYPE", ClusterHash::FirstKey, false);
            let _: () = pipeline
                .custom(cmd, vec![Value::from(key.as_str())])
                .await?;
        }
        let replies: Vec<Value> = pipeline.all().await?;
        Ok(replies
            .into_iter()
            .map(|v| v.as_string().unwrap_or_default())
            .collect())
    }

    /// Fails unless each key is missing or of its expected type (a clear error instead of
    /// Redis's `WRONGTYPE`).
    pub(crate) async fn expect_types(&self, expected: &[(&str, &'static str)]) -> Result<()> {
        let names: Vec<String> = expected.iter().map(|(k, _)| (*k).to_owned()).collect();
        let refs: Vec<&String> = names.iter().collect();
        for ((key, kind), found) in expected.iter().zip(self.types(&refs).await?) {
            if found != "none" && found != *kind {
                return Err(Error::WrongType {
                    key: (*key).to_owned(),
                    expected: kind,
                    found,
                });
            }
        }
        Ok(())
    }

    /// The sizes of `queue` in `layout`.
    pub async fn counts(&self, layout: &Layout, queue: &str) -> Result<Counts> {
        validate_queue(queue)?;
        let k = QueueKeys::new(layout, queue);
        let laravel = matches!(layout, Layout::Laravel { .. });
        let in_flight_kind = if laravel { "zset" } else { "list" };
        let mut expected = vec![
            (k.ready.as_str(), "list"),
            (k.in_flight.as_str(), in_flight_kind),
            (k.timers.as_str(), "zset"),
            (k.dlq.as_str(), "list"),
        ];
        if laravel {
            expected.push((k.notify.as_str(), "list"));
        }
        self.expect_types(&expected).await?;
        let now = now_secs();
        let pipeline = self.client.pipeline();
        let _: () = pipeline.llen(&k.ready).await?;
        let size = if laravel { "ZCARD" } else { "LLEN" };
        let _: () = pipeline
            .custom(cmd(size), vec![Value::from(k.in_flight.as_str())])
            .await?;
        // Legacy: lapsed deadline members; Laravel: lapsed reserved members.
        let lapsed_key = if laravel { &k.in_flight } else { &k.timers };
        let _: () = pipeline
            .custom(cmd("ZCOUNT"), zcount(lapsed_key, now))
            .await?;
        let _: () = pipeline
            .custom(cmd("ZCARD"), vec![Value::from(k.timers.as_str())])
            .await?;
        let _: () = pipeline
            .custom(cmd("ZCOUNT"), zcount(&k.timers, now))
            .await?;
        let _: () = pipeline.llen(&k.dlq).await?;
        let replies: Vec<Value> = pipeline.all().await?;
        let n: Vec<u64> = replies
            .iter()
            .map(|v| v.as_u64().unwrap_or(0))
            .collect::<Vec<_>>();
        let at = |i: usize| n.get(i).copied().unwrap_or(0);
        Ok(Counts {
            ready: at(0),
            in_flight: at(1),
            lapsed: at(2),
            delayed: laravel.then(|| at(3)),
            due: laravel.then(|| at(4)),
            dead_letters: at(5),
        })
    }

    /// Up to `count` (at most [`MAX_PEEK`]) elements of one area of `queue`, from
    /// `start`, decoded; nothing moves.
    pub async fn peek(
        &self,
        layout: &Layout,
        queue: &str,
        area: Area,
        start: usize,
        count: usize,
    ) -> Result<Vec<Peeked>> {
        validate_queue(queue)?;
        let k = QueueKeys::new(layout, queue);
        let laravel = matches!(layout, Layout::Laravel { .. });
        let count = count.min(MAX_PEEK);
        if count == 0 {
            return Ok(Vec::new());
        }
        let (key, sorted) = match area {
            Area::Ready => (&k.ready, false),
            Area::DeadLetters => (&k.dlq, false),
            Area::InFlight => (&k.in_flight, laravel),
            Area::Delayed if laravel => (&k.timers, true),
            Area::Delayed => {
                return Err(Error::Unsupported {
                    layout: "legacy",
                    what: "peeking delayed messages (it has no delayed set)",
                })
            }
        };
        self.expect_types(&[(key, if sorted { "zset" } else { "list" })])
            .await?;
        let stop = i64::try_from(start + count - 1).unwrap_or(i64::MAX);
        let first = i64::try_from(start).unwrap_or(i64::MAX);
        let items: Vec<(Bytes, Option<f64>)> = if sorted {
            let args = vec![
                Value::from(key.as_str()),
                Value::from(first),
                Value::from(stop),
                Value::from("WITHSCORES"),
            ];
            let reply: Value = self.client.custom(cmd("ZRANGE"), args).await?;
            scored(reply)
        } else {
            let items: Vec<Bytes> = self.client.lrange(key, first, stop).await?;
            items.into_iter().map(|b| (b, None)).collect()
        };
        Ok(items
            .into_iter()
            .enumerate()
            .map(|(i, (stored, score))| {
                let (body, headers, content) = decode_stored(layout, stored.clone());
                Peeked {
                    position: start + i,
                    stored,
                    body,
                    headers,
                    content,
                    score,
                }
            })
            .collect())
    }

    /// Up to `count` dead letters of `queue` from `start` (oldest first), with their
    /// `dead_letter` blocks.
    pub async fn dead_letters(
        &self,
        layout: &Layout,
        queue: &str,
        start: usize,
        count: usize,
    ) -> Result<Vec<DeadLetter>> {
        let records = self
            .peek(layout, queue, Area::DeadLetters, start, count)
            .await?;
        Ok(records
            .into_iter()
            .map(|record| DeadLetter {
                block: DeadLetterInfo::of(&record.body),
                record,
            })
            .collect())
    }
}

fn cmd(name: &'static str) -> CustomCommand {
    CustomCommand::new_static(name, ClusterHash::FirstKey, false)
}

fn zcount(key: &str, now: i64) -> Vec<Value> {
    vec![Value::from(key), Value::from("-inf"), Value::from(now)]
}

pub(crate) fn into_array(v: Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

/// A `WITHSCORES` reply, flat (RESP2) or as pairs (RESP3).
fn scored(reply: Value) -> Vec<(Bytes, Option<f64>)> {
    let items = into_array(reply);
    if items.iter().all(|v| matches!(v, Value::Array(_))) {
        return items
            .into_iter()
            .filter_map(|pair| {
                let mut pair = into_array(pair).into_iter();
                let member = pair.next()?.into_bytes()?;
                Some((member, pair.next().and_then(|s| s.as_f64())))
            })
            .collect();
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(member), Some(score)) = (it.next(), it.next()) {
        if let Some(member) = member.into_bytes() {
            out.push((member, score.as_f64()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_read_leniently() {
        let block = DeadLetterInfo::of(
            br#"{"raw":"x","dead_letter":{"reason":"poison","attempts":0,"failed_at":"soon"}}"#,
        )
        .expect("a block");
        assert_eq!(block.reason.as_deref(), Some("poison"));
        assert_eq!(block.attempts, Some(0));
        assert_eq!(block.failed_at, None);
        assert!(DeadLetterInfo::of(b"not json").is_none());
        assert!(DeadLetterInfo::of(br#"{"dead_letter":1}"#).is_none());
    }

    #[test]
    fn laravel_needs_a_countable_attempts() {
        let body = Bytes::from_static(br#"{"job":"urn:a","data":{}}"#);
        let (_, _, content) = decode_stored(&Layout::laravel(), body.clone());
        assert!(matches!(content, Content::Poison(Poison::NotCountable)));
        let (_, _, content) = decode_stored(&Layout::Legacy, body);
        assert!(matches!(content, Content::Envelope(_)));
    }
}
