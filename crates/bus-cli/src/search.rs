//! `bus search`: find ready, delayed and dead messages in bounded pages, with progress on
//! stderr; with --requeue, --delete or --move-to, act on every match after a dry run
//! (confirmed unless --yes), one audit entry for the whole.

use std::io::{BufRead, IsTerminal, Write};

use bus_management::{Action, Fleet, Found, OnMatches, Pages, Place, SearchQuery};
use serde_json::json;

use crate::cli::SearchArgs;
use crate::existing_native;
use crate::failure::Failure;
use crate::output::{self, out};

pub async fn run(fleet: &Fleet, args: SearchArgs, json: bool) -> Result<(), Failure> {
    let management = fleet.management();
    let source = existing_native(fleet, &args.queue, "search").await?;
    let query = query_of(&args)?;
    let act = match (&args.move_to, args.requeue, args.delete) {
        (Some(to), _, _) => {
            existing_native(fleet, to, "search").await?;
            Some(OnMatches::MoveTo(to.clone()))
        }
        (None, true, _) => Some(OnMatches::Requeue),
        (None, false, true) => Some(OnMatches::Delete),
        _ => None,
    };
    // The dry run: every page, counted.
    let progress = std::io::stderr().is_terminal();
    let mut shown: Vec<Found> = Vec::new();
    let mut matched = 0u64;
    let mut cursor: Option<String> = None;
    loop {
        let page = management
            .search(&source, &query, cursor.as_deref(), args.page)
            .await?;
        matched += page.found.len() as u64;
        let room = (args.count as usize).saturating_sub(shown.len());
        shown.extend(page.found.into_iter().take(room));
        if progress {
            eprint!(
                "\rscanned {} of {} · {matched} match(es)",
                page.position, page.total
            );
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if progress {
        eprintln!();
    }
    let Some(act) = act else {
        if json {
            output::json(&json!({ "matched": matched, "found": shown }))?;
        } else {
            table(&shown)?;
            out!("{matched} match(es) in {}", args.queue)?;
        }
        return Ok(());
    };
    let verb = act.name();
    if matched == 0 {
        out!("no match in {}: nothing to {verb}", args.queue)?;
        return Ok(());
    }
    if !args.yes {
        confirm(&args.queue, verb, matched)?;
    }
    let action = Action::ActOnMatches {
        queue: args.queue.clone(),
        query,
        criteria: describe(&args),
        act,
        pages: Pages::All { limit: args.page },
    };
    crate::act::apply_watched(fleet, action, json, |page| {
        if progress {
            eprint!("\r{verb} {} of {}", page.page.position, page.page.total);
            if page.page.next.is_none() {
                eprintln!();
            }
        }
    })
    .await
}

fn query_of(args: &SearchArgs) -> Result<SearchQuery, Failure> {
    let mut query = SearchQuery::default();
    if let Some(id) = &args.id {
        query = query.id(id);
    }
    if let Some(t) = &args.message_type {
        query = query.message_type(t);
    }
    if let Some(header) = &args.header {
        let (name, value) = header.split_once('=').unwrap_or((header, ""));
        query = query.header(name, value);
    }
    if let Some(error) = &args.error {
        query = query.error(error);
    }
    if let Some(body) = &args.body {
        query = query.body(body);
    }
    let places = args
        .places
        .iter()
        .map(|p| p.parse::<Place>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::Refused(e.to_string()))?;
    if query.is_empty() {
        return Err(Failure::Refused(
            "give at least one of --id, --type, --header, --error, --body (to empty a queue, use `bus purge`)".to_owned(),
        ));
    }
    Ok(query.places(places))
}

fn describe(args: &SearchArgs) -> String {
    let mut parts = Vec::new();
    for (name, value) in [
        ("id", &args.id),
        ("type", &args.message_type),
        ("header", &args.header),
        ("error", &args.error),
        ("body", &args.body),
    ] {
        if let Some(value) = value {
            parts.push(format!("{name} {value:?}"));
        }
    }
    if !args.places.is_empty() {
        parts.push(format!("in {}", args.places.join(",")));
    }
    parts.join(", ")
}

fn confirm(queue: &str, action: &str, matched: u64) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::Refused(format!(
            "not acting on {matched} match(es) of {queue}: confirmation is needed and standard \
             input is not a terminal (pass --yes)"
        )));
    }
    eprint!("The dry run found {matched} match(es) in {queue}. Type {action:?} to {action} them: ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    let read = stdin.lock().read_line(&mut answer)?;
    if read == 0 || answer.trim() != action {
        return Err(Failure::Refused(format!(
            "not confirmed: nothing done to {queue}"
        )));
    }
    Ok(())
}

fn table(found: &[Found]) -> Result<(), Failure> {
    for f in found {
        let (id, kind) = match &f.message {
            Some(m) => (m.id.as_str(), m.message_type.as_str()),
            None => (f.storage_id.as_deref().unwrap_or("?"), "(unreadable)"),
        };
        let error = f
            .errors
            .last()
            .map(|e| e.message.as_str())
            .or(f.reason.as_deref())
            .unwrap_or("");
        let error: String = error.chars().take(60).collect();
        out!("{:<8} {:<28} {:<20} {}", f.place.name(), id, kind, error)?;
    }
    Ok(())
}
