//! How results print: readable tables (comfy-table), or JSON with `--json`.

use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};

use bus_attachments::{byte_size, AttachmentRef};
use bus_core::transport::now_ms;
use bus_management::{
    DeadLetter, MessageSummary, QueueStats, ReadyMessage, SagaEntry, SagaState, ScheduledMessage,
    Topic,
};
use comfy_table::{presets, Cell, CellAlignment, ColumnConstraint, ContentArrangement, Table};
use serde::Serialize;

use crate::failure::Failure;

/// `println!` for every command's output, except that a failed write is returned, not a
/// panic: a closed stdout (`bus dead Q | head`) becomes [`Failure::Stdout`], which
/// [`crate::failure::fail`] ends quietly.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_line(format_args!($($arg)*))
    };
}
pub(crate) use out;

/// One line on stdout (see [`out!`]).
pub fn write_line(args: std::fmt::Arguments<'_>) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_fmt(args)
        .and_then(|()| stdout.write_all(b"\n"))
        .map_err(Failure::Stdout)
}

/// Longest body (and error) excerpt in a table cell, in characters.
const PREVIEW: usize = 60;

/// Prints a value as pretty JSON.
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<(), Failure> {
    out!("{}", serde_json::to_string_pretty(value)?)
}

/// Prints a table, or `empty` when it has no rows.
fn print(table: Table, empty: &str) -> Result<(), Failure> {
    if table.row_count() == 0 {
        out!("{empty}")
    } else {
        out!("{table}")
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

pub fn queues(queues: &[String]) -> Result<(), Failure> {
    let mut t = table(&["QUEUE"]);
    for queue in queues {
        t.add_row(vec![queue]);
    }
    print(t, "no queues")?;
    Ok(())
}

pub fn topics(topics: &[Topic]) -> Result<(), Failure> {
    let mut t = table(&["TOPIC", "SUBSCRIPTIONS"]);
    for topic in topics {
        t.add_row(vec![topic.topic.clone(), topic.subscriptions.join("\n")]);
    }
    print(t, "no topics")?;
    Ok(())
}

/// One queue's counts, and its shards' when it is partitioned (in JSON, a `shards` array
/// beside the counts, absent for a queue that is not).
#[derive(Debug, serde::Serialize)]
pub struct StatsRow {
    #[serde(flatten)]
    pub total: QueueStats,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<QueueStats>,
}

pub fn stats(rows: &[StatsRow]) -> Result<(), Failure> {
    let mut t = table(&[
        "QUEUE",
        "READY",
        "KEYED",
        "IN FLIGHT",
        "LOCK EXPIRED",
        "DELAYED",
        "DEAD",
        "NEXT SENT",
        "PAUSED",
    ]);
    let indented = |shard: &QueueStats| (format!("  {}", shard.queue), shard.clone());
    let lines = rows.iter().flat_map(|row| {
        std::iter::once((row.total.queue.clone(), row.total.clone()))
            .chain(row.shards.iter().map(indented))
    });
    for (name, s) in lines {
        t.add_row(vec![
            Cell::new(name),
            number(s.ready),
            number(s.keyed),
            number(s.in_flight),
            number(s.expired_locks),
            number(s.delayed),
            number(s.dead_letters),
            Cell::new(
                s.oldest_age_ms
                    .map_or_else(|| "-".to_owned(), |ms| format!("{} ago", age(ms))),
            ),
            Cell::new(flow_state(&s)),
        ]);
    }
    print(t, "no queues")?;
    out!("{STATS_NOTE}")?;
    Ok(())
}

/// One sample of `stats --watch`: a title line and the table.
pub fn watch_frame(rows: &[crate::watch::Row], interval: Duration) -> String {
    let mut t = table(&[
        "QUEUE",
        "READY",
        "KEYED",
        "IN FLIGHT",
        "LOCK EXPIRED",
        "DELAYED",
        "DEAD",
        "OLDEST READY",
        "PROCESSED/S",
        "DEAD/S",
    ]);
    let rate = |r: Option<f64>| {
        Cell::new(r.map_or_else(|| "-".to_owned(), |r| format!("{r:.1}")))
            .set_alignment(CellAlignment::Right)
    };
    for r in rows {
        t.add_row(vec![
            Cell::new(&r.queue),
            number(r.ready),
            number(r.keyed),
            number(r.in_flight),
            number(r.expired_locks),
            number(r.delayed),
            number(r.dead),
            Cell::new(r.oldest_ready_age_ms.map_or_else(|| "-".to_owned(), age)),
            rate(r.processed_per_s),
            rate(r.dead_per_s),
        ]);
    }
    let at = rows
        .first()
        .map_or_else(|| "-".to_owned(), |r| time(r.at_ms));
    let body = if t.row_count() == 0 {
        "no queues or subscriptions".to_owned()
    } else {
        t.to_string()
    };
    format!(
        "bus stats at {at}, every {} (Ctrl-C to stop)\n{body}",
        humantime::format_duration(interval)
    )
}

/// What the less obvious columns of `stats` mean.
pub const STATS_NOTE: &str = "\
KEYED: messages of an ordered queue waiting for their key (per-key ordering), not ready.
IN FLIGHT: every reserved message; LOCK EXPIRED: those among them whose lock is past
(their consumer died; a running consumer of the queue recovers them).
NEXT SENT: when the next ready message was first sent (a retried, recovered or requeued
message keeps its first send time).";

pub fn peek(queue: &str, messages: &[ReadyMessage]) -> Result<(), Failure> {
    let mut t = table(&[
        "#",
        "MESSAGE ID",
        "TYPE",
        "SENT",
        "DELIVERIES",
        "ATTACHMENT",
        "HEADERS",
        "BODY",
    ]);
    for m in messages {
        let (id, message_type, body) = summary(m.message.as_ref(), m.decode_error.as_deref());
        let attached = attachment(m.message.as_ref(), AttachmentRef::describe);
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
            Cell::new(attached),
            Cell::new(headers),
            Cell::new(body),
        ]);
    }
    print(t, &format!("{queue}: nothing ready"))?;
    Ok(())
}

pub fn scheduled(queue: &str, messages: &[ScheduledMessage]) -> Result<(), Failure> {
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
    print(t, &format!("{queue}: nothing scheduled"))?;
    Ok(())
}

/// Widest the default `dead` table gets, in columns.
pub const NARROW: u16 = 100;

/// Longest error or body excerpt in the default `dead` table, in characters.
const NARROW_TEXT: usize = 32;

/// Dead letters in at most [`NARROW`] columns: the last error only, texts shortened, no
/// message id (`--wide` and `--json` have everything).
pub fn dead_letters(queue: &str, letters: &[DeadLetter]) -> Result<(), Failure> {
    // The attachment's size only when one has an attachment: the width is the errors'.
    let attached: Vec<Option<String>> = letters
        .iter()
        .map(|d| {
            let shown = attachment(d.message.as_ref(), |a| byte_size(a.length));
            (shown != "-").then_some(shown)
        })
        .collect();
    let any_attached = attached.iter().any(Option::is_some);
    let mut header = vec![
        "STORAGE ID",
        "REASON",
        "DEAD FOR",
        "DELIV.",
        "LAST ERROR",
        "TYPE",
    ];
    if any_attached {
        header.push("ATTACHED");
    }
    header.push("BODY");
    let mut t = table(&header);
    t.set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(NARROW);
    // Ids are copied into other commands: never wrapped. Short columns stay whole too, so
    // the wrapping falls on the texts.
    for column in 0..4 {
        if let Some(column) = t.column_mut(column) {
            column.set_constraint(ColumnConstraint::ContentWidth);
        }
    }
    let now = now_ms();
    for (d, attached) in letters.iter().zip(attached) {
        let (_, message_type, body) = summary(d.message.as_ref(), d.decode_error.as_deref());
        let mut error = d
            .errors
            .last()
            .map_or_else(|| "-".to_owned(), |e| shorten(&e.message, NARROW_TEXT));
        if d.errors.len() > 1 {
            error.push_str(&format!(" (+{} earlier)", d.errors.len() - 1));
        }
        let mut row = vec![
            Cell::new(&d.storage_id),
            Cell::new(shorten(d.reason.as_deref().unwrap_or("-"), 16)),
            Cell::new(
                d.dead_lettered_at_ms
                    .map_or_else(|| "-".to_owned(), |at| short_age(now.saturating_sub(at))),
            ),
            number(d.delivery_count),
            Cell::new(error),
            Cell::new(shorten(&message_type, 16)),
        ];
        if any_attached {
            row.push(Cell::new(attached.unwrap_or_else(|| "-".to_owned())));
        }
        row.push(Cell::new(shorten(&body, NARROW_TEXT)));
        t.add_row(row);
    }
    if t.row_count() == 0 {
        out!("{queue}: no dead letters")?;
    } else {
        out!("{t}\n(--wide for every column and the full texts, --json for everything)")?;
    }
    Ok(())
}

/// Dead letters with every column, every error kept and the full texts.
pub fn dead_letters_wide(queue: &str, letters: &[DeadLetter]) -> Result<(), Failure> {
    let mut t = table(&[
        "STORAGE ID",
        "REASON",
        "DEAD SINCE",
        "DELIVERIES",
        "ERRORS",
        "MESSAGE ID",
        "TYPE",
        "ATTACHMENT",
        "HEADERS",
        "BODY",
    ]);
    for d in letters {
        let attached = attachment(d.message.as_ref(), AttachmentRef::describe);
        let (id, message_type, headers, body) = match &d.message {
            Some(m) => (
                m.id.clone(),
                m.message_type.clone(),
                m.headers
                    .iter()
                    .map(|(k, v)| flat(&format!("{k}={v}")))
                    .collect::<Vec<_>>()
                    .join("\n"),
                flat(m.body.get()),
            ),
            None => (
                "-".to_owned(),
                "-".to_owned(),
                String::new(),
                format!(
                    "not readable: {}",
                    flat(d.decode_error.as_deref().unwrap_or("no envelope"))
                ),
            ),
        };
        let errors: Vec<String> = d
            .errors
            .iter()
            .map(|e| format!("{}: {}", time(e.at_ms), flat(&e.message)))
            .collect();
        t.add_row(vec![
            Cell::new(&d.storage_id),
            Cell::new(flat(d.reason.as_deref().unwrap_or("-"))),
            Cell::new(d.dead_lettered_at_ms.map_or_else(|| "-".to_owned(), time)),
            number(d.delivery_count),
            Cell::new(if errors.is_empty() {
                "-".to_owned()
            } else {
                errors.join("\n")
            }),
            Cell::new(id),
            Cell::new(message_type),
            Cell::new(attached),
            Cell::new(headers),
            Cell::new(body),
        ]);
    }
    print(t, &format!("{queue}: no dead letters"))?;
    Ok(())
}

pub fn saga(saga: &SagaState) -> Result<(), Failure> {
    let mut t = table(&["FIELD", "VALUE"]);
    for (field, value) in [
        ("partition", saga.partition.clone()),
        ("id", saga.id.clone()),
        ("key", saga.key.clone()),
        ("stamp", saga.stamp.clone()),
        (
            "expires in",
            saga.ttl_ms.map_or_else(|| "never".to_owned(), age),
        ),
        ("state", saga.data.clone()),
    ] {
        t.add_row(vec![field.to_owned(), value]);
    }
    out!("{t}")?;
    Ok(())
}

pub fn sagas(sagas: &[SagaEntry]) -> Result<(), Failure> {
    let mut t = table(&["PARTITION", "ID", "EXPIRES IN", "KEY"]);
    for s in sagas {
        t.add_row(vec![
            Cell::new(&s.partition),
            Cell::new(&s.id),
            Cell::new(s.ttl_ms.map_or_else(|| "never".to_owned(), age)),
            Cell::new(&s.key),
        ]);
    }
    print(t, "no sagas")?;
    Ok(())
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

/// The message's attachment (the `bus-attachment` header bus-attachments writes), shown
/// with `show`; `-` without one.
fn attachment(message: Option<&MessageSummary>, show: impl Fn(&AttachmentRef) -> String) -> String {
    match message.map(|m| AttachmentRef::from_headers(&m.headers)) {
        Some(Ok(Some(attachment))) => show(&attachment),
        Some(Err(_)) => "unreadable header".to_owned(),
        _ => "-".to_owned(),
    }
}

/// The first characters of a text, on one line.
pub fn excerpt(text: &str) -> String {
    shorten(text, PREVIEW)
}

/// The first `max` characters of a text, on one line, with `…` if it was longer.
pub fn shorten(text: &str, max: usize) -> String {
    let flat = flat(text);
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

/// A text on one line: control characters (newlines, tabs) become spaces.
pub fn flat(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The PAUSED column: `paused`, and a fleet circuit breaker's end if one is set.
fn flow_state(s: &QueueStats) -> String {
    let breaker = s
        .breaker_until_ms
        .map(|until| format!("breaker open until {}", time(until)));
    match (s.paused, breaker) {
        (true, Some(breaker)) => format!("paused, {breaker}"),
        (true, None) => "paused".to_owned(),
        (false, Some(breaker)) => breaker,
        (false, None) => "-".to_owned(),
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
        // The two largest units are enough to read ("2days 3h", not "2days 3h 4m 5s").
        let full = humantime::format_duration(Duration::from_secs(ms / 1000)).to_string();
        full.split(' ').take(2).collect::<Vec<_>>().join(" ")
    }
}

/// A duration in ms in at most 9 characters: `45s`, `3m 12s`, `5h 2m`, `12d 3h`.
pub fn short_age(ms: u64) -> String {
    let secs = ms / 1000;
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
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
    fn the_paused_column_shows_a_fleet_breaker() {
        let mut s = QueueStats::new(&bus_core::transport::Source::queue("q").unwrap());
        assert_eq!(flow_state(&s), "-");
        s.breaker_until_ms = Some(1_712_345_678_901);
        assert_eq!(
            flow_state(&s),
            "breaker open until 2024-04-05T19:34:38.901Z"
        );
        s.paused = true;
        assert_eq!(
            flow_state(&s),
            "paused, breaker open until 2024-04-05T19:34:38.901Z"
        );
    }

    #[test]
    fn times_and_ages_read_well() {
        assert_eq!(time(1_712_345_678_901), "2024-04-05T19:34:38.901Z");
        assert_eq!(age(250), "250ms");
        assert_eq!(age(192_500), "3m 12s");
        assert_eq!(short_age(192_500), "3m 12s");
        assert_eq!(short_age(999), "0s");
        assert_eq!(short_age(((400 * 24 + 3) * 60 + 4) * 60_000), "400d 3h");
        assert_eq!(age(((2 * 24 + 3) * 60 + 4) * 60_000 + 5_000), "2days 3h");
    }
}
