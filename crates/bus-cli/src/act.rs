//! The commands that change something: each is parsed into a [`bus_management::Action`],
//! applied by [`Fleet::apply`] (which resolves the queue, checks what its kind can do and
//! writes the audit entry, by the OS user through `bus`) and its outcome printed, as JSON
//! with --json. What was asked for but not there exits 1.

use bus_management::{ActedPage, Action, Actor, Fleet, Selection};

use crate::cli::{Command, SagasArgs, SagasCommand};
use crate::failure::Failure;
use crate::output::{self, out};

/// What a command asks for.
#[derive(Debug)]
pub enum Asked {
    /// A change.
    Change(Action),
    /// A read: the command back.
    Read(Command),
}

/// The change `command` asks for, or the command back when it only reads.
pub fn asked(command: Command) -> Asked {
    Asked::Change(match command {
        Command::Requeue(args) => Action::Requeue {
            selection: if args.all {
                Selection::All
            } else {
                Selection::Ids(args.ids)
            },
            queue: args.queue,
            to: args.to,
        },
        Command::DeleteDead { queue, id } => Action::DeleteDead {
            queue,
            ids: vec![id],
        },
        Command::Purge { queue, .. } => Action::Purge { queue },
        Command::Pause { queue } => Action::Pause { queue },
        Command::Resume { queue } => Action::Resume { queue },
        Command::CloseBreaker { queue } => Action::CloseBreaker { queue },
        Command::Cancel { queue, id } => Action::Cancel { queue, id },
        Command::Send(args) => Action::Send {
            queue: args.queue,
            message_type: args.message_type,
            body: args.body,
            headers: args.headers.into_iter().collect(),
        },
        Command::Unsubscribe { topic, name, force } => Action::Unsubscribe { topic, name, force },
        Command::Sagas(SagasArgs {
            command: SagasCommand::Delete { partition, id },
            ..
        }) => Action::DeleteSaga { partition, id },
        other => return Asked::Read(other),
    })
}

/// Applies `action` and prints what it did.
pub async fn apply(fleet: &Fleet, action: Action, json: bool) -> Result<(), Failure> {
    apply_watched(fleet, action, json, |_| {}).await
}

/// [`apply`], with `progress` shown each page of a search's action.
pub async fn apply_watched(
    fleet: &Fleet,
    action: Action,
    json: bool,
    progress: impl FnMut(&ActedPage) + Send,
) -> Result<(), Failure> {
    let actor = Actor::new(bus_management::os_user(), "bus");
    let outcome = fleet
        .apply_watched(action, &actor, progress)
        .await
        .map_err(in_words)?;
    if let Some(error) = outcome.audit_failure() {
        eprintln!(
            "bus: warning: the change was made, but its audit entry could not be written: {}",
            bus_core::ErrorChain(error)
        );
    }
    if let Some(missed) = outcome.missed() {
        return Err(Failure::Refused(missed));
    }
    if json {
        output::json(&outcome.json())?;
    } else {
        for line in outcome.lines() {
            out!("{line}")?;
        }
        for note in outcome.notes() {
            eprintln!("{note}");
        }
    }
    match outcome.shortfall() {
        Some(shortfall) => Err(Failure::Refused(shortfall)),
        None => Ok(()),
    }
}

/// A refusal in this tool's words: a subscription that still holds messages names the
/// flag that removes it anyway.
fn in_words(error: bus_management::Error) -> Failure {
    match error {
        bus_management::Error::NotEmpty {
            topic,
            name,
            ready,
            in_flight,
            delayed,
            dead,
        } => Failure::Refused(format!(
            "subscription {name} of topic {topic} still holds messages ({ready} ready, \
             {in_flight} in flight, {delayed} delayed, {dead} dead letters); nothing was \
             changed (pass --force to remove it and delete them)"
        )),
        other => other.into(),
    }
}
