//! [`Outcome`]: what an applied [`Action`](super::Action) did ([`Done`]) and whether its
//! audit entry was written ([`Audited`]). Which outcomes the audit log records, and with
//! what, is decided here, once, from the outcome alone.

use bus_babelqueue::RedriveReport;
use bus_core::MessageId;
use bus_redis::admin::{Acted, ActedPage, AuditEntry, Edited, Purged, RemovedSubscription};

use bus_core::operator::Requeued;

use super::{Actor, OnMatches};
use crate::Error;

/// What [`Fleet::apply`](crate::Fleet::apply) did: the change's result and its audit entry.
#[derive(Debug)]
#[non_exhaustive]
pub struct Outcome {
    /// What was done.
    pub done: Done,
    /// Whether the audit log records it.
    pub audited: Audited,
}

impl Outcome {
    /// The audit entry that could not be written: the change is made all the same (a log
    /// that cannot be written must not undo or hide it), and the face says so.
    pub fn audit_failure(&self) -> Option<&Error> {
        match &self.audited {
            Audited::Failed(error) => Some(error),
            _ => None,
        }
    }
}

/// Whether an outcome is in the audit log.
#[derive(Debug)]
#[non_exhaustive]
pub enum Audited {
    /// Nothing to record: nothing changed (a miss, a dry run), or a send.
    Nothing,
    /// Appended once, under this stream id.
    Recorded(String),
    /// The change was made, but appending its entry failed.
    Failed(Error),
}

/// What an action did, one variant per kind of change.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Done {
    /// [`Action::Requeue`](super::Action::Requeue).
    Requeued {
        /// The queue, as given.
        queue: String,
        /// Every dead letter was asked for.
        all: bool,
        /// What moved, where, and what did not.
        report: Requeued,
    },
    /// [`Action::DeleteDead`](super::Action::DeleteDead).
    Deleted {
        /// The queue, as given.
        queue: String,
        /// The ids deleted.
        deleted: Vec<String>,
        /// The ids that were not dead letters of the queue.
        not_found: Vec<String>,
    },
    /// [`Action::Purge`](super::Action::Purge).
    Purged {
        /// The queue, as given.
        queue: String,
        /// What was deleted.
        purged: Purged,
    },
    /// [`Action::Pause`](super::Action::Pause) or [`Action::Resume`](super::Action::Resume).
    Paused {
        /// The queue, as given.
        queue: String,
        /// Paused now (`false`: resumed).
        paused: bool,
    },
    /// [`Action::CloseBreaker`](super::Action::CloseBreaker).
    BreakerClosed {
        /// The queue, as given.
        queue: String,
    },
    /// [`Action::Cancel`](super::Action::Cancel).
    Cancelled {
        /// The queue, as given.
        queue: String,
        /// The id asked for.
        id: String,
        /// Whether it waited and is gone (`false`: delivered, or cancelled already).
        cancelled: bool,
    },
    /// [`Action::Send`](super::Action::Send).
    Sent {
        /// The queue, as given.
        queue: String,
        /// The new message's id.
        id: MessageId,
    },
    /// [`Action::Unsubscribe`](super::Action::Unsubscribe).
    Unsubscribed {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
        /// Removed with `force`.
        forced: bool,
        /// What was removed (nothing: there was no such subscription).
        removed: RemovedSubscription,
    },
    /// [`Action::DeleteSaga`](super::Action::DeleteSaga).
    SagaDeleted {
        /// Its partition.
        partition: String,
        /// Its id.
        id: String,
        /// Whether it existed.
        existed: bool,
    },
    /// [`Action::Edit`](super::Action::Edit).
    Edited {
        /// The queue, as given.
        queue: String,
        /// The dead letter's storage id.
        id: String,
        /// Requeued, or no such dead letter.
        edited: Edited,
    },
    /// [`Action::ActOnMatches`](super::Action::ActOnMatches) over one page.
    ActedOnPage {
        /// The queue, as given.
        queue: String,
        /// What was done to each match.
        act: OnMatches,
        /// The search in the operator's words.
        criteria: String,
        /// The page and what was done to its matches.
        page: ActedPage,
    },
    /// [`Action::ActOnMatches`](super::Action::ActOnMatches) over every page.
    ActedOnAll {
        /// The queue, as given.
        queue: String,
        /// What was done to each match.
        act: OnMatches,
        /// The search in the operator's words.
        criteria: String,
        /// What was done, all pages added.
        acted: Acted,
    },
    /// [`Action::Redrive`](super::Action::Redrive).
    Redriven {
        /// The queue's address (`babel:orders`, `laravel:orders`).
        target: String,
        /// The queue's name within its layout, as given.
        queue: String,
        /// Nothing was moved.
        dry_run: bool,
        /// What happened to each record.
        report: RedriveReport,
    },
}

/// One audit entry's what, on what, how many and detail.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    action: &'static str,
    target: String,
    count: u64,
    detail: String,
}

fn record(action: &'static str, target: &str, count: u64, detail: impl Into<String>) -> Record {
    Record {
        action,
        target: target.to_owned(),
        count,
        detail: detail.into(),
    }
}

impl Done {
    /// The entry the audit log gets for this outcome, by `actor`; `None` when it records
    /// nothing. A miss (nothing waited under the id, no such saga) changed nothing and is
    /// not recorded; a requeue, a purge and a search's action over every page are
    /// recorded even when they found nothing to move, since the operator asked for all.
    pub(crate) fn entry(&self, actor: &Actor) -> Option<AuditEntry> {
        let r = self.record()?;
        Some(
            AuditEntry::new(actor.who(), actor.via(), r.action, r.target, r.count).detail(r.detail),
        )
    }

    fn record(&self) -> Option<Record> {
        Some(match self {
            Done::Requeued { queue, all, report } => requeue_record(queue, *all, report),
            Done::Deleted { deleted, .. } if deleted.is_empty() => return None,
            Done::Deleted { queue, deleted, .. } => {
                let detail = format!("dead letters {}", deleted.join(" "));
                record("delete", queue, deleted.len() as u64, detail)
            }
            Done::Purged { queue, purged } => {
                let count = purged.ready + purged.delayed + purged.keyed;
                record("purge", queue, count, purged_detail(purged))
            }
            Done::Paused { queue, paused } => {
                record(if *paused { "pause" } else { "resume" }, queue, 1, "")
            }
            Done::BreakerClosed { queue } => record("close-breaker", queue, 1, ""),
            Done::Cancelled {
                queue,
                id,
                cancelled,
            } => {
                if !cancelled {
                    return None;
                }
                record("cancel", queue, 1, id.clone())
            }
            Done::Sent { .. } => return None,
            Done::Unsubscribed { removed, .. }
                if !removed.was_registered && removed.deleted_keys == 0 =>
            {
                return None
            }
            Done::Unsubscribed {
                topic,
                subscription,
                forced,
                removed,
            } => {
                let forced = if *forced { ", forced" } else { "" };
                let detail = format!("{} key(s) deleted{forced}", removed.deleted_keys);
                record("unsubscribe", &format!("{topic}/{subscription}"), 1, detail)
            }
            Done::SagaDeleted {
                partition,
                id,
                existed,
            } => {
                if !existed {
                    return None;
                }
                record("delete-saga", &format!("{partition}/{id}"), 1, "")
            }
            Done::Edited { queue, id, edited } => return edit_record(queue, id, edited),
            Done::ActedOnPage {
                queue,
                act,
                criteria,
                page,
            } => return matches_record(queue, act, criteria, &page.acted, true),
            Done::ActedOnAll {
                queue,
                act,
                criteria,
                acted,
            } => return matches_record(queue, act, criteria, acted, false),
            Done::Redriven { dry_run: true, .. } => return None,
            Done::Redriven { target, report, .. } => {
                record("redrive", target, report.redriven as u64, "")
            }
        })
    }
}

/// A requeue is a `move` when the dead letters went to another queue.
fn requeue_record(queue: &str, all: bool, report: &Requeued) -> Record {
    let action = if report.target == queue {
        "requeue"
    } else {
        "move"
    };
    let all = if all { ", all" } else { "" };
    let count = report.requeued.len() as u64;
    record(action, queue, count, format!("to {}{all}", report.target))
}

/// An edit that found no dead letter under the id changed nothing.
fn edit_record(queue: &str, id: &str, edited: &Edited) -> Option<Record> {
    let Edited::Requeued { message_id } = edited else {
        return None;
    };
    let detail = format!(
        "dead letter {id} ({message_id}) edited and requeued; the original is in the edit \
         history"
    );
    Some(record("edit", queue, 1, detail))
}

/// `1 ready, 0 delayed` (and `, 2 keyed` when an ordered queue had some).
pub(super) fn purged_detail(purged: &Purged) -> String {
    let mut detail = format!("{} ready, {} delayed", purged.ready, purged.delayed);
    if purged.keyed > 0 {
        detail.push_str(&format!(", {} keyed", purged.keyed));
    }
    detail
}

/// A search's action: one page is recorded only when it changed something (the
/// dashboard acts on many pages in turn, and its entries name the ids); every page at
/// once is one entry for the whole.
fn matches_record(
    queue: &str,
    act: &OnMatches,
    criteria: &str,
    acted: &Acted,
    one_page: bool,
) -> Option<Record> {
    let mut detail = format!("search matches ({criteria}){}", moved_to(act));
    if one_page {
        if acted.changed + acted.duplicated == 0 {
            return None;
        }
        detail.push_str(&format!(": {}", acted.ids.join(" ")));
    }
    Some(record(act.name(), queue, acted.changed, detail))
}

/// ` to <queue>` for a move, else nothing.
fn moved_to(act: &OnMatches) -> String {
    match act {
        OnMatches::MoveTo(to) => format!(" to {to}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(done: Done) -> Option<(String, String, u64, String)> {
        let entry = done.entry(&Actor::new("ann", "bus"))?;
        assert_eq!((entry.who.as_str(), entry.via.as_str()), ("ann", "bus"));
        Some((entry.action, entry.target, entry.count, entry.detail))
    }

    fn row(
        action: &str,
        target: &str,
        count: u64,
        detail: &str,
    ) -> Option<(String, String, u64, String)> {
        Some((action.into(), target.into(), count, detail.into()))
    }

    #[test]
    fn a_requeue_is_a_move_when_it_went_elsewhere() {
        let requeued = |target: &str, all| {
            let mut report = Requeued::default();
            report.target = target.into();
            report.requeued = vec!["~1".into()];
            Done::Requeued {
                queue: "work".into(),
                all,
                report,
            }
        };
        assert_eq!(
            recorded(requeued("work", false)),
            row("requeue", "work", 1, "to work")
        );
        assert_eq!(
            recorded(requeued("staging", true)),
            row("move", "work", 1, "to staging, all")
        );
    }

    #[test]
    fn a_miss_records_nothing_and_a_change_records_what_it_changed() {
        let deleted = |deleted: Vec<&str>| Done::Deleted {
            queue: "work".into(),
            deleted: deleted.into_iter().map(str::to_owned).collect(),
            not_found: vec!["~9".into()],
        };
        assert_eq!(recorded(deleted(vec![])), None);
        assert_eq!(
            recorded(deleted(vec!["~1", "~2"])),
            row("delete", "work", 2, "dead letters ~1 ~2")
        );
        let cancelled = |cancelled| Done::Cancelled {
            queue: "work".into(),
            id: "m-1".into(),
            cancelled,
        };
        assert_eq!(recorded(cancelled(false)), None);
        assert_eq!(recorded(cancelled(true)), row("cancel", "work", 1, "m-1"));
        let saga = |existed| Done::SagaDeleted {
            partition: "order".into(),
            id: "o-1".into(),
            existed,
        };
        assert_eq!(recorded(saga(false)), None);
        assert_eq!(recorded(saga(true)), row("delete-saga", "order/o-1", 1, ""));
        let edited = |edited| Done::Edited {
            queue: "work".into(),
            id: "~3".into(),
            edited,
        };
        assert_eq!(recorded(edited(Edited::NotFound)), None);
        let requeued = Edited::Requeued {
            message_id: "m-3".into(),
        };
        assert!(
            recorded(edited(requeued)).is_some_and(|(a, _, n, d)| a == "edit"
                && n == 1
                && d.starts_with("dead letter ~3 (m-3)"))
        );
    }

    #[test]
    fn flow_changes_purges_and_redrives_say_what_they_did() {
        let mut purged = Purged::default();
        (purged.ready, purged.delayed, purged.keyed) = (2, 1, 3);
        let done = Done::Purged {
            queue: "work".into(),
            purged,
        };
        assert_eq!(
            recorded(done),
            row("purge", "work", 6, "2 ready, 1 delayed, 3 keyed")
        );
        for (paused, action) in [(true, "pause"), (false, "resume")] {
            let done = Done::Paused {
                queue: "work".into(),
                paused,
            };
            assert_eq!(recorded(done), row(action, "work", 1, ""));
        }
        let closed = Done::BreakerClosed {
            queue: "work".into(),
        };
        assert_eq!(recorded(closed), row("close-breaker", "work", 1, ""));
        let sent = Done::Sent {
            queue: "work".into(),
            id: MessageId::generate(),
        };
        assert_eq!(recorded(sent), None, "a send is what every producer does");
        let redriven = |dry_run| {
            let mut report = RedriveReport::default();
            report.redriven = 4;
            Done::Redriven {
                target: "babel:orders".into(),
                queue: "orders".into(),
                dry_run,
                report,
            }
        };
        assert_eq!(recorded(redriven(true)), None);
        assert_eq!(
            recorded(redriven(false)),
            row("redrive", "babel:orders", 4, "")
        );
    }

    #[test]
    fn a_search_records_each_page_that_changed_something_or_the_whole() {
        let acted = |changed: u64| {
            let mut acted = Acted::default();
            acted.matched = 3;
            acted.changed = changed;
            acted.ids = (0..changed).map(|n| format!("m-{n}")).collect();
            acted
        };
        let moved = OnMatches::MoveTo("staging".into());
        let criteria = "error \"x\"";
        let text =
            |r: Option<Record>| r.map(|r| (r.action.to_owned(), r.target, r.count, r.detail));
        assert_eq!(
            text(matches_record("work", &moved, criteria, &acted(0), false)),
            row("move", "work", 0, "search matches (error \"x\") to staging")
        );
        assert_eq!(
            text(matches_record(
                "work",
                &OnMatches::Delete,
                criteria,
                &acted(0),
                true
            )),
            None
        );
        assert_eq!(
            text(matches_record(
                "work",
                &OnMatches::Delete,
                criteria,
                &acted(2),
                true
            )),
            row("delete", "work", 2, "search matches (error \"x\"): m-0 m-1")
        );
    }
}
