//! BabelQueue's layouts behind bus-core's [`Operator`], so the `bus` tool, the dashboard
//! and `bus metrics` show BabelQueue queues beside the bus's own: [`LayoutAdmin`], one
//! per layout (kind `babel` for the legacy layout, `laravel` for Laravel's), over
//! [`Admin`]. The rules are in `docs/babelqueue.md` ("Management").

use std::collections::BTreeSet;

use async_trait::async_trait;
use bus_core::operator::{Capability, Operator, Purged, ReadyMessage, Requeued, Selection};
use bus_core::records::{DeadLetter, ErrorRecord, MessageSummary, QueueStats};
use fred::prelude::{KeysInterface, ListInterface};
use fred::types::Value;

use crate::admin::{record_id, Admin, Area, DeadLetterInfo, Peeked, MAX_PEEK};
use crate::keys::{validate_queue, Layout, QueueKeys};
use crate::redrive::{Outcome, RedriveOptions};
use crate::{scripts, Content, Result};

/// The kind name of legacy-layout queues.
pub const LEGACY_KIND: &str = "babel";
/// The kind name of Laravel-layout queues.
pub const LARAVEL_KIND: &str = "laravel";
/// The `format` a [`MessageSummary`] of a BabelQueue envelope shows.
pub const FORMAT: &str = "babelqueue";

/// Records read per round trip when looking for dead letters by id, and waiting
/// messages deleted per purge step.
const BATCH: i64 = 100;

/// The BabelQueue queues of one layout, as an [`Operator`] (a cheap `Clone`).
///
/// Everything [`Admin`] offers, in the records every tool shows: counts as
/// [`QueueStats`], envelopes as [`MessageSummary`] (type: the URN, body: `data`, format
/// `babelqueue`), dead letters as [`DeadLetter`] (reason, error and attempts from the
/// `dead_letter` block), each dead letter's storage id its [`record_id`](crate::record_id).
/// Requeue is [`Admin::redrive`] (headers dropped, attempts reset, poison left, one atomic
/// step per record); delete and purge are one script each (`lua/admin_*.lua`).
#[derive(Debug, Clone)]
pub struct LayoutAdmin {
    admin: Admin,
    layout: Layout,
}

impl Admin {
    /// The queues of `layout` behind the operator surface ([`LayoutAdmin`]).
    pub fn layout(&self, layout: Layout) -> LayoutAdmin {
        let admin = match &layout {
            Layout::Laravel { prefix } => self.clone().laravel_prefix(prefix.clone()),
            Layout::Legacy => self.clone(),
        };
        LayoutAdmin { admin, layout }
    }
}

impl LayoutAdmin {
    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The management it works through.
    pub fn admin(&self) -> &Admin {
        &self.admin
    }

    fn keys(&self, queue: &str) -> Result<QueueKeys> {
        validate_queue(queue)?;
        Ok(QueueKeys::new(&self.layout, queue))
    }

    fn laravel(&self) -> bool {
        matches!(self.layout, Layout::Laravel { .. })
    }

    /// The first dead-letter record whose id is `id`, read in batches of 100.
    async fn find_dead(&self, keys: &QueueKeys, id: &str) -> Result<Option<bytes::Bytes>> {
        let mut start = 0i64;
        loop {
            let records: Vec<bytes::Bytes> = self
                .admin
                .client()
                .lrange(&keys.dlq, start, start + BATCH - 1)
                .await?;
            if let Some(found) = records.iter().find(|r| record_id(r) == id) {
                return Ok(Some(found.clone()));
            }
            if (records.len() as i64) < BATCH {
                return Ok(None);
            }
            start += BATCH;
        }
    }
}

/// A stored element as every tool shows a message: the envelope's id, URN, creation
/// time, frame headers (and `trace_id`), and `data` as the body.
fn summary(peeked: &Peeked) -> (Option<MessageSummary>, Option<String>) {
    match &peeked.content {
        Content::Envelope(envelope) => {
            let meta = envelope.meta();
            let mut headers = peeked.headers.clone();
            if let Some(trace) = envelope.trace_id() {
                headers
                    .entry("trace_id".to_owned())
                    .or_insert_with(|| trace.to_owned());
            }
            let body = envelope.data().to_owned();
            let message = MessageSummary::new(
                meta.id.clone().unwrap_or_default(),
                envelope.urn(),
                meta.created_at.unwrap_or(0).max(0) as u64,
                headers,
                FORMAT,
                body,
            );
            (Some(message), None)
        }
        Content::Poison(why) => {
            let excerpt: String = String::from_utf8_lossy(&peeked.body)
                .chars()
                .take(80)
                .collect();
            (None, Some(format!("poison ({why}): {excerpt:?}")))
        }
    }
}

fn attempts(peeked: &Peeked) -> u64 {
    match &peeked.content {
        Content::Envelope(envelope) => envelope.attempts().max(0) as u64,
        Content::Poison(_) => 0,
    }
}

fn dead_letter(position: u64, record: &Peeked, block: Option<&DeadLetterInfo>) -> DeadLetter {
    let at = block.and_then(|b| b.failed_at).map(|ms| ms.max(0) as u64);
    let errors = block
        .and_then(|b| {
            let text = match (&b.exception, &b.error) {
                (Some(kind), Some(error)) => format!("{kind}: {error}"),
                (None, Some(error)) => error.clone(),
                (Some(kind), None) => kind.clone(),
                (None, None) => return None,
            };
            Some(vec![ErrorRecord {
                message: text,
                at_ms: at.unwrap_or(0),
            }])
        })
        .unwrap_or_default();
    let count = block
        .and_then(|b| b.attempts)
        .map_or_else(|| attempts(record), |n| n.max(0) as u64);
    let mut dead = DeadLetter::new(
        position,
        record_id(&record.stored),
        Some(record.stored.clone()),
        block.and_then(|b| b.reason.clone()),
        at,
        count,
        errors,
    );
    (dead.message, dead.decode_error) = summary(record);
    dead
}

#[async_trait]
impl Operator for LayoutAdmin {
    fn kind(&self) -> &'static str {
        if self.laravel() {
            LARAVEL_KIND
        } else {
            LEGACY_KIND
        }
    }

    fn system(&self) -> &'static str {
        "babelqueue"
    }

    /// Everything but pause and resume (BabelQueue has no flow control).
    fn supports(&self, capability: Capability) -> bool {
        !matches!(
            capability,
            Capability::Pause | Capability::Resume | Capability::CloseBreaker
        )
    }

    /// The queues [`Admin::queues`] finds in this layout (a legacy queue holding only
    /// ready messages is not found: its ready list is a bare list).
    async fn queues(&self) -> bus_core::Result<Vec<String>> {
        let laravel = self.laravel();
        Ok(self
            .admin
            .queues()
            .await?
            .into_iter()
            .filter(|q| matches!(q.layout, Layout::Laravel { .. }) == laravel)
            .map(|q| q.queue)
            .collect())
    }

    async fn exists(&self, queue: &str) -> bus_core::Result<bool> {
        let keys = self.keys(queue)?;
        let names: Vec<String> = [keys.ready, keys.in_flight, keys.timers, keys.dlq]
            .into_iter()
            .collect();
        let found: i64 = self
            .admin
            .client()
            .exists(names)
            .await
            .map_err(crate::Error::from)?;
        Ok(found > 0)
    }

    /// [`Admin::counts`] (one pipeline, not one snapshot), with the age of the next
    /// ready message from its `meta.created_at`. `expired_locks` are the lapsed
    /// reservations; `delayed` is 0 on the legacy layout, which has no delayed set.
    async fn stats(&self, queue: &str) -> bus_core::Result<QueueStats> {
        let counts = self.admin.counts(&self.layout, queue).await?;
        let head = self
            .admin
            .peek(&self.layout, queue, Area::Ready, 0, 1)
            .await?;
        let sent = head.first().and_then(|p| match &p.content {
            Content::Envelope(e) => e.meta().created_at.map(|ms| ms.max(0) as u64),
            Content::Poison(_) => None,
        });
        let now = bus_core::transport::now_ms();
        let mut stats = QueueStats::default();
        stats.queue = queue.to_owned();
        stats.ready = counts.ready;
        stats.in_flight = counts.in_flight;
        stats.expired_locks = counts.lapsed;
        stats.delayed = counts.delayed.unwrap_or(0);
        stats.dead_letters = counts.dead_letters;
        stats.oldest_sent_at_ms = sent;
        stats.oldest_age_ms = sent.map(|sent| now.saturating_sub(sent));
        stats.redis_now_ms = now;
        Ok(stats)
    }

    async fn peek(&self, queue: &str, n: u64) -> bus_core::Result<Vec<ReadyMessage>> {
        let n = usize::try_from(n).unwrap_or(MAX_PEEK);
        let peeked = self
            .admin
            .peek(&self.layout, queue, Area::Ready, 0, n)
            .await?;
        Ok(peeked
            .iter()
            .map(|p| {
                let (message, decode_error) = summary(p);
                ReadyMessage::new(p.position as u64, None, attempts(p), message, decode_error)
            })
            .collect())
    }

    async fn dead_letters(&self, queue: &str, n: u64) -> bus_core::Result<Vec<DeadLetter>> {
        let n = usize::try_from(n).unwrap_or(MAX_PEEK);
        let dead = self.admin.dead_letters(&self.layout, queue, 0, n).await?;
        Ok(dead
            .iter()
            .map(|d| dead_letter(d.record.position as u64, &d.record, d.block.as_ref()))
            .collect())
    }

    /// [`Admin::redrive`]: each record moves in one atomic step, to `to`, else to its
    /// `dead_letter.original_queue` (else `meta.queue`); poison and records without a
    /// valid target stay ([`Requeued::skipped`]).
    async fn requeue(
        &self,
        queue: &str,
        selection: &Selection,
        to: Option<&str>,
    ) -> bus_core::Result<Requeued> {
        let mut options = RedriveOptions::new();
        if let Some(to) = to {
            options = options.to(to);
        }
        let wanted: Option<BTreeSet<String>> = match selection {
            Selection::All => None,
            Selection::Ids(ids) => Some(ids.iter().cloned().collect()),
        };
        if let Some(ids) = &wanted {
            if ids.is_empty() {
                let mut report = Requeued::default();
                report.target = to.unwrap_or(queue).to_owned();
                return Ok(report);
            }
            options = options.records(ids.iter().cloned());
        }
        let run = self.admin.redrive(&self.layout, queue, &options).await?;
        let mut report = Requeued::default();
        let mut targets = BTreeSet::new();
        let mut seen = BTreeSet::new();
        for item in run.items {
            if wanted
                .as_ref()
                .is_some_and(|w| !w.contains(&item.record_id))
            {
                continue;
            }
            seen.insert(item.record_id.clone());
            match item.outcome {
                Outcome::Redriven => {
                    targets.extend(item.to);
                    report.requeued.push(item.record_id);
                }
                Outcome::Vanished => report.not_found.push(item.record_id),
                Outcome::NotSelected => {}
                _ => report.skipped.push(item.record_id),
            }
        }
        if let Some(wanted) = &wanted {
            report
                .not_found
                .extend(wanted.iter().filter(|id| !seen.contains(*id)).cloned());
        }
        report.target = match (to, targets.len()) {
            (Some(to), _) => to.to_owned(),
            (None, 0) => queue.to_owned(),
            (None, _) => targets.into_iter().collect::<Vec<_>>().join(", "),
        };
        Ok(report)
    }

    /// Deletes the first dead letter whose record id is `id`, in one script
    /// (`lua/admin_delete_dead.lua`; on Laravel with one wake-up token of the DLQ).
    async fn delete_dead_letter(&self, queue: &str, id: &str) -> bus_core::Result<bool> {
        let keys = self.keys(queue)?;
        let Some(record) = self.find_dead(&keys, id).await? else {
            return Ok(false);
        };
        let mut script_keys = vec![keys.dlq.clone()];
        if self.laravel() {
            script_keys.push(keys.dlq_notify.clone());
        }
        let deleted = scripts::run_int(
            &scripts::ADMIN_DELETE_DEAD,
            self.admin.client(),
            script_keys,
            vec![Value::Bytes(record)],
        )
        .await?;
        Ok(deleted == 1)
    }

    /// Deletes the ready messages (and, on Laravel, the delayed ones), 100 per script
    /// call (`lua/admin_purge.lua`), at most as many as there were when it started.
    /// Reserved messages and dead letters stay.
    async fn purge(&self, queue: &str) -> bus_core::Result<Purged> {
        let keys = self.keys(queue)?;
        let counts = self.admin.counts(&self.layout, queue).await?;
        let (mut ready_left, mut delayed_left) = (counts.ready, counts.delayed.unwrap_or(0));
        let mut script_keys = vec![keys.ready.clone()];
        if self.laravel() {
            script_keys.push(keys.notify.clone());
            script_keys.push(keys.timers.clone());
        }
        let mut purged = Purged::default();
        while ready_left + delayed_left > 0 {
            let reply = scripts::run(
                &scripts::ADMIN_PURGE,
                self.admin.client(),
                script_keys.clone(),
                vec![
                    Value::from(ready_left.min(BATCH as u64) as i64),
                    Value::from(delayed_left.min(BATCH as u64) as i64),
                ],
            )
            .await?;
            let done: Vec<u64> = match &reply {
                Value::Array(items) => items.iter().filter_map(Value::as_u64).collect(),
                _ => Vec::new(),
            };
            let [ready, delayed] = done[..] else {
                return Err(scripts::unexpected(&scripts::ADMIN_PURGE, &reply).into());
            };
            if ready + delayed == 0 {
                break; // emptied by someone else meanwhile
            }
            purged.ready += ready;
            purged.delayed += delayed;
            ready_left = ready_left.saturating_sub(ready);
            delayed_left = delayed_left.saturating_sub(delayed);
        }
        Ok(purged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_a_layout_cannot_do_is_a_declared_capability_and_a_clear_error() {
        // No I/O: the refusal comes before any command.
        let admin = Admin::new(fred::prelude::Client::default());
        for (layout, kind) in [(Layout::Legacy, "babel"), (Layout::laravel(), "laravel")] {
            let operator = admin.layout(layout);
            assert_eq!(operator.kind(), kind);
            assert_eq!(operator.system(), "babelqueue");
            assert!(operator.supports(Capability::Purge));
            assert!(!operator.supports(Capability::Pause));
            let error = operator.pause("orders").await.unwrap_err();
            assert!(
                matches!(
                    error,
                    bus_core::Error::Unsupported {
                        capability: Capability::Pause,
                        ..
                    }
                ),
                "{error}"
            );
            assert_eq!(error.to_string(), format!("{kind} queues cannot be paused"));
            assert!(operator.resume("orders").await.is_err());
        }
    }

    #[test]
    fn record_ids_are_stable_and_tell_records_apart() {
        let a = record_id(br#"{"job":"urn:a","attempts":1}"#);
        assert_eq!(a.len(), 16);
        assert_eq!(a, record_id(br#"{"job":"urn:a","attempts":1}"#));
        assert_ne!(a, record_id(br#"{"job":"urn:a","attempts":2}"#));
    }
}
