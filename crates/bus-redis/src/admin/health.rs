//! [`health`]: what in Redis's own configuration silently loses or stalls messages, read
//! with `INFO`, `CONFIG GET`, a trivial script and the protocol key, each finding with
//! what to change. `bus doctor` and the dashboard's health panel show the same checks
//! (docs/operations.md, "Redis health").
//!
//! Read only: nothing is written but the script cache (`SCRIPT LOAD` of a one-line
//! script). On a Redis Cluster the checks read the node the connection reaches.

use std::collections::HashMap;
use std::fmt;

use fred::cmd;
use fred::prelude::{Client, ClientLike, KeysInterface};
use fred::types::Value;
use serde::Serialize;

use super::Admin;
use crate::{keys, Error, PROTOCOL};

/// Used memory over `maxmemory` from which the memory check warns, then is critical.
const MEMORY_WARNING: f64 = 0.80;
const MEMORY_CRITICAL: f64 = 0.95;
/// A replica this many seconds behind (or more) is lagging.
const REPLICA_LAG_SECONDS: u64 = 10;

/// How bad a finding is. Ordered: `Ok < Unknown < Warning < Critical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Severity {
    /// Nothing to change.
    Ok,
    /// Could not be read (a command refused or renamed, as on some managed Redis).
    Unknown,
    /// Messages are at risk in some events (a restart, a failover).
    Warning,
    /// Messages are being lost or stalled, or will be at the next step.
    Critical,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Ok => "ok",
            Severity::Unknown => "unknown",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        })
    }
}

/// One check's finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct HealthCheck {
    /// A stable name: `eviction`, `persistence`, `memory`, `replication`, `scripts`,
    /// `protocol`.
    pub name: &'static str,
    /// How bad it is.
    pub severity: Severity,
    /// What was found (`maxmemory-policy is allkeys-lru`).
    pub found: String,
    /// What to change, when anything should.
    pub advice: Option<String>,
}

impl HealthCheck {
    fn new(name: &'static str, severity: Severity, found: impl Into<String>) -> Self {
        HealthCheck {
            name,
            severity,
            found: found.into(),
            advice: None,
        }
    }

    fn advice(mut self, advice: impl Into<String>) -> Self {
        self.advice = Some(advice.into());
        self
    }

    fn unknown(name: &'static str, what: &str, error: impl fmt::Display) -> Self {
        HealthCheck::new(
            name,
            Severity::Unknown,
            format!("could not read {what}: {error}"),
        )
        .advice(format!(
            "check it by hand, or allow the `bus` user to run {what} (ACL)"
        ))
    }
}

/// Every check's finding, in a fixed order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Health {
    /// Redis's version (`redis_version`), when `INFO` answered.
    pub redis_version: Option<String>,
    /// The key prefix whose protocol version was checked.
    pub prefix: String,
    /// The findings.
    pub checks: Vec<HealthCheck>,
}

impl Health {
    /// The worst severity found (`Ok` when there are no findings).
    pub fn worst(&self) -> Severity {
        self.checks
            .iter()
            .map(|c| c.severity)
            .max()
            .unwrap_or(Severity::Ok)
    }
}

impl Admin {
    /// The health of the Redis this transport uses, for its prefix: [`health`].
    pub async fn health(&self) -> Health {
        health(self.client(), self.key_prefix()).await
    }
}

/// Checks what silently loses or stalls messages in the Redis `client` is connected to,
/// and the protocol version recorded under `prefix`. Never fails: a check that cannot
/// be read is [`Severity::Unknown`] with the reason. Usable on a bare client, so
/// `bus doctor` runs even where [`RedisTransport::connect`](crate::RedisTransport::connect)
/// refuses a protocol mismatch.
pub async fn health(client: &Client, prefix: &str) -> Health {
    let info = info(client).await;
    let config = |name: &'static str| config_get(client, name);
    let (policy, save, scripts, protocol) = tokio::join!(
        config("maxmemory-policy"),
        config("save"),
        scripts(client),
        protocol(client, prefix),
    );
    let redis_version = info
        .as_ref()
        .ok()
        .and_then(|i| i.get("redis_version").cloned());
    let mut checks = vec![eviction(&policy, info.as_ref())];
    match &info {
        Ok(info) => {
            checks.push(persistence(info, &save));
            checks.push(memory(info));
            checks.push(replication(info));
        }
        Err(error) => {
            for name in ["persistence", "memory", "replication"] {
                checks.push(HealthCheck::unknown(name, "INFO", error));
            }
        }
    }
    checks.push(script_check(scripts, redis_version.as_deref()));
    checks.push(protocol);
    Health {
        redis_version,
        prefix: prefix.to_owned(),
        checks,
    }
}

type Info = HashMap<String, String>;

/// `INFO` (the default sections), as `field -> value`.
async fn info(client: &Client) -> Result<Info, Error> {
    let reply: Value = client.custom(cmd!("INFO"), Vec::<Value>::new()).await?;
    let text = reply
        .as_bytes_str()
        .map(|s| s.to_string())
        .ok_or_else(|| Error::Protocol {
            script: "INFO",
            detail: "not a text reply".to_owned(),
        })?;
    Ok(parse_info(&text))
}

fn parse_info(text: &str) -> Info {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// `CONFIG GET name`: its value, or the error (CONFIG is often renamed on managed Redis).
async fn config_get(client: &Client, name: &'static str) -> Result<String, Error> {
    let reply: Value = client
        .custom(cmd!("CONFIG"), vec![Value::from("GET"), Value::from(name)])
        .await?;
    let values: Vec<Value> = match reply {
        Value::Array(values) => values,
        // RESP3 answers with a map.
        Value::Map(map) => map
            .inner()
            .into_iter()
            .flat_map(|(k, v)| [Value::from(k), v])
            .collect(),
        other => {
            return Err(Error::Protocol {
                script: "CONFIG GET",
                detail: format!("not an array: {other:?}"),
            })
        }
    };
    values
        .get(1)
        .and_then(|v| v.as_bytes_str())
        .map(|s| s.to_string())
        .ok_or_else(|| Error::Protocol {
            script: "CONFIG GET",
            detail: format!("no value for {name}"),
        })
}

fn number(info: &Info, field: &str) -> Option<u64> {
    info.get(field)?.parse().ok()
}

fn eviction(policy: &Result<String, Error>, info: Result<&Info, &Error>) -> HealthCheck {
    let policy = match policy {
        Ok(policy) => policy,
        Err(error) => {
            return HealthCheck::unknown("eviction", "CONFIG GET maxmemory-policy", error)
        }
    };
    if policy == "noeviction" {
        return HealthCheck::new("eviction", Severity::Ok, "maxmemory-policy is noeviction");
    }
    let limited = info
        .ok()
        .and_then(|i| number(i, "maxmemory"))
        .is_some_and(|m| m > 0);
    // Without maxmemory nothing is evicted yet; the first limit set starts it.
    let severity = if limited {
        Severity::Critical
    } else {
        Severity::Warning
    };
    HealthCheck::new(
        "eviction",
        severity,
        format!("maxmemory-policy is {policy}: a full Redis deletes keys, messages among them, without a word"),
    )
    .advice(
        "set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in \
         redis.conf): a full Redis then refuses sends with an error and consumers still drain",
    )
}

fn persistence(info: &Info, save: &Result<String, Error>) -> HealthCheck {
    if info
        .get("rdb_last_bgsave_status")
        .is_some_and(|s| s != "ok")
    {
        return HealthCheck::new(
            "persistence",
            Severity::Critical,
            "the last RDB snapshot failed: Redis refuses writes while stop-writes-on-bgsave-error is on",
        )
        .advice("read Redis's log for the cause (disk full, permissions) and fix it");
    }
    if info.get("aof_last_write_status").is_some_and(|s| s != "ok") {
        return HealthCheck::new(
            "persistence",
            Severity::Critical,
            "the last append-only-file write failed",
        )
        .advice("read Redis's log for the cause (disk full, permissions) and fix it");
    }
    let aof = info.get("aof_enabled").is_some_and(|v| v == "1");
    if aof {
        return HealthCheck::new("persistence", Severity::Ok, "append-only file on");
    }
    match save {
        Ok(save) if !save.trim().is_empty() => HealthCheck::new(
            "persistence",
            Severity::Warning,
            format!("RDB snapshots only (save {save}): a crash loses what came since the last snapshot"),
        )
        .advice("turn on the append-only file (appendonly yes, appendfsync everysec) to lose at most a second"),
        Ok(_) => HealthCheck::new(
            "persistence",
            Severity::Warning,
            "no persistence (no append-only file, no RDB snapshots): a restart of Redis loses every message",
        )
        .advice("turn on the append-only file (CONFIG SET appendonly yes, and appendonly yes in redis.conf)"),
        Err(error) => HealthCheck::unknown("persistence", "CONFIG GET save", error),
    }
}

fn memory(info: &Info) -> HealthCheck {
    let (Some(used), Some(max)) = (number(info, "used_memory"), number(info, "maxmemory")) else {
        return HealthCheck::unknown("memory", "INFO memory", "no used_memory or maxmemory");
    };
    let mb = |bytes: u64| format!("{:.1} MB", bytes as f64 / 1_048_576.0);
    if max == 0 {
        return HealthCheck::new(
            "memory",
            Severity::Ok,
            format!("{} used, no maxmemory", mb(used)),
        )
        .advice("set maxmemory (with noeviction) so a full Redis refuses sends instead of being killed by the system");
    }
    let share = used as f64 / max as f64;
    let found = format!(
        "{} used of maxmemory {} ({:.0} %)",
        mb(used),
        mb(max),
        share * 100.0
    );
    let advice = "drain or purge the longest queues and dead letters, or raise maxmemory: \
                  at the limit every send fails";
    if share >= MEMORY_CRITICAL {
        HealthCheck::new("memory", Severity::Critical, found).advice(advice)
    } else if share >= MEMORY_WARNING {
        HealthCheck::new("memory", Severity::Warning, found).advice(advice)
    } else {
        HealthCheck::new("memory", Severity::Ok, found)
    }
}

fn replication(info: &Info) -> HealthCheck {
    if info.get("role").is_some_and(|r| r == "slave") {
        let up = info.get("master_link_status").is_some_and(|s| s == "up");
        let found = format!(
            "connected to a replica (link to its primary {})",
            if up { "up" } else { "down" }
        );
        return HealthCheck::new("replication", Severity::Critical, found).advice(
            "point the URL at the primary, or use redis-sentinel:// so clients follow failovers: \
             a replica refuses every write",
        );
    }
    let replicas = number(info, "connected_slaves").unwrap_or(0);
    let mut lagging = Vec::new();
    for i in 0..replicas {
        let Some(line) = info.get(&format!("slave{i}")) else {
            continue;
        };
        let fields: HashMap<&str, &str> =
            line.split(',').filter_map(|f| f.split_once('=')).collect();
        let state = fields.get("state").copied().unwrap_or("?");
        let lag: u64 = fields.get("lag").and_then(|l| l.parse().ok()).unwrap_or(0);
        if state != "online" || lag >= REPLICA_LAG_SECONDS {
            let at = format!(
                "{}:{}",
                fields.get("ip").copied().unwrap_or("?"),
                fields.get("port").copied().unwrap_or("?")
            );
            lagging.push(format!("{at} ({state}, {lag} s behind)"));
        }
    }
    if !lagging.is_empty() {
        return HealthCheck::new(
            "replication",
            Severity::Warning,
            format!("replicas lagging: {}", lagging.join(", ")),
        )
        .advice(
            "a failover now loses what they miss: check the replicas' network and load, \
             and use durable sends (WAIT) for messages that must survive one",
        );
    }
    let found = match replicas {
        0 => "no replicas".to_owned(),
        n => format!("{n} replicas, all online and current"),
    };
    HealthCheck::new("replication", Severity::Ok, found)
}

/// Whether Redis runs the bus's scripts: `SCRIPT LOAD` then `EVALSHA` of a one-liner
/// (what every script call falls back to after a restart).
async fn scripts(client: &Client) -> Result<(), Error> {
    let sha: Value = client
        .custom(
            cmd!("SCRIPT"),
            vec![Value::from("LOAD"), Value::from("return 'bus-doctor'")],
        )
        .await?;
    let sha = sha
        .as_bytes_str()
        .map(|s| s.to_string())
        .unwrap_or_default();
    let reply: Value = client
        .custom(cmd!("EVALSHA"), vec![Value::from(sha), Value::from(0)])
        .await?;
    match reply.as_bytes_str() {
        Some(text) if &*text == "bus-doctor" => Ok(()),
        _ => Err(Error::Protocol {
            script: "EVALSHA",
            detail: format!("unexpected reply {reply:?}"),
        }),
    }
}

fn script_check(ran: Result<(), Error>, version: Option<&str>) -> HealthCheck {
    if let Err(error) = ran {
        return HealthCheck::new(
            "scripts",
            Severity::Critical,
            format!("Redis refused a script: {error}"),
        )
        .advice(
            "every transition of a message is a Lua script: allow SCRIPT, EVAL and EVALSHA \
             (ACL +@scripting) for the bus's user",
        );
    }
    let major: Option<u32> = version.and_then(|v| v.split('.').next()?.parse().ok());
    match major {
        Some(major) if major < 7 => HealthCheck::new(
            "scripts",
            Severity::Critical,
            format!(
                "Redis {} runs scripts, but not the `#!lua flags=` the consumers' scripts carry",
                version.unwrap_or("?")
            ),
        )
        .advice("upgrade Redis to 7.0 or later"),
        _ => HealthCheck::new("scripts", Severity::Ok, "SCRIPT LOAD and EVALSHA run"),
    }
}

async fn protocol(client: &Client, prefix: &str) -> HealthCheck {
    let key = keys::protocol(prefix);
    let value: Result<Value, _> = client.get(key.as_str()).await;
    let found = match value {
        Ok(value) => value.as_bytes().map(|b| {
            String::from_utf8_lossy(b)
                .chars()
                .take(32)
                .collect::<String>()
        }),
        Err(error) => {
            return HealthCheck::unknown("protocol", "GET of the protocol key", Error::from(error))
        }
    };
    match found {
        None => HealthCheck::new(
            "protocol",
            Severity::Ok,
            format!("no version recorded under {key} yet: the first host or producer records {PROTOCOL}"),
        ),
        Some(found) if found == PROTOCOL.to_string() => HealthCheck::new(
            "protocol",
            Severity::Ok,
            format!("{key} is {found}, the protocol this build speaks"),
        ),
        Some(found) => {
            let mismatch = Error::ProtocolMismatch {
                key: key.clone(),
                found: found.clone(),
                speaks: PROTOCOL,
            };
            HealthCheck::new(
                "protocol",
                Severity::Critical,
                format!("{key} is {found}; this build speaks {PROTOCOL}, and its hosts and producers refuse to start"),
            )
            .advice(mismatch.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(text: &str) -> Info {
        parse_info(text)
    }

    #[test]
    fn memory_near_the_limit_warns_then_is_critical() {
        let at = |used: u64| memory(&info(&format!("used_memory:{used}\r\nmaxmemory:1000\r\n")));
        assert_eq!(at(100).severity, Severity::Ok);
        assert_eq!(at(850).severity, Severity::Warning);
        assert_eq!(at(990).severity, Severity::Critical);
        assert!(at(990).advice.is_some());
        assert_eq!(
            memory(&info("used_memory:5\nmaxmemory:0\n")).severity,
            Severity::Ok
        );
    }

    #[test]
    fn lagging_or_offline_replicas_warn_and_a_replica_is_critical() {
        let primary = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
            slave0:ip=10.0.0.2,port=6380,state=online,offset=10,lag=0\r\n\
            slave1:ip=10.0.0.3,port=6380,state=online,offset=5,lag=42\r\n";
        let check = replication(&info(primary));
        assert_eq!(check.severity, Severity::Warning);
        assert!(check.found.contains("10.0.0.3:6380"), "{}", check.found);
        assert!(!check.found.contains("10.0.0.2"), "{}", check.found);
        let fine = replication(&info("role:master\nconnected_slaves:0\n"));
        assert_eq!(fine.severity, Severity::Ok);
        let replica = replication(&info("role:slave\nmaster_link_status:up\n"));
        assert_eq!(replica.severity, Severity::Critical);
    }

    #[test]
    fn persistence_off_warns_and_a_failed_save_is_critical() {
        let off = persistence(
            &info("aof_enabled:0\nrdb_last_bgsave_status:ok\n"),
            &Ok(String::new()),
        );
        assert_eq!(off.severity, Severity::Warning);
        assert!(off.found.contains("no persistence"), "{}", off.found);
        let aof = persistence(&info("aof_enabled:1\n"), &Ok(String::new()));
        assert_eq!(aof.severity, Severity::Ok);
        let failed = persistence(
            &info("aof_enabled:1\nrdb_last_bgsave_status:err\n"),
            &Ok("3600 1".into()),
        );
        assert_eq!(failed.severity, Severity::Critical);
    }

    #[test]
    fn an_old_redis_cannot_run_flagged_scripts() {
        assert_eq!(
            script_check(Ok(()), Some("6.2.14")).severity,
            Severity::Critical
        );
        assert_eq!(script_check(Ok(()), Some("7.0.15")).severity, Severity::Ok);
    }
}
