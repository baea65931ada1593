//! How an [`Outcome`] shows: [`Outcome::json`] (what `bus --json` prints; its fields are
//! listed in docs/operations.md, "What `--json` prints", and checked by
//! `crates/bus-cli/tests/json_fields.rs`), [`Outcome::answer`] (what the dashboard
//! answers), [`Outcome::lines`] and [`Outcome::notes`] (a terminal's stdout and stderr),
//! and what was asked for but not there ([`Outcome::missed`], [`Outcome::shortfall`]),
//! which the `bus` tool exits 1 on.

use bus_babelqueue::Outcome as Redrive;
use serde::Serialize;
use serde_json::{json, Value};

use super::outcome::purged_detail;
use super::{Done, Outcome};

impl Outcome {
    /// The outcome as one JSON value. A delete of one dead letter (as `bus delete-dead`
    /// asks) names it in `deleted`; a delete of several lists the ids deleted and those
    /// not found.
    pub fn json(&self) -> Value {
        match &self.done {
            Done::Requeued { report, .. } => to_json(report),
            Done::Deleted {
                queue,
                deleted,
                not_found,
            } => match (deleted.as_slice(), not_found.is_empty()) {
                ([one], true) => json!({ "queue": queue, "deleted": one }),
                _ => json!({ "queue": queue, "deleted": deleted, "not_found": not_found }),
            },
            Done::Purged { queue, purged } => json!({
                "queue": queue,
                "ready": purged.ready,
                "delayed": purged.delayed,
                "keyed": purged.keyed,
            }),
            Done::Paused { queue, paused } => json!({ "queue": queue, "paused": paused }),
            Done::BreakerClosed { queue } => json!({ "queue": queue, "breaker": "closed" }),
            Done::Cancelled { queue, id, .. } => json!({ "queue": queue, "cancelled": id }),
            Done::Sent { queue, id } => json!({ "queue": queue, "id": id.as_str() }),
            Done::Unsubscribed {
                topic,
                subscription,
                removed,
                ..
            } => json!({
                "topic": topic,
                "subscription": subscription,
                "was_registered": removed.was_registered,
                "deleted_keys": removed.deleted_keys,
            }),
            Done::SagaDeleted { partition, id, .. } => {
                json!({ "partition": partition, "deleted": id })
            }
            Done::Edited { edited, .. } => to_json(edited),
            Done::ActedOnPage { page, .. } => to_json(page),
            Done::ActedOnAll { acted, .. } => to_json(acted),
            Done::Redriven {
                dry_run, report, ..
            } => json!({
                "dry_run": dry_run,
                "redriven": report.redriven,
                "poison": report.poison,
                "skipped": report.skipped,
                "vanished": report.vanished,
                "items": report.items.iter().map(|i| json!({
                    "message_id": i.message_id,
                    "urn": i.urn,
                    "reason": i.reason,
                    "to": i.to,
                    "outcome": redrive_outcome(i.outcome),
                })).collect::<Vec<_>>(),
            }),
        }
    }

    /// The outcome as JSON for a face that answers a miss rather than failing on it (the
    /// dashboard's pages): [`Outcome::json`], except that a delete lists the ids deleted
    /// and those not found, a cancel says whether anything waited under the id
    /// (`cancelled`: `true` or `false`) and a saga delete whether the saga `existed`.
    pub fn answer(&self) -> Value {
        match &self.done {
            Done::Deleted {
                deleted, not_found, ..
            } => json!({ "deleted": deleted, "not_found": not_found }),
            Done::Cancelled { cancelled, .. } => json!({ "cancelled": cancelled }),
            Done::SagaDeleted { existed, .. } => json!({ "existed": existed }),
            _ => self.json(),
        }
    }

    /// What a terminal shows on stdout: a line saying what was done.
    pub fn lines(&self) -> Vec<String> {
        vec![match &self.done {
            Done::Requeued { queue, report, .. } => format!(
                "requeued {} dead letter(s) of {queue} to {}",
                report.requeued.len(),
                report.target
            ),
            Done::Deleted { queue, deleted, .. } => match deleted.as_slice() {
                [one] => format!("deleted dead letter {one} of {queue}"),
                _ => format!("deleted {} dead letter(s) of {queue}", deleted.len()),
            },
            Done::Purged { queue, purged } => {
                format!("purged {} message(s) of {queue}", purged_detail(purged))
            }
            Done::Paused { queue, paused: true } => format!("paused {queue}"),
            Done::Paused { queue, .. } => format!("resumed {queue}"),
            Done::BreakerClosed { queue } => format!("closed the circuit breaker of {queue}"),
            Done::Cancelled { queue, id, .. } => format!("cancelled {id} of {queue}"),
            Done::Sent { id, .. } => id.to_string(),
            Done::Unsubscribed {
                topic,
                subscription,
                removed,
                ..
            } => format!(
                "removed subscription {subscription} of topic {topic} ({} key(s) deleted)",
                removed.deleted_keys
            ),
            Done::SagaDeleted { partition, id, .. } => {
                format!("deleted saga {id} of partition {partition}")
            }
            Done::Edited { queue, id, edited } => match edited {
                bus_redis::admin::Edited::Requeued { message_id } => {
                    format!("edited dead letter {id} of {queue} and requeued it as {message_id}")
                }
                _ => format!("no dead letter {id} in {queue} any more: nothing changed"),
            },
            Done::ActedOnPage { queue, act, page, .. } => format!(
                "{}: {} of {} match(es) of {queue} in this page",
                act.name(),
                page.acted.changed,
                page.acted.matched
            ),
            Done::ActedOnAll {
                queue, act, acted, ..
            } => format!(
                "{}: {} of {} match(es) of {queue}",
                act.name(),
                acted.changed,
                acted.matched
            ),
            Done::Redriven {
                queue,
                dry_run,
                report,
                ..
            } => format!(
                "{} {} of {queue}'s dead letters; {} poison and {} others left, {} taken by another reader",
                if *dry_run { "would redrive" } else { "redrove" },
                report.redriven,
                report.poison,
                report.skipped,
                report.vanished
            ),
        }]
    }

    /// What a terminal shows on stderr beside [`Outcome::lines`]: what was left alone,
    /// and what may now be in two places.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        match &self.done {
            Done::Requeued { report, .. } => {
                if !report.skipped.is_empty() {
                    notes.push(format!(
                        "left dead (no stored envelope): {}",
                        report.skipped.join(" ")
                    ));
                }
                if !report.duplicated.is_empty() {
                    notes.push(format!(
                        "copied, but already gone from the dead letters (may be delivered twice): {}",
                        report.duplicated.join(" ")
                    ));
                }
            }
            Done::ActedOnAll { acted, .. } => {
                if acted.gone > 0 {
                    notes.push(format!(
                        "{} were no longer where the search found them (taken meanwhile): left alone",
                        acted.gone
                    ));
                }
                if acted.unchanged > 0 {
                    notes.push(format!("{} left as they were (ready messages are not requeued; dead letters without an envelope)", acted.unchanged));
                }
                if acted.duplicated > 0 {
                    notes.push(format!(
                        "{} copied to the target but already gone here (may be delivered twice)",
                        acted.duplicated
                    ));
                }
            }
            _ => {}
        }
        notes
    }

    /// What was asked for and found nothing to act on, so nothing changed: no delayed
    /// message under the id, not a dead letter, no such saga or subscription. `None`
    /// when the action did what it was asked (or reports its own shortfall).
    pub fn missed(&self) -> Option<String> {
        match &self.done {
            Done::Deleted {
                queue,
                deleted,
                not_found,
            } if deleted.is_empty() && !not_found.is_empty() => Some(match not_found.as_slice() {
                [one] => format!("{one} is not a dead letter of {queue}"),
                _ => format!("not dead letters of {queue}: {}", not_found.join(" ")),
            }),
            Done::Cancelled {
                queue,
                id,
                cancelled: false,
            } => Some(format!("no delayed message {id} waits in {queue}")),
            Done::SagaDeleted {
                partition,
                id,
                existed: false,
            } => Some(format!("no saga {id} in partition {partition}")),
            Done::Unsubscribed {
                topic,
                subscription,
                removed,
                ..
            } if !removed.was_registered && removed.deleted_keys == 0 => {
                Some(format!("topic {topic} has no subscription {subscription}"))
            }
            Done::Edited {
                queue,
                id,
                edited: bus_redis::admin::Edited::NotFound,
            } => Some(format!(
                "no dead letter {id} in {queue} any more: nothing changed"
            )),
            _ => None,
        }
    }

    /// Part of what was asked for was not there, after the rest was done (ids that were
    /// not dead letters): shown after the outcome itself.
    pub fn shortfall(&self) -> Option<String> {
        let (queue, not_found) = match &self.done {
            Done::Requeued { queue, report, .. } => (queue, &report.not_found),
            Done::Deleted {
                queue,
                deleted,
                not_found,
            } if !deleted.is_empty() => (queue, not_found),
            _ => return None,
        };
        if not_found.is_empty() {
            return None;
        }
        Some(format!(
            "not dead letters of {queue}: {}",
            not_found.join(" ")
        ))
    }
}

fn to_json(value: &impl Serialize) -> Value {
    // Records of plain fields and strings: serialising them cannot fail.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// A redriven record's outcome as `bus babel redrive --json` names it.
fn redrive_outcome(outcome: Redrive) -> &'static str {
    match outcome {
        Redrive::Redriven => "redriven",
        Redrive::WouldRedrive => "would_redrive",
        Redrive::Poison => "poison",
        Redrive::NotSelected => "not_selected",
        Redrive::NoTarget => "no_target",
        Redrive::Vanished => "vanished",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Audited;

    fn outcome(done: Done) -> Outcome {
        Outcome {
            done,
            audited: Audited::Nothing,
        }
    }

    fn deleted(deleted: &[&str], not_found: &[&str]) -> Outcome {
        let ids = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect();
        outcome(Done::Deleted {
            queue: "work".into(),
            deleted: ids(deleted),
            not_found: ids(not_found),
        })
    }

    #[test]
    fn a_delete_names_one_id_and_lists_several_with_those_not_found() {
        let one = deleted(&["~1"], &[]);
        assert_eq!(one.json(), json!({ "queue": "work", "deleted": "~1" }));
        assert_eq!(one.missed(), None);
        let some = deleted(&["~1"], &["~2"]);
        assert_eq!(
            some.json(),
            json!({ "queue": "work", "deleted": ["~1"], "not_found": ["~2"] })
        );
        assert_eq!(
            some.shortfall().as_deref(),
            Some("not dead letters of work: ~2")
        );
        let none = deleted(&[], &["~2"]);
        assert_eq!(
            none.missed().as_deref(),
            Some("~2 is not a dead letter of work")
        );
    }

    #[test]
    fn the_dashboards_answer_says_what_each_id_became_and_whether_there_was_anything() {
        assert_eq!(
            deleted(&["~1"], &["~2"]).answer(),
            json!({ "deleted": ["~1"], "not_found": ["~2"] })
        );
        let cancelled = |cancelled| {
            outcome(Done::Cancelled {
                queue: "work".into(),
                id: "m-1".into(),
                cancelled,
            })
        };
        assert_eq!(cancelled(false).answer(), json!({ "cancelled": false }));
        assert_eq!(
            cancelled(true).json(),
            json!({ "queue": "work", "cancelled": "m-1" })
        );
        let saga = outcome(Done::SagaDeleted {
            partition: "order".into(),
            id: "o-1".into(),
            existed: true,
        });
        assert_eq!(saga.answer(), json!({ "existed": true }));
        assert_eq!(
            saga.json(),
            json!({ "partition": "order", "deleted": "o-1" })
        );
        let paused = outcome(Done::Paused {
            queue: "work".into(),
            paused: true,
        });
        assert_eq!(paused.answer(), paused.json());
    }
}
