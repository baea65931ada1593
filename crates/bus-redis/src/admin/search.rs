//! Find and act on all that matches: a bounded scan of a queue's ready,
//! delayed and dead messages in pages, each message matched by id, type, header, error
//! text or body text; and the same pages acted on (requeue, delete, move), one script per
//! page and place that re-checks each message is still where the scan found it.
//! docs/operations.md ("Search"), docs/redis-layout.md ("Search and edit").

use std::fmt;
use std::str::FromStr;

use bus_core::records::{ErrorRecord, MessageSummary};
use bus_core::transport::Source;
use bytes::Bytes;
use fred::prelude::{HashesInterface, ListInterface, SortedSetsInterface};
use fred::types::Value;
use serde::{Deserialize, Serialize};

use super::partitions::Shard;
use super::records::{parse_errors, DeadInfo};
use super::Admin;
use crate::keys::{QueueKeys, WAKE};
use crate::{Error, Result};

/// Most elements one page reads (per call): a page is a few commands and a few
/// milliseconds of Redis, whatever the queue's length.
pub const MAX_PAGE: u64 = 10_000;

/// Where a message waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Place {
    /// On the ready list (a fresh envelope, or the storage id of a retried message).
    Ready,
    /// Delayed: a delayed send or a retry waiting for its backoff.
    Delayed,
    /// A dead letter.
    Dead,
}

impl Place {
    /// Every place, in the order a search visits them.
    pub const ALL: [Place; 3] = [Place::Ready, Place::Delayed, Place::Dead];

    /// `ready`, `delayed` or `dead`.
    pub fn name(self) -> &'static str {
        match self {
            Place::Ready => "ready",
            Place::Delayed => "delayed",
            Place::Dead => "dead",
        }
    }
}

impl FromStr for Place {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        Place::ALL
            .into_iter()
            .find(|place| place.name() == text)
            .ok_or_else(|| {
                Error::InvalidRequest(format!("no place {text:?}: use ready, delayed or dead"))
            })
    }
}

/// What a search looks for; every criterion given must hold. Text is matched without
/// regard to case; the id and the type exactly.
///
/// ```
/// use bus_redis::admin::SearchQuery;
///
/// let query = SearchQuery::default().message_type("payments").error("declined");
/// assert!(!query.is_empty());
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SearchQuery {
    id: Option<String>,
    message_type: Option<String>,
    header: Option<(String, String)>,
    error: Option<String>,
    body: Option<String>,
    places: Vec<Place>,
}

impl SearchQuery {
    /// The message with this message id (or storage id, as the dashboard shows it).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Messages of this type (wire name).
    pub fn message_type(mut self, message_type: impl Into<String>) -> Self {
        self.message_type = Some(message_type.into());
        self
    }

    /// Messages with header `name` whose value contains `value` (any value when empty).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.header = Some((name.into(), value.into()));
        self
    }

    /// Messages whose error history or dead-letter reason contains `text`.
    pub fn error(mut self, text: impl Into<String>) -> Self {
        self.error = Some(text.into().to_lowercase());
        self
    }

    /// Messages whose body (as JSON text) contains `text`.
    pub fn body(mut self, text: impl Into<String>) -> Self {
        self.body = Some(text.into().to_lowercase());
        self
    }

    /// Only these places (all three when none is given).
    pub fn places(mut self, places: impl IntoIterator<Item = Place>) -> Self {
        self.places = places.into_iter().collect();
        self
    }

    /// True when it has no criterion: it would match everything, which a search refuses
    /// (purge a queue with `bus purge`).
    pub fn is_empty(&self) -> bool {
        self.id.is_none()
            && self.message_type.is_none()
            && self.header.is_none()
            && self.error.is_none()
            && self.body.is_none()
    }

    fn searched_places(&self) -> Vec<Place> {
        Place::ALL
            .into_iter()
            .filter(|p| self.places.is_empty() || self.places.contains(p))
            .collect()
    }

    fn matches(&self, candidate: &Candidate<'_>) -> bool {
        let message = candidate.message;
        if let Some(id) = &self.id {
            let by_message = message.is_some_and(|m| &m.id == id);
            if !by_message && candidate.shown_id.as_deref() != Some(id.as_str()) {
                return false;
            }
        }
        if let Some(wanted) = &self.message_type {
            if !message.is_some_and(|m| m.message_type.eq_ignore_ascii_case(wanted)) {
                return false;
            }
        }
        if let Some((name, value)) = &self.header {
            let value = value.to_lowercase();
            let found = message
                .and_then(|m| m.headers.get(name))
                .is_some_and(|v| v.to_lowercase().contains(&value));
            if !found {
                return false;
            }
        }
        if let Some(text) = &self.error {
            let in_errors = candidate
                .errors
                .iter()
                .any(|e| e.message.to_lowercase().contains(text));
            let in_reason = candidate
                .reason
                .is_some_and(|r| r.to_lowercase().contains(text));
            if !in_errors && !in_reason {
                return false;
            }
        }
        if let Some(text) = &self.body {
            let found = match message {
                Some(m) => m.body.get().to_lowercase().contains(text),
                None => String::from_utf8_lossy(candidate.envelope)
                    .to_lowercase()
                    .contains(text),
            };
            if !found {
                return false;
            }
        }
        true
    }
}

/// What the matcher looks at.
struct Candidate<'a> {
    shown_id: Option<String>,
    message: Option<&'a MessageSummary>,
    envelope: &'a [u8],
    errors: &'a [ErrorRecord],
    reason: Option<&'a str>,
}

/// Where a scan stands: the segment (a place of a shard) and the offset in it. Written
/// `<segment>.<offset>`; `0.0` is the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    segment: usize,
    offset: u64,
}

impl Cursor {
    /// The segment (a place of a shard, in scan order).
    pub fn segment(&self) -> usize {
        self.segment
    }

    /// The offset in the segment.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.segment, self.offset)
    }
}

impl FromStr for Cursor {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let parsed = text
            .split_once('.')
            .and_then(|(s, o)| Some((s.parse().ok()?, o.parse().ok()?)));
        match parsed {
            Some((segment, offset)) => Ok(Cursor { segment, offset }),
            None => Err(Error::InvalidRequest(format!(
                "no search cursor {text:?}: pass back the `next` of the previous page"
            ))),
        }
    }
}

/// A message a search found.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Found {
    /// Where it waits.
    pub place: Place,
    /// Its storage id as administration shows it (`1:~42` on a shard); `None` for a
    /// fresh envelope on the ready list, which has none yet.
    pub storage_id: Option<String>,
    /// The decoded envelope; `None` when it does not decode.
    pub message: Option<MessageSummary>,
    /// Why it does not decode.
    pub decode_error: Option<String>,
    /// Its error history (empty for a message that never failed).
    pub errors: Vec<ErrorRecord>,
    /// Why it was dead-lettered (dead letters only).
    pub reason: Option<String>,
    /// What the scripts re-check: the ready element, or the storage id on its shard.
    #[serde(skip)]
    pub(super) element: Bytes,
    /// The envelope as stored.
    #[serde(skip)]
    pub(super) envelope: Bytes,
    /// Which segment of the scan it came from.
    #[serde(skip)]
    pub(super) segment: usize,
}

/// One page of a search.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct SearchPage {
    /// The matches in this page.
    pub found: Vec<Found>,
    /// Elements this page read.
    pub scanned: u64,
    /// Elements before the next page, of `total` (the progress to show).
    pub position: u64,
    /// Elements in the places searched, counted at this page.
    pub total: u64,
    /// The cursor of the next page; `None` when the scan is done.
    pub next: Option<String>,
}

/// One segment of a scan: a place of one shard.
pub(super) struct Segment<'a> {
    pub(super) place: Place,
    pub(super) shard: &'a Shard,
}

impl Admin {
    /// One page of a search over a queue's ready, delayed and dead messages: at most
    /// `limit` elements read (1 to [`MAX_PAGE`]) from `cursor` (`None`: the start), in the
    /// order ready, delayed, dead (shard by shard on a partitioned queue). Costs per page
    /// one count per segment, one `LRANGE`/`ZRANGE` and one `HMGET` per field read; the
    /// matching is done here, not in Redis. A scan is no snapshot: a message that moves
    /// while it runs may be missed or seen twice (acting re-checks every message).
    pub async fn search(
        &self,
        source: &Source,
        query: &SearchQuery,
        cursor: Option<&str>,
        limit: u64,
    ) -> Result<SearchPage> {
        let shards = self.shards(source).await?;
        let segments = segments(query, &shards);
        self.search_segments(&segments, query, cursor, limit).await
    }

    pub(super) async fn search_segments(
        &self,
        segments: &[Segment<'_>],
        query: &SearchQuery,
        cursor: Option<&str>,
        limit: u64,
    ) -> Result<SearchPage> {
        if query.is_empty() {
            return Err(Error::InvalidRequest(
                "a search needs at least one criterion (id, type, header, error or body)"
                    .to_owned(),
            ));
        }
        let limit = limit.clamp(1, MAX_PAGE);
        let mut at: Cursor = cursor.map(str::parse).transpose()?.unwrap_or_default();
        let mut lengths = Vec::with_capacity(segments.len());
        for segment in segments {
            lengths.push(self.segment_len(segment).await?);
        }
        let total = lengths.iter().sum();
        let mut found = Vec::new();
        let mut scanned = 0;
        while at.segment < segments.len() && scanned < limit {
            let len = lengths[at.segment];
            if at.offset >= len {
                at = Cursor {
                    segment: at.segment + 1,
                    offset: 0,
                };
                continue;
            }
            let n = (limit - scanned).min(len - at.offset);
            let read = self
                .read_segment(&segments[at.segment], at.segment, at.offset, n, query)
                .await?;
            if read.0 == 0 {
                at = Cursor {
                    segment: at.segment + 1,
                    offset: 0,
                };
                continue;
            }
            scanned += read.0;
            at.offset += read.0;
            found.extend(read.1);
        }
        // A segment read to its end is done: the next page starts at the next one.
        while at.segment < segments.len() && at.offset >= lengths[at.segment] {
            at = Cursor {
                segment: at.segment + 1,
                offset: 0,
            };
        }
        let position = lengths[..at.segment.min(lengths.len())].iter().sum::<u64>() + at.offset;
        Ok(SearchPage {
            found,
            scanned,
            position: position.min(total),
            total,
            next: (at.segment < segments.len()).then(|| at.to_string()),
        })
    }

    async fn segment_len(&self, segment: &Segment<'_>) -> Result<u64> {
        let keys = &segment.shard.keys;
        let client = self.client();
        Ok(match segment.place {
            Place::Ready => client.llen(&keys.ready).await?,
            Place::Delayed => client.zcard(&keys.delayed).await?,
            Place::Dead => client.llen(&keys.dead).await?,
        })
    }

    /// Reads `n` elements of a segment from `offset`; returns how many it read and the
    /// matches among them.
    async fn read_segment(
        &self,
        segment: &Segment<'_>,
        index: usize,
        offset: u64,
        n: u64,
        query: &SearchQuery,
    ) -> Result<(u64, Vec<Found>)> {
        let keys = &segment.shard.keys;
        let client = self.client();
        let (start, stop) = (offset as i64, (offset + n) as i64 - 1);
        let elements: Vec<Bytes> = match segment.place {
            Place::Ready => client.lrange(&keys.ready, start, stop).await?,
            Place::Delayed => {
                let reply: Value = client
                    .zrange(&keys.delayed, start, stop, None, false, None, false)
                    .await?;
                reply.convert()?
            }
            Place::Dead => client.lrange(&keys.dead, start, stop).await?,
        };
        let read = elements.len() as u64;
        let elements: Vec<Bytes> = elements
            .into_iter()
            .filter(|e| e.as_ref() != WAKE.as_bytes())
            .collect();
        // Which elements are storage ids: all of delayed and dead; on ready those that
        // are not an envelope as sent (the "fresh or stored" test of reserve).
        let ids: Vec<Bytes> = elements
            .iter()
            .filter(|e| segment.place != Place::Ready || !surely_fresh(e))
            .cloned()
            .collect();
        let (stored, errors, infos) = self.stored_fields(keys, &ids, segment.place).await?;
        let mut by_id = ids
            .into_iter()
            .zip(stored.into_iter().zip(errors).zip(infos));
        let mut next_stored = by_id.next();
        let mut found = Vec::new();
        for element in elements {
            let mut record = (None, None, None);
            if next_stored.as_ref().is_some_and(|(id, _)| *id == element) {
                if let Some((_, ((envelope, errors), info))) = next_stored.take() {
                    record = (envelope, errors, info);
                }
                next_stored = by_id.next();
            }
            let (envelope, errors, info) = record;
            // A ready element that msgs does not hold is an envelope itself.
            let (storage_id, envelope) = match envelope {
                Some(envelope) => (
                    Some(segment.shard.shown_id(&String::from_utf8_lossy(&element))),
                    envelope,
                ),
                None if segment.place == Place::Ready => (None, element.clone()),
                None => (
                    Some(segment.shard.shown_id(&String::from_utf8_lossy(&element))),
                    Bytes::new(),
                ),
            };
            let errors = errors.as_deref().map(parse_errors).unwrap_or_default();
            let reason = info
                .as_deref()
                .map(DeadInfo::parse)
                .and_then(|info| info.reason);
            let (message, decode_error) = MessageSummary::read(&envelope);
            let candidate = Candidate {
                shown_id: storage_id.clone(),
                message: message.as_ref(),
                envelope: &envelope,
                errors: &errors,
                reason: reason.as_deref(),
            };
            if query.matches(&candidate) {
                found.push(Found {
                    place: segment.place,
                    storage_id,
                    message,
                    decode_error,
                    errors,
                    reason,
                    element,
                    envelope,
                    segment: index,
                });
            }
        }
        Ok((read, found))
    }

    /// The envelope, errors and (dead letters) dead-letter info of stored ids.
    #[allow(clippy::type_complexity)]
    async fn stored_fields(
        &self,
        keys: &QueueKeys,
        ids: &[Bytes],
        place: Place,
    ) -> Result<(Vec<Option<Bytes>>, Vec<Option<Bytes>>, Vec<Option<Bytes>>)> {
        if ids.is_empty() {
            return Ok(Default::default());
        }
        let client = self.client();
        let ids = ids.to_vec();
        let (envelopes, errors) = tokio::try_join!(
            client.hmget::<Vec<Option<Bytes>>, _, _>(&keys.msgs, ids.clone()),
            client.hmget::<Vec<Option<Bytes>>, _, _>(&keys.errors, ids.clone()),
        )?;
        let infos = if place == Place::Dead {
            client.hmget(&keys.dead_info, ids).await?
        } else {
            vec![None; envelopes.len()]
        };
        Ok((envelopes, errors, infos))
    }
}

/// The segments a query scans, in order: place by place, shard by shard.
pub(super) fn segments<'a>(query: &SearchQuery, shards: &'a [Shard]) -> Vec<Segment<'a>> {
    query
        .searched_places()
        .into_iter()
        .flat_map(|place| shards.iter().map(move |shard| Segment { place, shard }))
        .collect()
}

/// The test of `surely_fresh` in common.lua: an envelope as sent starts with `{` or a
/// byte ≥ 0x80; a storage id never does.
fn surely_fresh(element: &[u8]) -> bool {
    element.first().is_some_and(|&b| b == b'{' || b >= 0x80)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_and_bad_ones_are_refused() {
        let cursor: Cursor = "2.300".parse().unwrap();
        assert_eq!(cursor.to_string(), "2.300");
        for bad in ["", "2", "a.b", "1.-3"] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad}");
        }
    }

    #[test]
    fn every_criterion_must_hold() {
        let message = MessageSummary::decode(
            br#"{"v":1,"id":"01J","type":"payments","sent":1,"headers":{"tenant":"Acme"},"body":{"n":7}}"#,
        )
        .unwrap();
        let errors = [ErrorRecord::now("card declined (code 51)")];
        let candidate = Candidate {
            shown_id: Some("~4".to_owned()),
            message: Some(&message),
            envelope: b"",
            errors: &errors,
            reason: Some("rejected"),
        };
        let q = SearchQuery::default;
        assert!(q().id("01J").matches(&candidate));
        assert!(q().id("~4").matches(&candidate));
        assert!(!q().id("~5").matches(&candidate));
        assert!(q().message_type("Payments").matches(&candidate));
        assert!(q().header("tenant", "acme").matches(&candidate));
        assert!(!q().header("tenant", "other").matches(&candidate));
        assert!(q().error("DECLINED").matches(&candidate));
        assert!(q().error("reject").matches(&candidate));
        assert!(q().body("\"n\":7").matches(&candidate));
        assert!(!q().body("\"n\":8").matches(&candidate));
        assert!(!q()
            .body("\"n\":7")
            .message_type("other")
            .matches(&candidate));
        assert!(q().is_empty());
    }
}
