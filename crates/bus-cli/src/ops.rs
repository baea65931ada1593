//! `bus doctor` (Redis's configuration checked for what silently loses or stalls
//! messages: [`bus_redis::admin::health`], as the dashboard shows it) and `bus audit`.

use bus_management::{Health, Severity};
use bus_redis::RedisConfig;
use comfy_table::{presets, Cell, ContentArrangement, Table};

use crate::failure::{self, redact, Failure};
use crate::output::{self, out};

/// Runs the checks over a bare connection: no protocol version is recorded or refused
/// (a mismatch is one of the findings), nothing is written. Fails (exit 1) on a critical
/// finding, so a deployment script can stop on it.
pub async fn doctor(
    config: &RedisConfig,
    url: &str,
    with_ca: bool,
    json: bool,
) -> Result<(), Failure> {
    let client = config
        .connect_client()
        .await
        .map_err(|source| Failure::Connect {
            url: redact(url),
            reason: failure::connect_reason(&source.into(), url, with_ca),
        })?;
    let health = bus_redis::admin::health(&client, config.key_prefix()).await;
    let _ = fred::prelude::ClientLike::quit(&client).await; // Best effort.
    if json {
        output::json(&health)?;
    } else {
        print(&health)?;
    }
    let critical = health
        .checks
        .iter()
        .filter(|c| c.severity == Severity::Critical)
        .count();
    if critical > 0 {
        return Err(Failure::Refused(format!(
            "Redis health: {critical} critical finding(s); see \"What to change\""
        )));
    }
    Ok(())
}

fn print(health: &Health) -> Result<(), Failure> {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(120)
        .set_header(["CHECK", "STATUS", "FOUND", "WHAT TO CHANGE"]);
    for check in &health.checks {
        t.add_row(vec![
            Cell::new(check.name),
            Cell::new(check.severity),
            Cell::new(&check.found),
            Cell::new(check.advice.as_deref().unwrap_or("-")),
        ]);
    }
    out!(
        "Redis {} · protocol checked under prefix {}",
        health
            .redis_version
            .as_deref()
            .unwrap_or("(version unknown)"),
        health.prefix
    )?;
    out!("{t}")?;
    let worst = health.worst();
    out!(
        "{}",
        match worst {
            Severity::Ok => "no problem found".to_owned(),
            other => format!("worst finding: {other}"),
        }
    )
}

/// `bus audit`: the audit log, newest first.
pub fn audit_table(entries: &[bus_management::AuditEntry]) -> Result<(), Failure> {
    if entries.is_empty() {
        return out!("no changes recorded yet");
    }
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED).set_header([
        "WHEN", "WHO", "THROUGH", "ACTION", "TARGET", "COUNT", "DETAIL",
    ]);
    for e in entries {
        t.add_row(vec![
            Cell::new(output::time(e.at_ms)),
            Cell::new(&e.who),
            Cell::new(&e.via),
            Cell::new(&e.action),
            Cell::new(&e.target),
            Cell::new(e.count),
            Cell::new(output::shorten(&e.detail, 60)),
        ]);
    }
    out!("{t}")
}

/// `bus hosts`: the hosts from their heartbeats, running ones first.
pub fn hosts_table(hosts: &[bus_management::HostEntry]) -> Result<(), Failure> {
    if hosts.is_empty() {
        return out!("no host has reported (hosts report every 5 s while running)");
    }
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED).set_header([
        "STATE",
        "HOST",
        "PID",
        "VERSION",
        "QUEUES",
        "CONCURRENCY",
        "IN FLIGHT",
        "STARTED",
        "LAST SEEN",
    ]);
    for h in hosts {
        let info = &h.info;
        t.add_row(vec![
            Cell::new(if h.lost { "LOST" } else { "running" }),
            Cell::new(&info.hostname),
            Cell::new(info.pid),
            Cell::new(&info.version),
            Cell::new(output::shorten(&info.queues.join(", "), 60)),
            Cell::new(info.concurrency),
            Cell::new(info.in_flight),
            Cell::new(output::time(info.started_at_ms)),
            Cell::new(format!("{:.1} s ago", h.seen_ago_ms as f64 / 1000.0)),
        ]);
    }
    out!("{t}")
}

/// `bus schedules`: the recurring schedules, by queue then name.
pub fn schedules_table(schedules: &[bus_management::ScheduleEntry]) -> Result<(), Failure> {
    if schedules.is_empty() {
        return out!("no schedule is recorded (a host records its schedules when it starts)");
    }
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED).set_header([
        "NAME",
        "CRON",
        "ZONE",
        "QUEUE",
        "MISSED",
        "LAST TICK",
        "NEXT RUN",
    ]);
    let when = |ms: Option<u64>| ms.map_or_else(|| "-".to_owned(), output::time);
    for s in schedules {
        let r = &s.record;
        t.add_row(vec![
            Cell::new(&r.name),
            Cell::new(&r.cron),
            Cell::new(&r.zone),
            Cell::new(&r.queue),
            Cell::new(r.missed.as_str()),
            Cell::new(when(s.last_tick_ms)),
            Cell::new(when(s.next_run_ms)),
        ]);
    }
    out!("{t}")
}
