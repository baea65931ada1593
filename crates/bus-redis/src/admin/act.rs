//! Acting on what a search found, page by page: requeue, delete or move each match, with
//! one script per page and place that re-checks each message is still where the scan
//! found it (`lua/admin_take_found.lua` for ready and delayed messages; the dead-letter
//! scripts of `dead_letters` for dead letters). A message reserved, promoted or requeued
//! meanwhile is left alone and counted as gone: never duplicated, never lost.

use bus_core::records::source_name;
use bus_core::transport::Source;
use fred::prelude::ListInterface;
use fred::types::Value;
use serde::Serialize;

use super::dead_letters::Deleted;
use super::search::{segments, Found, Place, SearchPage, SearchQuery, Segment};
use super::{hash_tag, Admin, Selection};
use crate::keys::QueueKeys;
use crate::scripts;
use crate::{Error, Result};

/// Matches acted on per script call.
const BATCH: usize = 100;

/// What to do with every match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Dead letters back to their queue's ready list (their full delivery limit again);
    /// delayed messages to the ready list now; ready messages stay as they are.
    Requeue,
    /// Delete them.
    Delete,
    /// Move them to another queue's ready list as fresh messages.
    Move(Source),
}

impl Action {
    /// `requeue`, `delete` or `move`, as the audit log names it.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Requeue => "requeue",
            Action::Delete => "delete",
            Action::Move(_) => "move",
        }
    }
}

/// What acting on one page did.
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct Acted {
    /// Matches in the page.
    pub matched: u64,
    /// Matches requeued, deleted or moved.
    pub changed: u64,
    /// Matches no longer where the scan found them (taken by a consumer, promoted,
    /// requeued or deleted meanwhile): left alone.
    pub gone: u64,
    /// Matches the action leaves as they are: ready messages asked to be requeued, dead
    /// letters without an envelope.
    pub unchanged: u64,
    /// Matches copied to a queue in another slot whose original was gone before it could
    /// be removed: now in both queues (a duplicate, never a loss).
    pub duplicated: u64,
    /// The message ids (or storage ids) of the matches changed.
    pub ids: Vec<String>,
}

impl Acted {
    fn add(&mut self, other: Acted) {
        self.matched += other.matched;
        self.changed += other.changed;
        self.gone += other.gone;
        self.unchanged += other.unchanged;
        self.duplicated += other.duplicated;
        self.ids.extend(other.ids);
    }
}

/// A page searched and acted on.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ActedPage {
    /// The page as the search found it (`next` already accounts for what left it).
    pub page: SearchPage,
    /// What was done.
    pub acted: Acted,
}

impl Admin {
    /// Searches one page (as [`Admin::search`]) and acts on its matches. Pass the page's
    /// `next` back until it is `None`; the cursor accounts for the matches that left the
    /// place it scans. A move to the queue itself is refused. Moves within one slot (the
    /// subscriptions of a topic) are one script; to another slot a match is copied, then
    /// removed if still there (docs/redis-layout.md, "What is not atomic across queues").
    pub async fn act(
        &self,
        source: &Source,
        query: &SearchQuery,
        cursor: Option<&str>,
        limit: u64,
        action: &Action,
    ) -> Result<ActedPage> {
        if let Action::Move(target) = action {
            if target == source {
                return Err(Error::InvalidRequest(format!(
                    "cannot move messages of {} to itself",
                    source_name(source)
                )));
            }
        }
        let shards = self.shards(source).await?;
        let segments = segments(query, &shards);
        let mut page = self
            .search_segments(&segments, query, cursor, limit)
            .await?;
        let mut acted = Acted::default();
        let mut removed_from_last = 0;
        // Where the next page starts: the segment and offset of `next`, owned.
        let last: Option<(usize, u64)> = page
            .next
            .as_deref()
            .and_then(|c| c.parse::<super::search::Cursor>().ok())
            .map(|c| (c.segment(), c.offset()));
        for (index, segment) in segments.iter().enumerate() {
            let found: Vec<&Found> = page.found.iter().filter(|f| f.segment == index).collect();
            if found.is_empty() {
                continue;
            }
            for batch in found.chunks(BATCH) {
                let done = self.act_on(source, segment, batch, action).await?;
                if last.is_some_and(|(s, _)| s == index) {
                    removed_from_last += done.changed + done.duplicated;
                }
                acted.add(done);
            }
        }
        // The removed matches were before the cursor in its segment: step back over them.
        if let Some((segment, offset)) = last.filter(|_| removed_from_last > 0) {
            page.next = Some(format!(
                "{segment}.{}",
                offset.saturating_sub(removed_from_last)
            ));
        }
        Ok(ActedPage { page, acted })
    }

    async fn act_on(
        &self,
        source: &Source,
        segment: &Segment<'_>,
        found: &[&Found],
        action: &Action,
    ) -> Result<Acted> {
        if segment.place == Place::Dead {
            return self.act_on_dead(source, segment, found, action).await;
        }
        let mut acted = Acted {
            matched: found.len() as u64,
            ..Acted::default()
        };
        let keys = &segment.shard.keys;
        let place = segment.place.name();
        let elements: Vec<Value> = found
            .iter()
            .map(|f| Value::Bytes(f.element.clone()))
            .collect();
        let flags = match action {
            Action::Requeue if segment.place == Place::Ready => {
                acted.unchanged = acted.matched;
                return Ok(acted);
            }
            Action::Requeue => {
                self.take_found(keys, &keys.ready, place, "due", elements)
                    .await?
            }
            Action::Delete => {
                self.take_found(keys, &keys.ready, place, "delete", elements)
                    .await?
            }
            Action::Move(target) => {
                let targets = self.shards(target).await?;
                let index = segment.shard.index.map_or(0, usize::from);
                let to = &targets[index % targets.len()];
                let same_slot = hash_tag(target) == hash_tag(source)
                    && segment.shard.index.is_none()
                    && to.index.is_none();
                if same_slot {
                    self.take_found(keys, &to.keys.ready, place, "move", elements)
                        .await?
                } else {
                    // Another slot: copy first (one RPUSH), then remove what is still
                    // there; a match gone meanwhile is now a duplicate.
                    let envelopes: Vec<Value> = found
                        .iter()
                        .map(|f| Value::Bytes(f.envelope.clone()))
                        .collect();
                    let _: i64 = self.client().rpush(&to.keys.ready, envelopes).await?;
                    let flags = self
                        .take_found(keys, &keys.ready, place, "delete", elements)
                        .await?;
                    acted.duplicated = flags.iter().filter(|f| !**f).count() as u64;
                    flags
                }
            }
        };
        for (f, done) in found.iter().zip(&flags) {
            if *done {
                acted.changed += 1;
                acted.ids.push(shown(f));
            }
        }
        acted.gone = acted
            .matched
            .saturating_sub(acted.changed + acted.unchanged + acted.duplicated);
        Ok(acted)
    }

    /// Acts on dead letters found: deleted for good, or requeued (moved) by storage id.
    async fn act_on_dead(
        &self,
        source: &Source,
        segment: &Segment<'_>,
        found: &[&Found],
        action: &Action,
    ) -> Result<Acted> {
        let mut acted = Acted {
            matched: found.len() as u64,
            ..Acted::default()
        };
        let keys = &segment.shard.keys;
        let ids: Vec<String> = found.iter().filter_map(|f| f.storage_id.clone()).collect();
        let changed: Vec<String> = match action {
            Action::Delete => {
                let own: Vec<String> = found
                    .iter()
                    .map(|f| String::from_utf8_lossy(&f.element).into_owned())
                    .collect();
                // Gone for good: an attachment goes to the orphans list, as with `delete-dead`.
                let deleted = self.delete_dead(keys, own, Deleted::Gone).await?;
                found
                    .iter()
                    .filter(|f| deleted.iter().any(|d| f.element == d.as_bytes()))
                    .filter_map(|f| f.storage_id.clone())
                    .collect()
            }
            Action::Requeue | Action::Move(_) => {
                let to = match action {
                    Action::Move(target) => Some(target),
                    _ => None,
                };
                let done = self
                    .requeue(source, &Selection::Ids(ids.clone()), to)
                    .await?;
                acted.unchanged = done.skipped.len() as u64;
                acted.duplicated = done.duplicated.len() as u64;
                done.requeued
            }
        };
        acted.changed = changed.len() as u64;
        acted.gone = acted
            .matched
            .saturating_sub(acted.changed + acted.unchanged + acted.duplicated);
        acted.ids = found
            .iter()
            .filter(|f| f.storage_id.as_ref().is_some_and(|id| changed.contains(id)))
            .map(|f| shown(f))
            .collect();
        Ok(acted)
    }

    /// Runs `admin_take_found.lua`; one flag per element, true where it acted.
    async fn take_found(
        &self,
        keys: &QueueKeys,
        target_ready: &str,
        place: &str,
        op: &str,
        elements: Vec<Value>,
    ) -> Result<Vec<bool>> {
        let script = &scripts::ADMIN_TAKE_FOUND;
        let mut args = vec![Value::from(place), Value::from(op)];
        args.extend(elements);
        let reply = script
            .run_array(
                self.client(),
                vec![
                    keys.ready.clone(),
                    keys.delayed.clone(),
                    keys.msgs.clone(),
                    keys.deliveries.clone(),
                    keys.errors.clone(),
                    target_ready.to_owned(),
                ],
                args,
            )
            .await?;
        reply
            .iter()
            .map(|flag| script.int(flag).map(|n| n == 1))
            .collect()
    }

    /// Acts on every match, page after page from the start, and sums what was done:
    /// what `bus search --requeue` runs. `progress` is called after each page with it.
    pub async fn act_all(
        &self,
        source: &Source,
        query: &SearchQuery,
        limit: u64,
        action: &Action,
        mut progress: impl FnMut(&ActedPage),
    ) -> Result<Acted> {
        let mut total = Acted::default();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .act(source, query, cursor.as_deref(), limit, action)
                .await?;
            progress(&page);
            total.add(page.acted.clone());
            match page.page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(total),
            }
        }
    }
}

/// What a found message is shown as: its message id, else its storage id.
fn shown(f: &Found) -> String {
    f.message
        .as_ref()
        .map(|m| m.id.clone())
        .or_else(|| f.storage_id.clone())
        .unwrap_or_default()
}
