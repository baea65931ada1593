//! `bus stats --watch`: every queue's counts and rates, sampled every interval and redrawn
//! in place on a terminal (plain ANSI: cursor home, each line cleared; no terminal UI
//! crate needed for one table). Elsewhere (a pipe, a file) each sample is printed after
//! the last, and with --json each is one line of JSON.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use bus_dashboard::QueueSnapshot;
use bus_management::Fleet;
use serde::Serialize;
use tokio::time::MissedTickBehavior;

use crate::failure::Failure;
use crate::output;

/// One queue's line of a sample.
#[derive(Debug, Serialize)]
pub struct Row {
    pub queue: String,
    pub ready: u64,
    /// Messages waiting for their key (per-key ordering).
    pub keyed: u64,
    pub in_flight: u64,
    pub expired_locks: u64,
    pub delayed: u64,
    pub dead: u64,
    pub oldest_ready_age_ms: Option<u64>,
    /// Messages finished (acknowledged, or moved away) per second since the last sample;
    /// `None` on the first.
    pub processed_per_s: Option<f64>,
    /// Change of the dead-letter count per second since the last sample (negative when
    /// dead letters were requeued or deleted); `None` on the first.
    pub dead_per_s: Option<f64>,
    /// Redis's clock when read, in ms since the Unix epoch.
    pub at_ms: u64,
}

impl Row {
    fn new(now: &QueueSnapshot, before: Option<&QueueSnapshot>) -> Self {
        let seconds = before
            .filter(|b| now.at_ms > b.at_ms)
            .map(|b| (b, (now.at_ms - b.at_ms) as f64 / 1000.0));
        Row {
            queue: now.name.clone(),
            ready: now.ready,
            keyed: now.keyed,
            in_flight: now.in_flight,
            expired_locks: now.expired_locks,
            delayed: now.delayed,
            dead: now.dead,
            oldest_ready_age_ms: now.oldest_ready_age_ms,
            processed_per_s: seconds
                .map(|(b, s)| (now.finished_estimate() - b.finished_estimate()).max(0) as f64 / s),
            dead_per_s: seconds.map(|(b, s)| (now.dead as f64 - b.dead as f64) / s),
            at_ms: now.at_ms,
        }
    }
}

/// Samples until Ctrl-C. `only` keeps one queue (already checked to exist). A failed
/// read is reported and the next sample tried: a live view outlasts a Redis restart.
pub async fn watch(
    fleet: &Fleet,
    only: Option<&str>,
    interval: Duration,
    json: bool,
) -> Result<(), Failure> {
    let terminal = std::io::stdout().is_terminal();
    let mut before: HashMap<String, QueueSnapshot> = HashMap::new();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let stop = crate::serve::shutdown();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return Ok(()),
            _ = ticker.tick() => {}
        }
        let mut snapshots = match QueueSnapshot::read_fleet(fleet).await {
            Ok(snapshots) => snapshots,
            Err(e) => {
                eprintln!("bus: cannot read the queues (trying again): {e}");
                continue;
            }
        };
        if let Some(name) = only {
            snapshots.retain(|s| s.name == name);
        }
        let rows: Vec<Row> = snapshots
            .iter()
            .map(|s| Row::new(s, before.get(&s.name)))
            .collect();
        draw(&rows, interval, json, terminal).map_err(Failure::Stdout)?;
        before = snapshots.into_iter().map(|s| (s.name.clone(), s)).collect();
    }
}

/// Prints one sample.
fn draw(rows: &[Row], interval: Duration, json: bool, terminal: bool) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(rows)?)?;
    } else {
        let frame = output::watch_frame(rows, interval);
        if terminal {
            // Home, then every line cleared to its end, then the rest of the screen: no
            // flicker, and a shorter frame leaves nothing behind.
            let frame = frame.replace('\n', "\x1b[K\n");
            write!(out, "\x1b[H{frame}\x1b[J")?;
        } else {
            writeln!(out, "{frame}")?;
        }
    }
    out.flush()
}
