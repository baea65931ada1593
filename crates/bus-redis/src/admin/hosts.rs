//! [`Admin::hosts`]: the hosts' heartbeats read back, each marked lost when it missed two
//! reports (`bus hosts`, the dashboard's Hosts page; docs/redis-layout.md, "Host heartbeats").

use std::collections::HashMap;

use bus_core::heartbeat::HostInfo;
use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use serde::Serialize;

use super::Admin;
use crate::{keys, Result};

/// A host as operators see it: what it last reported, when, and whether it is lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct HostEntry {
    /// Its last report.
    #[serde(flatten)]
    pub info: HostInfo,
    /// When Redis received it, ms since the Unix epoch (Redis's clock).
    pub last_seen_ms: u64,
    /// How long ago that was, ms (against Redis's clock).
    pub seen_ago_ms: u64,
    /// No report for more than two of its intervals: crashed, hung or cut off.
    pub lost: bool,
}

impl HostEntry {
    /// `info` last seen at `last_seen_ms`, judged at `now_ms`.
    pub fn new(info: HostInfo, last_seen_ms: u64, now_ms: u64) -> Self {
        let seen_ago_ms = now_ms.saturating_sub(last_seen_ms);
        let lost = seen_ago_ms > info.interval_ms.saturating_mul(2);
        HostEntry {
            info,
            last_seen_ms,
            seen_ago_ms,
            lost,
        }
    }
}

fn command(name: &'static str) -> CustomCommand {
    CustomCommand::new_static(name, ClusterHash::FirstKey, false)
}

impl Admin {
    /// Every host that reported within the keep time, running ones first, then by host
    /// name and id. A record that is not a host's JSON is skipped (another writer's).
    pub async fn hosts(&self) -> Result<Vec<HostEntry>> {
        let prefix = self.key_prefix();
        let seen: Value = self
            .client()
            .custom(
                command("ZRANGE"),
                vec![
                    Value::from(keys::hosts_seen(prefix)),
                    "0".into(),
                    "-1".into(),
                    "WITHSCORES".into(),
                ],
            )
            .await?;
        let records: Value = self
            .client()
            .custom(
                command("HGETALL"),
                vec![Value::from(keys::hosts_info(prefix))],
            )
            .await?;
        let now = self.redis_now_ms().await?;
        let last_seen: HashMap<String, u64> = pairs(seen)
            .into_iter()
            .filter_map(|(id, score)| Some((id, score.parse::<f64>().ok()? as u64)))
            .collect();
        let mut hosts: Vec<HostEntry> = pairs(records)
            .into_iter()
            .filter_map(|(id, json)| {
                let info: HostInfo = serde_json::from_str(&json).ok()?;
                let seen = *last_seen.get(&id)?;
                Some(HostEntry::new(info, seen, now))
            })
            .collect();
        hosts.sort_by(|a, b| {
            (a.lost, &a.info.hostname, &a.info.id).cmp(&(b.lost, &b.info.hostname, &b.info.id))
        });
        Ok(hosts)
    }
}

/// A flat `[k, v, k, v, ...]` reply (or a RESP3 map) as string pairs.
fn pairs(reply: Value) -> Vec<(String, String)> {
    match reply {
        Value::Array(values) => values
            .chunks(2)
            .filter_map(|pair| match pair {
                [k, v] => Some((k.as_string()?, v.as_string()?)),
                _ => None,
            })
            .collect(),
        Value::Map(map) => map
            .inner()
            .into_iter()
            .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_string()?)))
            .collect(),
        _ => Vec::new(),
    }
}
