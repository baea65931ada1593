//! How results print: readable tables (comfy-table), or JSON with `--json`.

use std::time::{Duration, UNIX_EPOCH};

use bus_management::{
    DeadLetter, MessageSummary, QueueStats, ReadyMessage, SagaEntry, ScheduledMessage, Topic,
};
use comfy_table::{presets, Cell, CellAlignment, Table};
use serde::Serialize;

/// Longest body (and error) excerpt in a table cell, in characters.
const PREVIEW: usize = 60;

/// Prints a value as pretty JSON.
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<(), serde_json::Error> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints a table, or `empty` when it has no rows.
fn print(table: Table, empty: &str) {
    if table.row_count() == 0 {
        println!("{empty}");
    } else {
        println!("{table}");
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

pub fn queues(queues: &[String]) {
    let mut t = table(&["QUEUE"]);
    for queue in queues {
        t.add_row(vec![queue]);
    }
    print(t, "no queues registered");
}

pub fn topics(topics: &[Topic]) {
    let mut t = table(&["TOPIC", "SUBSCRIPTIONS"]);
    for topic in topics {
        t.add_row(vec![topic.topic.clone(), topic.subscriptions.join("\n")]);
    }
    print(t, "no topics registered");
}

pub fn stats(stats: &[QueueStats]) {
    let mut t = table(&[
        "QUEUE",
        "READY",
        "IN FLIGHT",
        "DELAYED",
        "DEAD",
        "OLDEST READY",
    ]);
    for s in stats {
        t.add_row(vec![
            Cell::new(&s.queue),
            number(s.ready),
            number(s.in_flight),
            number(s.delayed),
            number(s.dead),
            Cell::new(s.oldest_age_ms.map_or_else(|| "-".to_owned(), age)),
        ]);
    }
    print(t, "no queues registered");
}

pub fn peek(queue: &str, messages: &[ReadyMessage]) {
    let mut t = table(&[
        "#",
        "MESSAGE ID",
        "TYPE",
        "SENT",
        "DELIVERIES",
        "HEADERS",
        "BODY",
    ]);
    for m in messages {
        let (id, message_type, body) = summary(m.message.as_ref(), m.decode_error.as_deref());
        let (sent, headers) = match &m.message {
            Some(message) => (
                time(message.sent_at_ms),
                message
                    .headers
                    .iter()
                    .map(|(k, v)| excerpt(&format!("{k}={v}")))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            None => ("-".to_owned(), String::new()),
        };
        t.add_row(vec![
            number(m.position),
            Cell::new(id),
            Cell::new(message_type),
            Cell::new(sent),
            number(m.delivery_count),
            Cell::new(headers),
            Cell::new(body),
        ]);
    }
    print(t, &format!("{queue}: nothing ready"));
}

pub fn scheduled(queue: &str, messages: &[ScheduledMessage]) {
    let mut t = table(&[
        "STORAGE ID",
        "DUE",
        "DELIVERIES",
        "MESSAGE ID",
        "TYPE",
        "BODY",
    ]);
    for m in messages {
        let (id, message_type, body) = summary(m.message.as_ref(), m.decode_error.as_deref());
        t.add_row(vec![
            Cell::new(&m.storage_id),
            Cell::new(time(m.due_at_ms)),
            number(m.delivery_count),
            Cell::new(id),
            Cell::new(message_type),
            Cell::new(body),
        ]);
    }
    print(t, &format!("{queue}: nothing scheduled"));
}

pub fn dead_letters(queue: &str, letters: &[DeadLetter]) {
    let mut t = table(&[
        "STORAGE ID",
        "REASON",
        "DEAD SINCE",
        "DELIVERIES",
        "LAST ERRORS",
        "MESSAGE ID",
        "TYPE",
        "BODY",
    ]);
    for d in letters {
        let (id, message_type, body) = summary(d.message.as_ref(), d.decode_error.as_deref());
        let errors: Vec<String> = d
            .errors
            .iter()
            .rev()
            .take(3)
            .map(|e| format!("{}: {}", time(e.at_ms), excerpt(&e.message)))
            .collect();
        let mut errors = errors.join("\n");
        if d.errors.len() > 3 {
            errors.push_str(&format!("\n(+{} earlier)", d.errors.len() - 3));
        }
        t.add_row(vec![
            Cell::new(&d.storage_id),
            Cell::new(d.reason.as_deref().unwrap_or("-")),
            Cell::new(d.dead_lettered_at_ms.map_or_else(|| "-".to_owned(), time)),
            number(d.delivery_count),
            Cell::new(if errors.is_empty() {
                "-".to_owned()
            } else {
                errors
            }),
            Cell::new(id),
            Cell::new(message_type),
            Cell::new(body),
        ]);
    }
    print(t, &format!("{queue}: no dead letters"));
}

pub fn sagas(sagas: &[SagaEntry]) {
    let mut t = table(&["PARTITION", "ID", "EXPIRES IN", "KEY"]);
    for s in sagas {
        t.add_row(vec![
            Cell::new(&s.partition),
            Cell::new(&s.id),
            Cell::new(s.ttl_ms.map_or_else(|| "never".to_owned(), age)),
            Cell::new(&s.key),
        ]);
    }
    print(t, "no sagas");
}

/// (message id, type, body excerpt) of a stored message.
fn summary(
    message: Option<&MessageSummary>,
    decode_error: Option<&str>,
) -> (String, String, String) {
    match message {
        Some(m) => (m.id.clone(), m.message_type.clone(), excerpt(m.body.get())),
        None => (
            "-".to_owned(),
            "-".to_owned(),
            format!(
                "not readable: {}",
                excerpt(decode_error.unwrap_or("no envelope"))
            ),
        ),
    }
}

/// The first characters of a text, on one line.
pub fn excerpt(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(PREVIEW) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

/// A time in ms since the Unix epoch, as RFC 3339 UTC.
pub fn time(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// A duration in ms, to the second (`3m 12s`), or in ms under a second.
pub fn age(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        humantime::format_duration(Duration::from_secs(ms / 1000)).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_short_and_flat() {
        assert_eq!(excerpt("a\nb"), "a b");
        let long = "é".repeat(100);
        assert_eq!(excerpt(&long).chars().count(), PREVIEW + 1);
    }

    #[test]
    fn times_and_ages_read_well() {
        assert_eq!(time(1_712_345_678_901), "2024-04-05T19:34:38.901Z");
        assert_eq!(age(250), "250ms");
        assert_eq!(age(192_500), "3m 12s");
    }
}
