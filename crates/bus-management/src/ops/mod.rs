//! The operator's actions, one layer for every face: an [`Action`] names a change (what
//! `bus` and the dashboard can do), [`Fleet::apply`](crate::Fleet::apply) carries it out
//! and records it, and the [`Outcome`] it returns renders itself for a terminal and as
//! JSON. The `bus` tool parses its command line into an `Action`, the dashboard its
//! request; neither resolves an address, checks a capability or writes the audit log.
//!
//! | Item | What it is | Module |
//! |---|---|---|
//! | [`Action`], [`OnMatches`], [`Pages`] | every change an operator can ask for | here |
//! | [`Actor`] | who asks, and through what (the audit entry's `who` and `via`) | here |
//! | [`Fleet::apply`](crate::Fleet::apply) | resolve the address, check the capability, run, audit once | `apply` |
//! | [`Outcome`], [`Done`], [`Audited`] | what was done, and whether its audit entry was written | `outcome` |
//! | [`Outcome::json`], [`Outcome::answer`], [`Outcome::lines`], [`Outcome::notes`], [`Outcome::missed`], [`Outcome::shortfall`] | the one rendering of an outcome | `render` |
//!
//! A new operator action is one [`Action`] variant, its arm in `apply.rs` (address,
//! capability, the call), its [`Done`] variant with its audit record (`outcome.rs`) and
//! its rendering (`render.rs`); both faces then only parse into it.

mod apply;
mod outcome;
mod render;

use bus_core::Headers;
use bus_redis::admin::SearchQuery;

pub use bus_core::operator::Selection;
pub use outcome::{Audited, Done, Outcome};

/// A change an operator asks for, by the names the tools take: `queue`,
/// `topic/subscription` or `<kind>:<queue>` for a queue (see [`Address`](crate::Address)).
///
/// Applied with [`Fleet::apply`](crate::Fleet::apply). What a queue's kind cannot do is
/// refused before anything is written, with [`bus_core::Error::Unsupported`] (a declared
/// capability the kind lacks) or [`Error::NativeOnly`](crate::Error::NativeOnly) (a change
/// only the bus's own layout has).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Action {
    /// Dead letters back to their queue, or to another queue of the same kind (`bus
    /// requeue`, the dead-letter page). Audited as `requeue`, or `move` when they went
    /// elsewhere.
    Requeue {
        /// The queue whose dead letters to requeue.
        queue: String,
        /// Which of them.
        selection: Selection,
        /// Another queue to move them to (a new name is fine: a send creates a queue).
        to: Option<String>,
    },
    /// Dead letters deleted, each in one script (`bus delete-dead`, the dead-letter page).
    DeleteDead {
        /// The queue.
        queue: String,
        /// Their storage ids.
        ids: Vec<String>,
    },
    /// The waiting (ready, delayed and keyed) messages of a queue deleted (`bus purge`).
    Purge {
        /// The queue.
        queue: String,
    },
    /// Consumers stop taking a queue's messages (`bus pause`, the queue page).
    Pause {
        /// The queue.
        queue: String,
    },
    /// Consumers take a paused queue's messages again (`bus resume`, the queue page).
    Resume {
        /// The queue.
        queue: String,
    },
    /// A tripped fleet circuit breaker closed by hand (`bus close-breaker`, the queue page).
    CloseBreaker {
        /// The queue.
        queue: String,
    },
    /// A delayed message removed before it becomes ready (`bus cancel`, the Scheduled tab).
    Cancel {
        /// The queue.
        queue: String,
        /// Its id as the scheduled list shows it.
        id: String,
    },
    /// One plain JSON message sent, as a foreign producer would (`bus send`). Not audited:
    /// the log records changes to what a queue already holds, and a send is what every
    /// producer does.
    Send {
        /// The queue or subscription (a new name creates it).
        queue: String,
        /// The message type; the queue's wire name when `None`.
        message_type: Option<String>,
        /// The body, JSON text.
        body: String,
        /// Its headers.
        headers: Headers,
    },
    /// A subscription removed with its queue (`bus unsubscribe`).
    Unsubscribe {
        /// The topic.
        topic: String,
        /// The subscription.
        name: String,
        /// Even while its queue holds messages.
        force: bool,
    },
    /// One saga deleted, whatever its state (`bus sagas delete`, the saga page).
    DeleteSaga {
        /// Its partition.
        partition: String,
        /// Its id.
        id: String,
    },
    /// A dead letter's headers and body edited and the message requeued (the edit page).
    Edit {
        /// The queue.
        queue: String,
        /// The dead letter's storage id.
        id: String,
        /// The new headers.
        headers: Headers,
        /// The new body, JSON text.
        body: String,
    },
    /// Every message a search matches requeued, deleted or moved, each only if still where
    /// the search found it (`bus search --requeue|--delete|--move-to`, the Search page).
    ActOnMatches {
        /// The queue searched.
        queue: String,
        /// The search.
        query: SearchQuery,
        /// The search in the operator's words, for the audit log.
        criteria: String,
        /// What to do with each match.
        act: OnMatches,
        /// One page of the search, or all of them.
        pages: Pages,
    },
    /// BabelQueue dead letters redriven, BabelQueue's way (`bus babel redrive`): headers
    /// dropped, attempts reset, poison left. A dry run changes nothing and is not audited.
    Redrive {
        /// The layout (the Laravel one carries its key prefix).
        layout: bus_babelqueue::Layout,
        /// The queue's name within its layout.
        queue: String,
        /// Another queue to send every record to.
        to: Option<String>,
        /// Only records with this `dead_letter.reason`.
        reason: Option<String>,
        /// At most this many.
        max: Option<usize>,
        /// Report what would move, move nothing.
        dry_run: bool,
    },
}

/// What [`Action::ActOnMatches`] does with each match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnMatches {
    /// Dead letters back to their queue, delayed messages ready now.
    Requeue,
    /// Deleted.
    Delete,
    /// To another of the bus's queues (named as the tools take it), as fresh messages.
    MoveTo(String),
}

impl OnMatches {
    /// `requeue`, `delete` or `move`, as the audit log names it.
    pub fn name(&self) -> &'static str {
        match self {
            OnMatches::Requeue => "requeue",
            OnMatches::Delete => "delete",
            OnMatches::MoveTo(_) => "move",
        }
    }
}

/// Which pages of a search [`Action::ActOnMatches`] acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pages {
    /// One page (at most `limit` elements read) from `cursor` (`None`: the start); the
    /// outcome's page has the cursor of the next. Each page that changed something is one
    /// audit entry (the dashboard acts page by page, showing progress).
    One {
        /// Where to start.
        cursor: Option<String>,
        /// Elements read.
        limit: u64,
    },
    /// Every page from the start, `limit` elements per read; one audit entry for the whole.
    All {
        /// Elements read per page.
        limit: u64,
    },
}

/// Who applies an action and through what: the audit entry's `who` and `via`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    who: String,
    via: String,
}

impl Actor {
    /// `who` (an operating-system user, an operator's name) acting through `via` (`bus`,
    /// `dashboard from 192.0.2.7`).
    pub fn new(who: impl Into<String>, via: impl Into<String>) -> Self {
        Actor {
            who: who.into(),
            via: via.into(),
        }
    }

    /// Who.
    pub fn who(&self) -> &str {
        &self.who
    }

    /// Through what.
    pub fn via(&self) -> &str {
        &self.via
    }
}
