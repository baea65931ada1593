//! `bus batches` and `bus batch ID`: workflows (bus-workflows) as operators see them:
//! open batches and their progress, members that died, callbacks sent or pending,
//! continuations waiting for their children, and runs parked by a sleep or a wait.

use bus_core::transport::now_ms;
use bus_redis::RedisTransport;
use bus_workflows::store::WorkflowStore;
use bus_workflows::{BatchId, BatchStatus, ParkedInfo, ParkedKind, RedisWorkflowStore};
use clap::Args;
use comfy_table::{presets, Cell, CellAlignment, Table};
use serde_json::json;

use crate::failure::Failure;
use crate::output::{self, out};

#[derive(Debug, Args)]
pub struct BatchesArgs {
    /// How many open batches, recently done ones and parked runs to show (each).
    #[arg(short = 'n', long = "count", default_value_t = 20)]
    pub count: usize,
}

#[derive(Debug, Args)]
pub struct BatchArgs {
    /// The batch's id.
    pub id: String,
    /// How many of its dead members to show.
    #[arg(short = 'n', long = "count", default_value_t = 20)]
    pub count: usize,
}

fn failure(error: bus_workflows::Error) -> Failure {
    match error {
        bus_workflows::Error::Redis(e) => e.into(),
        other => Failure::Refused(bus_core::ErrorChain(&other).to_string()),
    }
}

fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_preset(presets::UTF8_FULL_CONDENSED);
    table.set_header(header.iter().map(Cell::new));
    table
}

fn number(n: u64) -> Cell {
    Cell::new(n).set_alignment(CellAlignment::Right)
}

/// `success:sent complete:- death:pending`: each callback, and whether it was sent.
fn callbacks(status: &BatchStatus) -> String {
    let each: Vec<String> = status
        .callbacks
        .iter()
        .map(|c| {
            let state = match (c.fired, c.sent, status.outcome) {
                (_, true, _) => "sent",
                (true, false, _) => "sending",
                (false, false, Some(_)) => "never",
                (false, false, None) => "-",
            };
            format!("{}:{state}", c.kind)
        })
        .collect();
    each.join(" ")
}

/// What a batch is: a plain batch, a nested one, or a parent's children.
fn kind(status: &BatchStatus) -> String {
    match (&status.policy, &status.parent) {
        (Some(policy), _) => format!("children ({})", policy.as_str()),
        (None, Some(parent)) => format!("nested in {parent}"),
        (None, None) => "batch".to_owned(),
    }
}

fn state(status: &BatchStatus) -> String {
    match status.outcome {
        Some(outcome) => format!("{} ({})", status.state.as_str(), outcome.as_str()),
        None if status.closed => status.state.as_str().to_owned(),
        None => format!("{} (adding)", status.state.as_str()),
    }
}

fn batches_table(statuses: &[BatchStatus]) -> Table {
    let mut t = table(&[
        "BATCH",
        "KIND",
        "STATE",
        "TOTAL",
        "PENDING",
        "OK",
        "DEAD",
        "CALLBACKS",
        "CREATED",
    ]);
    for s in statuses {
        t.add_row(vec![
            Cell::new(&s.id),
            Cell::new(kind(s)),
            Cell::new(state(s)),
            number(s.total),
            number(s.pending()),
            number(s.succeeded),
            number(s.dead),
            Cell::new(callbacks(s)),
            Cell::new(output::age(now_ms().saturating_sub(s.created_ms))),
        ]);
    }
    t
}

fn waits_for(run: &ParkedInfo) -> String {
    match &run.kind {
        ParkedKind::Sleep => "sleep".to_owned(),
        ParkedKind::Wait {
            signal,
            signalled: true,
        } => format!("signal {signal} (came)"),
        ParkedKind::Wait { signal, .. } => format!("signal {signal}"),
        _ => "?".to_owned(),
    }
}

fn parked_table(parked: &[ParkedInfo]) -> Table {
    let mut t = table(&["RUN", "QUEUE", "TYPE", "WAITS FOR", "RESUMES AT THE LATEST"]);
    for run in parked {
        t.add_row(vec![
            run.token.clone(),
            run.queue.clone(),
            run.message_type.clone(),
            waits_for(run),
            output::time(run.due_ms),
        ]);
    }
    t
}

async fn statuses(
    store: &RedisWorkflowStore,
    ids: &[BatchId],
) -> Result<Vec<BatchStatus>, Failure> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(status) = store.status(id, 0).await.map_err(failure)? {
            out.push(status);
        }
    }
    Ok(out)
}

/// `bus batches`: open batches (oldest first), recently done ones, parked runs.
pub async fn list(
    transport: &RedisTransport,
    args: BatchesArgs,
    json: bool,
) -> Result<(), Failure> {
    let store = RedisWorkflowStore::for_transport(transport);
    let (open, recent) = store.list(args.count).await.map_err(failure)?;
    let open = statuses(&store, &open).await?;
    let recent = statuses(&store, &recent).await?;
    let parked = store.parked(args.count).await.map_err(failure)?;
    if json {
        return output::json(&json!({ "open": open, "done": recent, "parked": parked }));
    }
    out!("Open batches")?;
    if open.is_empty() {
        out!("no open batches")?;
    } else {
        out!("{}", batches_table(&open))?;
    }
    out!("\nRecently done")?;
    if recent.is_empty() {
        out!("none")?;
    } else {
        out!("{}", batches_table(&recent))?;
    }
    out!("\nParked runs (sleeping, or waiting for a signal)")?;
    if parked.is_empty() {
        out!("none")
    } else {
        out!("{}", parked_table(&parked))
    }
}

/// `bus batch ID`: one batch, its callbacks, its dead members, the members waiting for
/// their child batches.
pub async fn show(transport: &RedisTransport, args: BatchArgs, json: bool) -> Result<(), Failure> {
    let id = BatchId::parse(&args.id).map_err(failure)?;
    let store = RedisWorkflowStore::for_transport(transport);
    let Some(status) = store.status(&id, args.count).await.map_err(failure)? else {
        return Err(Failure::Refused(format!(
            "no batch {id} (never opened, or expired)"
        )));
    };
    if json {
        return output::json(&status);
    }
    out!("{}", batches_table(std::slice::from_ref(&status)))?;
    let mut t = table(&["CALLBACK", "QUEUE", "MESSAGE ID", "STATE"]);
    for c in &status.callbacks {
        let state = match (c.fired, c.sent, status.outcome) {
            (_, true, _) => "sent".to_owned(),
            (true, false, _) => "fired, sending".to_owned(),
            (false, false, Some(outcome)) => format!("never (outcome {})", outcome.as_str()),
            (false, false, None) => "pending".to_owned(),
        };
        t.add_row(vec![c.kind.as_str(), &c.queue, &c.message_id, &state]);
    }
    out!("{t}")?;
    if !status.waiting_on.is_empty() {
        let mut t = table(&["MEMBER", "WAITS FOR CHILD BATCH"]);
        for (index, child) in &status.waiting_on {
            t.add_row(vec![index.to_string(), child.to_string()]);
        }
        out!("{t}")?;
    }
    if status.dead_members.is_empty() {
        return Ok(());
    }
    let mut t = table(&[
        "DEAD MEMBER",
        "MESSAGE ID",
        "QUEUE",
        "REASON",
        "ERROR",
        "AT",
    ]);
    for d in &status.dead_members {
        t.add_row(vec![
            d.index.to_string(),
            d.message_id.clone(),
            d.queue.clone(),
            d.reason.clone(),
            d.error.clone(),
            output::time(d.at_ms),
        ]);
    }
    out!("{t}")
}
