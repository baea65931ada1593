//! The commands that only read: each prints its records as a table, or as JSON with
//! --json.

use bus_management::{Fleet, Management};
use serde::Serialize;

use crate::cli::{Command, SagasArgs, SagasCommand};
use crate::failure::Failure;
use crate::output::{self, out};
use crate::{existing, existing_native, ops};

/// Runs a reading command.
pub async fn show(fleet: &Fleet, command: Command, json: bool) -> Result<(), Failure> {
    let management = fleet.management();
    match command {
        Command::Queues => {
            let queues = fleet.queues().await?;
            if queues.is_empty() && !json {
                return out!("{}", nothing_under(management, "queues").await?);
            }
            print(json, &queues, |q| output::queues(q))
        }
        Command::Topics => {
            let topics = management.topics().await?;
            if topics.is_empty() && !json {
                return out!("{}", nothing_under(management, "topics").await?);
            }
            print(json, &topics, |t| output::topics(t))
        }
        Command::Stats(args) => stats(fleet, args.queue, json).await,
        Command::Peek { queue, count } => {
            let messages = fleet.peek(&existing(fleet, &queue).await?, count).await?;
            print(json, &messages, |m| output::peek(&queue, m))
        }
        Command::Dead { queue, count, wide } => {
            let address = existing(fleet, &queue).await?;
            let letters = fleet.dead_letters(&address, count).await?;
            match wide {
                true => print(json, &letters, |l| output::dead_letters_wide(&queue, l)),
                false => print(json, &letters, |l| output::dead_letters(&queue, l)),
            }
        }
        Command::Scheduled { queue, count } => {
            let source = existing_native(fleet, &queue, "scheduled").await?;
            let messages = management.scheduled(&source, count).await?;
            print(json, &messages, |m| output::scheduled(&queue, m))
        }
        Command::Sagas(SagasArgs { command, .. }) => sagas(management, command, json).await,
        Command::Audit { count } => {
            let entries = management.audit_log(count).await?;
            print(json, &entries, |e| ops::audit_table(e))
        }
        Command::Hosts => print(json, &management.hosts().await?, |h| ops::hosts_table(h)),
        Command::Schedules => {
            let schedules = management.schedules().await?;
            print(json, &schedules, |s| ops::schedules_table(s))
        }
        other => unreachable!("not a reading command: {other:?}"),
    }
}

/// `value` as JSON, or as `table` prints it.
fn print<T: Serialize + ?Sized>(
    json: bool,
    value: &T,
    table: impl FnOnce(&T) -> Result<(), Failure>,
) -> Result<(), Failure> {
    if json {
        output::json(value)
    } else {
        table(value)
    }
}

/// `bus stats`: a partitioned queue is one row, with its shards' rows under it.
async fn stats(fleet: &Fleet, queue: Option<String>, json: bool) -> Result<(), Failure> {
    let management = fleet.management();
    let stats = match queue {
        Some(queue) => vec![fleet.stats(&existing(fleet, &queue).await?).await?],
        None => fleet.stats_all().await?,
    };
    let mut rows = Vec::with_capacity(stats.len());
    for total in stats {
        let shards = match fleet.native_source(&total.queue)? {
            Some(source) => management.shard_stats(&source).await?,
            None => Vec::new(),
        };
        rows.push(output::StatsRow { total, shards });
    }
    if rows.is_empty() && !json {
        let what = "queues or subscriptions";
        return out!("{}", nothing_under(management, what).await?);
    }
    print(json, &rows, |r| output::stats(r))
}

/// `bus sagas list|show` (`delete` is an action).
async fn sagas(management: &Management, command: SagasCommand, json: bool) -> Result<(), Failure> {
    match command {
        SagasCommand::List { partition } => {
            let sagas = management.sagas(partition.as_deref()).await?;
            print(json, &sagas, |s| output::sagas(s))
        }
        SagasCommand::Show { partition, id } => {
            let Some(saga) = management.saga(&partition, &id).await? else {
                return Err(Failure::Refused(format!(
                    "no saga {id} in partition {partition}"
                )));
            };
            print(json, &saga, output::saga)
        }
        SagasCommand::Delete { .. } => unreachable!("a change (`act::asked`)"),
    }
}

/// "no queues under prefix P", and where the bus's keys are if it has some elsewhere (the
/// prefix is probably wrong).
async fn nothing_under(management: &Management, what: &str) -> Result<String, Failure> {
    let mut text = format!("no {what} under prefix {}", management.key_prefix());
    let others = management.other_prefixes().await?;
    if !others.is_empty() {
        text.push_str(&format!(
            "; the bus has keys under prefix: {} (see --prefix)",
            others.join(", ")
        ));
    }
    Ok(text)
}
