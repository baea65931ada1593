//! Redrive: dead letters back to their source queue (or another), the way BabelQueue's
//! `redrive.py` does it (drop the headers and the `dead_letter` block, `attempts` 0, target
//! `dead_letter.original_queue`, else `meta.queue`; poison stays in the DLQ), but one
//! atomic step per record (`lua/redrive.lua`) and a dry run that writes nothing.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use fred::prelude::ListInterface;
use fred::types::Value;

use crate::admin::{decode_stored, record_id, Admin, DeadLetterInfo};
use crate::keys::{validate_queue, Layout, QueueKeys};
use crate::{scripts, Content, Result};

/// Records read (and moved) per round trip.
const BATCH: usize = 100;

/// What to redrive, and where.
#[derive(Debug, Clone, Default)]
pub struct RedriveOptions {
    to: Option<String>,
    max: Option<usize>,
    dry_run: bool,
    reason: Option<String>,
    records: Option<BTreeSet<String>>,
}

impl RedriveOptions {
    /// Every redrivable record back to its own source queue.
    pub fn new() -> Self {
        RedriveOptions::default()
    }

    /// Send every record to this queue instead (a sandbox replay).
    pub fn to(mut self, queue: impl Into<String>) -> Self {
        self.to = Some(queue.into());
        self
    }

    /// Redrive at most this many records (the rest stay; the run stops after the batch
    /// that reaches the limit, so the report lists only the records looked at).
    pub fn max(mut self, max: usize) -> Self {
        self.max = Some(max);
        self
    }

    /// Only plan: report what would move, change nothing (no write at all, unlike the
    /// SDK's dry run, which pops and re-pushes every record).
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Only records whose `dead_letter.reason` is this (`failed`, `unknown_urn`).
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Only these records, by their ids ([`record_id`](crate::record_id): what the
    /// operator surface shows as a dead letter's storage id).
    pub fn records(mut self, ids: impl IntoIterator<Item = String>) -> Self {
        self.records = Some(ids.into_iter().collect());
        self
    }
}

/// What happened to one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Moved to its target.
    Redriven,
    /// Would be moved (dry run).
    WouldRedrive,
    /// Poison (never an envelope): stays in the DLQ.
    Poison,
    /// Not selected by the reason filter, or beyond `max`: stays.
    NotSelected,
    /// No target (no `to`, `original_queue` nor `meta.queue`, or an invalid name): stays.
    NoTarget,
    /// Gone from the DLQ before it could be moved (another reader took it): not moved.
    Vanished,
}

/// One record of a redrive run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedriveItem {
    /// The record's id ([`record_id`](crate::record_id)).
    pub record_id: String,
    /// `meta.id`, when the record is an envelope.
    pub message_id: Option<String>,
    /// `trace_id`.
    pub trace_id: Option<String>,
    /// The URN (`job`).
    pub urn: Option<String>,
    /// `dead_letter.reason`.
    pub reason: Option<String>,
    /// The target queue (planned even on a dry run).
    pub to: Option<String>,
    /// What happened.
    pub outcome: Outcome,
}

/// A redrive run's summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedriveReport {
    /// Records moved (or, on a dry run, that would be).
    pub redriven: usize,
    /// Poison records left in the DLQ.
    pub poison: usize,
    /// Records left for another reason (filter, `max`, no target).
    pub skipped: usize,
    /// Records another reader took first.
    pub vanished: usize,
    /// One item per record looked at, in DLQ order.
    pub items: Vec<RedriveItem>,
}

/// A record planned for a move: (item index, record as stored, body to publish).
type Move = (usize, Bytes, Vec<u8>);

impl Admin {
    /// Redrives the dead letters of `queue` (its `.dlq`) in `layout`. Looks at the records
    /// present when it starts, oldest first, in batches of 100; each move is atomic (the
    /// record leaves the DLQ exactly when its body joins the target). Records appended
    /// meanwhile are left for the next run; one that another reader removes first is
    /// reported [`Outcome::Vanished`], never moved twice. On an error the batches before
    /// it stay moved (each move is whole); run again to go on.
    pub async fn redrive(
        &self,
        layout: &Layout,
        queue: &str,
        options: &RedriveOptions,
    ) -> Result<RedriveReport> {
        validate_queue(queue)?;
        if let Some(to) = &options.to {
            validate_queue(to)?;
        }
        let keys = QueueKeys::new(layout, queue);
        self.expect_types(&[(keys.dlq.as_str(), "list")]).await?;
        let total: usize = self.client().llen(&keys.dlq).await?;
        let mut report = RedriveReport::default();
        // `position` walks the records that stay; moved ones leave the list.
        let (mut position, mut looked) = (0usize, 0usize);
        while looked < total {
            let take = BATCH.min(total - looked);
            let first = i64::try_from(position).unwrap_or(i64::MAX);
            let last = i64::try_from(position + take - 1).unwrap_or(i64::MAX);
            let records: Vec<Bytes> = self.client().lrange(&keys.dlq, first, last).await?;
            if records.is_empty() {
                break;
            }
            looked += records.len();
            let mut moves: BTreeMap<String, Vec<Move>> = BTreeMap::new();
            let read = records.len();
            for stored in records {
                let index = report.items.len();
                let (item, body) = plan(layout, &stored, options, report.redriven);
                match (item.outcome, body) {
                    (Outcome::WouldRedrive, Some(body)) if !options.dry_run => {
                        let to = item.to.clone().unwrap_or_default();
                        moves.entry(to).or_default().push((index, stored, body));
                        report.redriven += 1;
                    }
                    (Outcome::WouldRedrive, _) => report.redriven += 1,
                    (Outcome::Poison, _) => report.poison += 1,
                    _ => report.skipped += 1,
                }
                report.items.push(item);
            }
            let mut moved = 0;
            for (to, batch) in moves {
                let flags = self.move_records(layout, &keys, &to, &batch).await?;
                for ((index, _, _), ok) in batch.iter().zip(flags) {
                    if ok {
                        report.items[*index].outcome = Outcome::Redriven;
                        moved += 1;
                    } else {
                        report.items[*index].outcome = Outcome::Vanished;
                        report.redriven -= 1;
                        report.vanished += 1;
                    }
                }
            }
            // Vanished records left the list too, so only kept ones advance the walk.
            let gone = moved + report.vanished_in_batch(read);
            position += read - gone.min(read);
            if options.max.is_some_and(|max| report.redriven >= max) {
                break;
            }
        }
        Ok(report)
    }

    async fn move_records(
        &self,
        layout: &Layout,
        source: &QueueKeys,
        to: &str,
        batch: &[Move],
    ) -> Result<Vec<bool>> {
        let target = QueueKeys::new(layout, to);
        let mut keys = vec![source.dlq.clone(), target.ready];
        if matches!(layout, Layout::Laravel { .. }) {
            keys.push(target.notify);
            keys.push(source.dlq_notify.clone());
        }
        let mut args = Vec::with_capacity(batch.len() * 2);
        for (_, stored, body) in batch {
            args.push(Value::Bytes(stored.clone()));
            args.push(Value::Bytes(Bytes::from(body.clone())));
        }
        let flags = scripts::run_flags(&scripts::REDRIVE, self.client(), keys, args).await?;
        if flags.len() != batch.len() {
            return Err(scripts::unexpected(
                &scripts::REDRIVE,
                &Value::from(format!("{} flags for {} records", flags.len(), batch.len())),
            ));
        }
        Ok(flags)
    }
}

impl RedriveReport {
    /// How many of the last `read` items vanished.
    fn vanished_in_batch(&self, read: usize) -> usize {
        self.items
            .iter()
            .rev()
            .take(read)
            .filter(|i| i.outcome == Outcome::Vanished)
            .count()
    }
}

/// The plan for one record: its item (outcome `WouldRedrive` when it is to move) and the
/// body to publish.
fn plan(
    layout: &Layout,
    stored: &Bytes,
    options: &RedriveOptions,
    planned: usize,
) -> (RedriveItem, Option<Vec<u8>>) {
    let (body, _headers, content) = decode_stored(layout, stored.clone());
    let block = DeadLetterInfo::of(&body);
    let mut item = RedriveItem {
        record_id: record_id(stored),
        message_id: None,
        trace_id: None,
        urn: None,
        reason: block.as_ref().and_then(|b| b.reason.clone()),
        to: None,
        outcome: Outcome::Poison,
    };
    let Content::Envelope(mut envelope) = content else {
        return (item, None);
    };
    item.message_id = envelope.meta().id.clone();
    item.trace_id = envelope.trace_id().map(str::to_owned);
    item.urn = Some(envelope.urn().to_owned());
    if (options.reason.is_some() && options.reason != item.reason)
        || options
            .records
            .as_ref()
            .is_some_and(|ids| !ids.contains(&item.record_id))
        || options.max.is_some_and(|max| planned >= max)
    {
        item.outcome = Outcome::NotSelected;
        return (item, None);
    }
    let target = options
        .to
        .clone()
        .or_else(|| {
            block
                .and_then(|b| b.original_queue)
                .filter(|q| !q.is_empty())
        })
        .or_else(|| envelope.meta().queue.clone());
    let Some(target) = target.filter(|q| validate_queue(q).is_ok()) else {
        item.outcome = Outcome::NoTarget;
        return (item, None);
    };
    item.to = Some(target);
    // As the SDK resets it: no block, attempts 0, every other member kept (the frame and
    // its headers are not carried over).
    envelope.remove_member("dead_letter");
    envelope.set_attempts(0);
    item.outcome = Outcome::WouldRedrive;
    (item, Some(envelope.encode()))
}
