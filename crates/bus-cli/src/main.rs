//! `bus`: the command-line tool over [`bus_management`] (SPEC §6).

mod babel;
mod batches;
mod cli;
mod failure;
mod ops;
mod output;
mod search;
mod serve;
mod watch;

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;

use bus_babelqueue::Layout;
use bus_management::{parse_source, Fleet, Management, Selection};
use bus_redis::{RedisConfig, RedisTransport};
use clap::Parser;
use serde_json::json;

use bus_management::AuditEntry;
use cli::{Cli, Command, SagasCommand};
use failure::{fail, redact, Failure};
use output::out;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&Failure::Stdin(e)),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Where Redis is when neither --url nor REDIS_URL says.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

async fn run(cli: Cli) -> Result<(), Failure> {
    let url = match &cli.url {
        Some(url) => url.clone(),
        None => std::env::var("REDIS_URL")
            .ok()
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_URL.to_owned()),
    };
    let mut config = RedisConfig::from_url(&url)?.prefix(cli.prefix.as_str());
    if let Some(ca) = &cli.tls_ca {
        config = with_tls_ca(config, ca)?;
    }
    if let Command::Doctor = cli.command {
        return ops::doctor(&config, &url, cli.tls_ca.is_some(), cli.json).await;
    }
    let saga_prefix = match &cli.command {
        Command::Sagas(args) => args.saga_prefix.clone(),
        _ => None,
    };
    let transport = match RedisTransport::connect(&config).await {
        Ok(transport) => transport,
        // Connected, but Redis speaks another protocol: its own words say what to do.
        Err(source @ bus_redis::Error::ProtocolMismatch { .. }) => return Err(source.into()),
        Err(source) => {
            return Err(Failure::Connect {
                url: redact(&url),
                reason: failure::connect_reason(&source.into(), &url, cli.tls_ca.is_some()),
            })
        }
    };
    let mut management = Management::from_transport(transport.clone());
    if let Some(prefix) = saga_prefix {
        management = management.saga_prefix(prefix);
    }
    let fleet = fleet(&management, &transport, &cli.laravel_prefix);
    let command = match cli.command {
        // `bus babel stats|peek|dead Q` are the table's commands on `babel:Q`.
        Command::Babel(args) => match babel::alias(args) {
            Ok(command) => command,
            Err(args) => {
                let result = babel::run(&fleet, &cli.laravel_prefix, args, cli.json).await;
                let _ = management.close().await;
                return result;
            }
        },
        command => command,
    };
    let result = match command {
        Command::Dashboard(args) => serve::dashboard(fleet.clone(), args).await,
        Command::Metrics { listen } => serve::metrics(fleet.clone(), listen).await,
        Command::Batches(args) => batches::list(&transport, args, cli.json).await,
        Command::Batch(args) => batches::show(&transport, args, cli.json).await,
        Command::Stats(args) if args.watch => {
            let only = match &args.queue {
                Some(queue) => Some(existing(&fleet, queue).await?),
                None => None,
            };
            watch::watch(&fleet, only.as_deref(), args.interval, cli.json).await
        }
        command => execute(&fleet, command, cli.json).await,
    };
    // Best effort: the process ends anyway.
    let _ = management.close().await;
    result
}

/// The bus's own queues and BabelQueue's (both layouts) in this Redis, behind one
/// operator surface: `queue`, `topic/subscription`, `babel:<queue>`, `laravel:<queue>`.
fn fleet(management: &Management, transport: &RedisTransport, laravel_prefix: &str) -> Fleet {
    let babel = bus_babelqueue::Admin::new(transport.client().clone());
    Fleet::new(management.clone())
        .with(Arc::new(babel.layout(Layout::Legacy)))
        .with(Arc::new(babel.layout(Layout::Laravel {
            prefix: laravel_prefix.to_owned(),
        })))
}

async fn execute(fleet: &Fleet, command: Command, json: bool) -> Result<(), Failure> {
    let management = fleet.management();
    match command {
        Command::Queues => {
            let queues = fleet.queues().await?;
            if json {
                output::json(&queues)?;
            } else if queues.is_empty() {
                out!("{}", nothing_under(management, "queues").await?)?;
            } else {
                output::queues(&queues)?;
            }
        }
        Command::Topics => {
            let topics = management.topics().await?;
            if json {
                output::json(&topics)?;
            } else if topics.is_empty() {
                out!("{}", nothing_under(management, "topics").await?)?;
            } else {
                output::topics(&topics)?;
            }
        }
        Command::Stats(args) => {
            let stats = match args.queue {
                Some(queue) => vec![fleet.stats(&existing(fleet, &queue).await?).await?],
                None => fleet.stats_all().await?,
            };
            // A partitioned queue is one row, with its shards' rows under it.
            let mut rows = Vec::with_capacity(stats.len());
            for total in stats {
                let shards = match fleet.native_source(&total.queue)? {
                    Some(source) => management.shard_stats(&source).await?,
                    None => Vec::new(),
                };
                rows.push(output::StatsRow { total, shards });
            }
            if json {
                output::json(&rows)?;
            } else if rows.is_empty() {
                out!(
                    "{}",
                    nothing_under(management, "queues or subscriptions").await?
                )?;
            } else {
                output::stats(&rows)?;
            }
        }
        Command::Peek { queue, count } => {
            let messages = fleet.peek(&existing(fleet, &queue).await?, count).await?;
            if json {
                output::json(&messages)?;
            } else {
                output::peek(&queue, &messages)?;
            }
        }
        Command::Dead { queue, count, wide } => {
            let letters = fleet
                .dead_letters(&existing(fleet, &queue).await?, count)
                .await?;
            if json {
                output::json(&letters)?;
            } else if wide {
                output::dead_letters_wide(&queue, &letters)?;
            } else {
                output::dead_letters(&queue, &letters)?;
            }
        }
        Command::Scheduled { queue, count } => {
            let source = existing_native(fleet, &queue, "scheduled").await?;
            let messages = management.scheduled(&source, count).await?;
            if json {
                output::json(&messages)?;
            } else {
                output::scheduled(&queue, &messages)?;
            }
        }
        Command::Cancel { queue, id } => {
            let source = existing_native(fleet, &queue, "cancel").await?;
            if !management.admin().cancel(&source, &id).await? {
                return Err(Failure::Refused(format!(
                    "no delayed message {id} waits in {queue}"
                )));
            }
            audit(management, "cancel", &queue, 1, id.clone()).await;
            if json {
                output::json(&json!({ "queue": queue, "cancelled": id }))?;
            } else {
                out!("cancelled {id} of {queue}")?;
            }
        }
        Command::Requeue(args) => {
            let queue = existing(fleet, &args.queue).await?;
            if let Some(to) = &args.to {
                // A name of the bus's own must be valid; a new one is fine (a send
                // creates a queue).
                fleet.native_source(to)?;
            }
            let selection = if args.all {
                Selection::All
            } else {
                Selection::Ids(args.ids)
            };
            let report = fleet
                .requeue(&queue, &selection, args.to.as_deref())
                .await?;
            let action = if report.target == queue {
                "requeue"
            } else {
                "move"
            };
            let detail = format!(
                "to {}{}",
                report.target,
                if args.all { ", all" } else { "" }
            );
            audit(
                management,
                action,
                &queue,
                report.requeued.len() as u64,
                detail,
            )
            .await;
            if json {
                output::json(&report)?;
            } else {
                out!(
                    "requeued {} dead letter(s) of {} to {}",
                    report.requeued.len(),
                    args.queue,
                    report.target
                )?;
                if !report.skipped.is_empty() {
                    eprintln!(
                        "left dead (no stored envelope): {}",
                        report.skipped.join(" ")
                    );
                }
                if !report.duplicated.is_empty() {
                    eprintln!(
                        "copied, but already gone from the dead letters (may be delivered twice): {}",
                        report.duplicated.join(" ")
                    );
                }
            }
            if !report.not_found.is_empty() {
                return Err(Failure::Refused(format!(
                    "not dead letters of {}: {}",
                    args.queue,
                    report.not_found.join(" ")
                )));
            }
        }
        Command::Search(args) => search::run(fleet, args, json).await?,
        Command::DeleteDead { queue, id } => {
            let address = existing(fleet, &queue).await?;
            if !fleet.delete_dead_letter(&address, &id).await? {
                return Err(Failure::Refused(format!(
                    "{id} is not a dead letter of {queue}"
                )));
            }
            audit(
                management,
                "delete",
                &queue,
                1,
                format!("dead letters {id}"),
            )
            .await;
            if json {
                output::json(&json!({ "queue": queue, "deleted": id }))?;
            } else {
                out!("deleted dead letter {id} of {queue}")?;
            }
        }
        Command::Purge { queue, yes } => {
            let address = existing(fleet, &queue).await?;
            if !yes {
                confirm_purge(fleet, &address).await?;
            }
            let purged = fleet.purge(&address).await?;
            let mut detail = format!("{} ready, {} delayed", purged.ready, purged.delayed);
            if purged.keyed > 0 {
                detail = format!("{detail}, {} keyed", purged.keyed);
            }
            let count = purged.ready + purged.delayed + purged.keyed;
            audit(management, "purge", &queue, count, detail.clone()).await;
            if json {
                output::json(&json!({
                    "queue": queue,
                    "ready": purged.ready,
                    "delayed": purged.delayed,
                    "keyed": purged.keyed,
                }))?;
            } else {
                out!("purged {detail} message(s) of {queue}")?;
            }
        }
        Command::Pause { queue } => {
            pause_or_resume(fleet, &queue, true, json).await?;
            audit(management, "pause", &queue, 1, String::new()).await;
        }
        Command::Resume { queue } => {
            pause_or_resume(fleet, &queue, false, json).await?;
            audit(management, "resume", &queue, 1, String::new()).await;
        }
        Command::CloseBreaker { queue } => {
            let address = existing(fleet, &queue).await?;
            fleet.close_breaker(&address).await?;
            audit(management, "close-breaker", &queue, 1, String::new()).await;
            if json {
                output::json(&json!({ "queue": queue, "breaker": "closed" }))?;
            } else {
                out!("closed the circuit breaker of {queue}")?;
            }
        }
        Command::Send(args) => {
            let source = parse_source(&args.queue)?;
            let id = management
                .send(
                    &source,
                    args.message_type.as_deref(),
                    &args.body,
                    args.headers.into_iter().collect(),
                )
                .await?;
            if json {
                output::json(&json!({ "queue": args.queue, "id": id.as_str() }))?;
            } else {
                out!("{id}")?;
            }
        }
        Command::Unsubscribe { topic, name, force } => {
            let removed = match management.remove_subscription(&topic, &name, force).await {
                Ok(removed) => removed,
                Err(bus_management::Error::NotEmpty {
                    ready,
                    in_flight,
                    delayed,
                    dead,
                    ..
                }) => {
                    return Err(Failure::Refused(format!(
                        "subscription {name} of topic {topic} still holds messages ({ready} \
                         ready, {in_flight} in flight, {delayed} delayed, {dead} dead \
                         letters); nothing was changed (pass --force to remove it and delete \
                         them)"
                    )))
                }
                Err(e) => return Err(e.into()),
            };
            if !removed.was_registered && removed.deleted_keys == 0 {
                return Err(Failure::Refused(format!(
                    "topic {topic} has no subscription {name}"
                )));
            }
            let detail = format!(
                "{} key(s) deleted{}",
                removed.deleted_keys,
                if force { ", forced" } else { "" }
            );
            audit(
                management,
                "unsubscribe",
                &format!("{topic}/{name}"),
                1,
                detail,
            )
            .await;
            if json {
                output::json(&json!({
                    "topic": topic,
                    "subscription": name,
                    "was_registered": removed.was_registered,
                    "deleted_keys": removed.deleted_keys,
                }))?;
            } else {
                out!(
                    "removed subscription {name} of topic {topic} ({} key(s) deleted)",
                    removed.deleted_keys
                )?;
            }
        }
        Command::Sagas(args) => match args.command {
            SagasCommand::List { partition } => {
                let sagas = management.sagas(partition.as_deref()).await?;
                if json {
                    output::json(&sagas)?;
                } else {
                    output::sagas(&sagas)?;
                }
            }
            SagasCommand::Show { partition, id } => {
                let Some(saga) = management.saga(&partition, &id).await? else {
                    return Err(Failure::Refused(format!(
                        "no saga {id} in partition {partition}"
                    )));
                };
                if json {
                    output::json(&saga)?;
                } else {
                    output::saga(&saga)?;
                }
            }
            SagasCommand::Delete { partition, id } => {
                if !management.delete_saga(&partition, &id).await? {
                    return Err(Failure::Refused(format!(
                        "no saga {id} in partition {partition}"
                    )));
                }
                let target = format!("{partition}/{id}");
                audit(management, "delete-saga", &target, 1, String::new()).await;
                if json {
                    output::json(&json!({ "partition": partition, "deleted": id }))?;
                } else {
                    out!("deleted saga {id} of partition {partition}")?;
                }
            }
        },
        Command::Audit { count } => {
            let entries = management.audit_log(count).await?;
            if json {
                output::json(&entries)?;
            } else {
                ops::audit_table(&entries)?;
            }
        }
        Command::Hosts => {
            let hosts = management.hosts().await?;
            if json {
                output::json(&hosts)?;
            } else {
                ops::hosts_table(&hosts)?;
            }
        }
        Command::Schedules => {
            let schedules = management.schedules().await?;
            if json {
                output::json(&schedules)?;
            } else {
                ops::schedules_table(&schedules)?;
            }
        }
        Command::Dashboard(_)
        | Command::Metrics { .. }
        | Command::Babel(_)
        | Command::Doctor
        | Command::Batches(_)
        | Command::Batch(_) => {
            unreachable!("served by `run` before `execute`")
        }
    }
    Ok(())
}

/// Appends a change this tool made to the audit log, by the OS user, through `bus`. The
/// change is done: a failed append is a warning on stderr, not the command's failure.
async fn audit(management: &Management, action: &str, target: &str, count: u64, detail: String) {
    let entry =
        AuditEntry::new(bus_management::os_user(), "bus", action, target, count).detail(detail);
    if let Err(error) = management.audit(&entry).await {
        eprintln!(
            "bus: warning: the change was made, but its audit entry could not be written: {}",
            bus_core::ErrorChain(&error)
        );
    }
}

/// Trusts the CA in `file` for rediss://.
#[cfg(feature = "tls")]
fn with_tls_ca(config: RedisConfig, file: &std::path::Path) -> Result<RedisConfig, Failure> {
    Ok(config.tls_ca_file(file))
}

#[cfg(not(feature = "tls"))]
fn with_tls_ca(_: RedisConfig, _: &std::path::Path) -> Result<RedisConfig, Failure> {
    Err(Failure::Refused(
        "--tls-ca needs TLS, and this bus was built without its `tls` feature \
         (build it with `--features tls`)"
            .to_owned(),
    ))
}

/// A queue (of any kind) or subscription that exists, by its address (a typo is an
/// error that says what does exist).
async fn existing(fleet: &Fleet, name: &str) -> Result<String, Failure> {
    fleet.ensure_exists(name).await?;
    Ok(name.to_owned())
}

/// One of the bus's own queues or subscriptions that exists, for the commands only they
/// have (`scheduled`): another kind's queue is refused, saying so.
async fn existing_native(
    fleet: &Fleet,
    name: &str,
    command: &str,
) -> Result<bus_core::transport::Source, Failure> {
    let Some(source) = fleet.native_source(name)? else {
        return Err(Failure::Refused(format!(
            "`bus {command}` is for the bus's own queues; {name} is a queue of another kind"
        )));
    };
    fleet.management().ensure_exists(&source).await?;
    Ok(source)
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

/// Asks the operator to type the queue's name; refuses without a terminal to ask on.
/// `bus pause` and `bus resume`.
async fn pause_or_resume(
    fleet: &Fleet,
    queue: &str,
    pause: bool,
    json: bool,
) -> Result<(), Failure> {
    let address = existing(fleet, queue).await?;
    if pause {
        fleet.pause(&address).await?;
    } else {
        fleet.resume(&address).await?;
    }
    if json {
        output::json(&json!({ "queue": queue, "paused": pause }))?;
    } else if pause {
        out!("paused {queue}")?;
    } else {
        out!("resumed {queue}")?;
    }
    Ok(())
}

async fn confirm_purge(fleet: &Fleet, name: &str) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::Refused(format!(
            "not purging {name}: confirmation is needed and standard input is not a terminal \
             (pass --yes to purge without asking)"
        )));
    }
    let stats = fleet.stats(name).await?;
    eprint!(
        "This deletes {} ready and {} delayed message(s) of {name}; in-flight messages and \
         dead letters stay.\nType the queue name to confirm: ",
        stats.ready, stats.delayed
    );
    std::io::stderr().flush()?;
    let mut answer = String::new();
    let read = stdin.lock().read_line(&mut answer)?;
    if read == 0 || answer.trim() != name {
        return Err(Failure::Refused(format!(
            "not purging {name}: not confirmed"
        )));
    }
    Ok(())
}
