//! The audit log: every operator's state change (requeue, delete, purge, move,
//! unsubscribe, a saga deleted) appended to one capped Redis stream,
//! [`keys::audit`](crate::keys::audit), by the `bus` tool and the dashboard; read back
//! newest first (`bus audit`, the dashboard's Audit page). docs/operations.md, "Audit log".

use fred::prelude::{Client, ClientLike};
use fred::types::{ClusterHash, CustomCommand, Value};
use serde::Serialize;

use super::Admin;
use crate::{keys, Error, Result};

/// Entries kept (about: `XADD MAXLEN ~` trims whole stream nodes, so a few more stay).
pub const AUDIT_KEEP: u64 = 10_000;

/// One operator action, as appended and as read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AuditEntry {
    /// The stream entry's id (`<ms>-<n>`); empty before it is written.
    pub id: String,
    /// When Redis appended it, ms since the Unix epoch (from the id); 0 before.
    pub at_ms: u64,
    /// Who: the operating-system user of the `bus` tool or the dashboard process.
    pub who: String,
    /// Through what: `bus`, or `dashboard` with the browser's address.
    pub via: String,
    /// What: `requeue`, `delete`, `purge`, `unsubscribe`, `delete-saga`, ...
    pub action: String,
    /// On what: the queue (`queue`, `topic/subscription`, `babel:<queue>`) or saga.
    pub target: String,
    /// How many messages (or items) it changed.
    pub count: u64,
    /// Anything else that says what was done (`to orders`, the ids).
    pub detail: String,
}

impl AuditEntry {
    /// An entry to append: who did `action` on `target`, through `via`, changing `count`.
    pub fn new(
        who: impl Into<String>,
        via: impl Into<String>,
        action: impl Into<String>,
        target: impl Into<String>,
        count: u64,
    ) -> Self {
        AuditEntry {
            id: String::new(),
            at_ms: 0,
            who: who.into(),
            via: via.into(),
            action: action.into(),
            target: target.into(),
            count,
            detail: String::new(),
        }
    }

    /// With a detail (cut to 1,000 characters: a log line, not a data dump).
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into().chars().take(1000).collect();
        self
    }
}

/// The operating-system user running this process (`$USER`, else `$USERNAME`), or
/// `unknown`: what the audit log records as who.
pub fn os_user() -> String {
    ["USER", "USERNAME", "LOGNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn command(name: &'static str) -> CustomCommand {
    CustomCommand::new_static(name, ClusterHash::FirstKey, false)
}

impl Admin {
    /// Appends `entry` to the audit stream: one `XADD ... MAXLEN ~ 10000`, so the stream
    /// stays bounded. Returns the entry's id.
    pub async fn audit(&self, entry: &AuditEntry) -> Result<String> {
        let key = keys::audit(self.key_prefix());
        let mut args: Vec<Value> = vec![
            key.into(),
            "MAXLEN".into(),
            "~".into(),
            AUDIT_KEEP.to_string().into(),
            "*".into(),
        ];
        for (field, value) in [
            ("who", entry.who.clone()),
            ("via", entry.via.clone()),
            ("action", entry.action.clone()),
            ("target", entry.target.clone()),
            ("count", entry.count.to_string()),
            ("detail", entry.detail.clone()),
        ] {
            args.push(field.into());
            args.push(value.into());
        }
        let id: Value = self.client().custom(command("XADD"), args).await?;
        id.as_string().ok_or_else(|| Error::Protocol {
            script: "XADD",
            detail: format!("no entry id: {id:?}"),
        })
    }

    /// The newest `count` audit entries, newest first (`XREVRANGE ... COUNT`).
    pub async fn audit_log(&self, count: u64) -> Result<Vec<AuditEntry>> {
        audit_log(self.client(), &keys::audit(self.key_prefix()), count).await
    }
}

async fn audit_log(client: &Client, key: &str, count: u64) -> Result<Vec<AuditEntry>> {
    let args: Vec<Value> = vec![
        key.into(),
        "+".into(),
        "-".into(),
        "COUNT".into(),
        count.max(1).to_string().into(),
    ];
    let reply: Value = client.custom(command("XREVRANGE"), args).await?;
    let Value::Array(items) = reply else {
        return Ok(Vec::new());
    };
    Ok(items.into_iter().filter_map(entry).collect())
}

/// One `[id, [field, value, ...]]` of a stream reply; `None` for another shape.
fn entry(item: Value) -> Option<AuditEntry> {
    let Value::Array(mut parts) = item else {
        return None;
    };
    if parts.len() != 2 {
        return None;
    }
    let fields = parts.pop()?;
    let id = parts.pop()?.as_string()?;
    let at_ms = id.split('-').next()?.parse().ok()?;
    let mut out = AuditEntry::new("", "", "", "", 0);
    out.id = id;
    out.at_ms = at_ms;
    let pairs = match fields {
        Value::Array(values) => values,
        _ => return Some(out),
    };
    for pair in pairs.chunks(2) {
        let [field, value] = pair else { continue };
        let (Some(field), Some(value)) = (field.as_string(), value.as_string()) else {
            continue;
        };
        match field.as_str() {
            "who" => out.who = value,
            "via" => out.via = value,
            "action" => out.action = value,
            "target" => out.target = value,
            "count" => out.count = value.parse().unwrap_or(0),
            "detail" => out.detail = value,
            _ => {}
        }
    }
    Some(out)
}
