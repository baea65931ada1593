//! `bus search`: find ready, delayed and dead messages in bounded pages, with progress on
//! stderr; with --requeue, --delete or --move-to, act on every match after a dry run
//! (confirmed unless --yes), one audit entry for the whole.

use std::io::{BufRead, IsTerminal, Write};

use bus_management::{Acted, Action, Fleet, Found, Place, SearchQuery};
use serde_json::json;

use crate::cli::SearchArgs;
use crate::failure::Failure;
use crate::output::{self, out};
use crate::{audit, existing_native};

pub async fn run(fleet: &Fleet, args: SearchArgs, json: bool) -> Result<(), Failure> {
    let management = fleet.management();
    let source = existing_native(fleet, &args.queue, "search").await?;
    let query = query_of(&args)?;
    let action = match (&args.move_to, args.requeue, args.delete) {
        (Some(to), _, _) => Some(Action::Move(existing_native(fleet, to, "search").await?)),
        (None, true, _) => Some(Action::Requeue),
        (None, false, true) => Some(Action::Delete),
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
    let Some(action) = action else {
        if json {
            output::json(&json!({ "matched": matched, "found": shown }))?;
        } else {
            table(&shown)?;
            out!("{matched} match(es) in {}", args.queue)?;
        }
        return Ok(());
    };
    if matched == 0 {
        out!("no match in {}: nothing to {}", args.queue, action.name())?;
        return Ok(());
    }
    if !args.yes {
        confirm(&args.queue, action.name(), matched)?;
    }
    let acted = management
        .act_all(&source, &query, args.page, &action, |page| {
            if progress {
                eprint!(
                    "\r{} {} of {}",
                    action.name(),
                    page.page.position,
                    page.page.total
                );
            }
        })
        .await?;
    if progress {
        eprintln!();
    }
    let to = args
        .move_to
        .as_deref()
        .map(|t| format!(" to {t}"))
        .unwrap_or_default();
    let detail = format!("search matches ({}){to}", describe(&args));
    audit(
        management,
        action.name(),
        &args.queue,
        acted.changed,
        detail,
    )
    .await;
    if json {
        output::json(&acted)?;
    } else {
        report(&args.queue, action.name(), &acted)?;
    }
    Ok(())
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

fn report(queue: &str, action: &str, acted: &Acted) -> Result<(), Failure> {
    out!(
        "{action}: {} of {} match(es) of {queue}",
        acted.changed,
        acted.matched
    )?;
    if acted.gone > 0 {
        eprintln!(
            "{} were no longer where the search found them (taken meanwhile): left alone",
            acted.gone
        );
    }
    if acted.unchanged > 0 {
        eprintln!("{} left as they were (ready messages are not requeued; dead letters without an envelope)", acted.unchanged);
    }
    if acted.duplicated > 0 {
        eprintln!(
            "{} copied to the target but already gone here (may be delivered twice)",
            acted.duplicated
        );
    }
    Ok(())
}
