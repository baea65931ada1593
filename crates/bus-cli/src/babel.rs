//! `bus babel ...`: BabelQueue queues of one layout. `stats`, `peek` (ready or dead) and
//! `dead` are aliases of the command table's `stats`, `peek` and `dead` on
//! `babel:<queue>` / `laravel:<queue>` (the one operator surface); `queues` lists the
//! BabelQueue queues only; `peek --area in-flight|delayed` and `redrive` (dry run, reason
//! filter, max) are BabelQueue's own, over `bus_babelqueue::Admin`.

use std::time::Duration;

use bus_babelqueue::{Admin, Area, Content, Layout, Peeked};
use bus_babelqueue::{LARAVEL_KIND, LEGACY_KIND};
use bus_management::{Action, Fleet};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};

use crate::cli::{Command, StatsArgs};
use crate::failure::Failure;
use crate::output::out;

#[derive(Debug, Args)]
pub struct BabelArgs {
    /// The queues' layout: BabelQueue's own, or Laravel's (`queues:<name>`).
    #[arg(long, value_enum, default_value_t = LayoutArg::Legacy, global = true)]
    layout: LayoutArg,
    #[command(subcommand)]
    command: BabelCommand,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LayoutArg {
    Legacy,
    Laravel,
}

#[derive(Debug, Subcommand)]
enum BabelCommand {
    /// List the BabelQueue queues found in Redis (both layouts; SCAN, never KEYS). A
    /// legacy queue holding only ready messages is a bare list and is not found: name it.
    Queues,
    /// Ready, in flight (and lapsed), delayed (Laravel) and dead-lettered counts.
    Stats { queue: String },
    /// The next messages of a queue (or its in-flight, delayed or dead ones).
    Peek {
        queue: String,
        /// Which part.
        #[arg(long, value_enum, default_value_t = AreaArg::Ready)]
        area: AreaArg,
        /// How many.
        #[arg(short = 'n', long = "count", default_value_t = 10)]
        count: usize,
    },
    /// The dead letters of a queue (its `.dlq`) with their `dead_letter` block.
    Dead {
        queue: String,
        /// How many.
        #[arg(short = 'n', long = "count", default_value_t = 10)]
        count: usize,
    },
    /// Move dead letters back to their queue (or --to another), as BabelQueue's redrive
    /// does: headers dropped, attempts reset, poison left in the DLQ. Each record moves
    /// atomically; --dry-run changes nothing.
    Redrive {
        queue: String,
        /// Target queue instead of each record's `original_queue`.
        #[arg(long, value_name = "QUEUE")]
        to: Option<String>,
        /// Only records with this `dead_letter.reason` (failed, unknown_urn, ...).
        #[arg(long)]
        reason: Option<String>,
        /// At most this many.
        #[arg(long)]
        max: Option<usize>,
        /// Report what would move, moving nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum AreaArg {
    Ready,
    InFlight,
    Delayed,
    Dead,
}

/// The command-table command a `bus babel ...` spelling stands for, or the arguments
/// back when it is BabelQueue's own (`queues`, `peek --area in-flight|delayed`,
/// `redrive`).
pub fn alias(args: BabelArgs) -> Result<Command, BabelArgs> {
    let kind = match args.layout {
        LayoutArg::Legacy => LEGACY_KIND,
        LayoutArg::Laravel => LARAVEL_KIND,
    };
    let address = |queue: &str| format!("{kind}:{queue}");
    match &args.command {
        BabelCommand::Stats { queue } => Ok(Command::Stats(StatsArgs {
            queue: Some(address(queue)),
            all: false,
            watch: false,
            interval: Duration::from_secs(2),
        })),
        BabelCommand::Peek {
            queue,
            area: AreaArg::Ready,
            count,
        } => Ok(Command::Peek {
            queue: address(queue),
            count: *count as u64,
        }),
        BabelCommand::Peek {
            queue,
            area: AreaArg::Dead,
            count,
        }
        | BabelCommand::Dead { queue, count } => Ok(Command::Dead {
            queue: address(queue),
            count: *count as u64,
            wide: false,
        }),
        _ => Err(args),
    }
}

pub async fn run(
    fleet: &Fleet,
    laravel_prefix: &str,
    args: BabelArgs,
    json: bool,
) -> Result<(), Failure> {
    let client = fleet.management().admin().transport().client().clone();
    let admin = Admin::new(client).laravel_prefix(laravel_prefix);
    let layout = match args.layout {
        LayoutArg::Legacy => Layout::Legacy,
        LayoutArg::Laravel => Layout::Laravel {
            prefix: laravel_prefix.to_owned(),
        },
    };
    let out: Value = match args.command {
        BabelCommand::Queues => {
            // The command table's `queues`, BabelQueue's kinds only.
            let found: Vec<String> = fleet
                .queues()
                .await?
                .into_iter()
                .filter(|q| q.starts_with("babel:") || q.starts_with("laravel:"))
                .collect();
            if !json {
                for q in &found {
                    out!("{q}")?;
                }
                return Ok(());
            }
            found.into()
        }
        BabelCommand::Stats { .. } | BabelCommand::Dead { .. } => {
            unreachable!("aliases of the command table (`alias`)")
        }
        BabelCommand::Peek { queue, area, count } => {
            let area = match area {
                AreaArg::Ready => Area::Ready,
                AreaArg::InFlight => Area::InFlight,
                AreaArg::Delayed => Area::Delayed,
                AreaArg::Dead => Area::DeadLetters,
            };
            let peeked = admin.peek(&layout, &queue, area, 0, count).await?;
            if !json {
                for p in &peeked {
                    out!("{}", line(p))?;
                }
                return Ok(());
            }
            peeked.iter().map(peeked_json).collect()
        }
        BabelCommand::Redrive {
            queue,
            to,
            reason,
            max,
            dry_run,
        } => {
            let action = Action::Redrive {
                layout,
                queue,
                to,
                reason,
                max,
                dry_run,
            };
            return crate::act::apply(fleet, action, json).await;
        }
    };
    out!("{}", serde_json::to_string_pretty(&out)?)?;
    Ok(())
}

fn peeked_json(p: &Peeked) -> Value {
    match &p.content {
        Content::Envelope(e) => json!({
            "position": p.position, "id": e.meta().id, "urn": e.urn(),
            "trace_id": e.trace_id(), "attempts": e.attempts(),
            "data": serde_json::from_str::<Value>(e.data().get()).unwrap_or(Value::Null),
            "headers": p.headers, "score": p.score,
        }),
        Content::Poison(why) => json!({
            "position": p.position, "poison": why.to_string(),
            "raw": String::from_utf8_lossy(&p.body),
        }),
    }
}

/// One line of a listing: position, id, URN and attempts, or why it is poison.
fn line(p: &Peeked) -> String {
    match &p.content {
        Content::Envelope(e) => format!(
            "{:>4}  {}  {}  attempts={}",
            p.position,
            e.meta().id.as_deref().unwrap_or("-"),
            e.urn(),
            e.attempts()
        ),
        Content::Poison(why) => format!("{:>4}  poison ({why})", p.position),
    }
}
