//! [`Admin::timing`]: the hosts' per-type timing read back, one [`MinuteTiming`] per
//! minute (the dashboard's Timing page, `bus metrics`; docs/redis-layout.md, "Per-type
//! timing").

use std::collections::BTreeMap;

use bus_core::timing::TypeTiming;
use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use serde::Serialize;

use super::Admin;
use crate::{keys, Result};

/// Most minutes one read covers: 72 hours, the default retention.
pub const MAX_TIMING_MINUTES: u64 = 72 * 60;

/// One minute's timing of every type that ran in it, all hosts' added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct MinuteTiming {
    /// Minutes since the Unix epoch.
    pub minute: u64,
    /// By message type.
    pub types: BTreeMap<String, TypeTiming>,
}

impl MinuteTiming {
    /// The timing of `minute` (for tools and tests; [`Admin::timing`] reads them).
    pub fn new(minute: u64, types: BTreeMap<String, TypeTiming>) -> Self {
        MinuteTiming { minute, types }
    }
}

impl Admin {
    /// The per-type timing of the minutes `from..=to` (minutes since the Unix epoch; at
    /// most the last [`MAX_TIMING_MINUTES`] of them), oldest first; a minute in which no
    /// host recorded anything is left out. One `HGETALL` per minute, sent together. A
    /// field that is not a timing record (another writer's) is skipped.
    pub async fn timing(&self, from: u64, to: u64) -> Result<Vec<MinuteTiming>> {
        let from = from.max(to.saturating_sub(MAX_TIMING_MINUTES - 1));
        let prefix = self.key_prefix();
        let reads = (from..=to).map(|minute| {
            let key = keys::timing_minute(prefix, minute);
            async move {
                let command = CustomCommand::new_static("HGETALL", ClusterHash::FirstKey, false);
                let reply: Value = self
                    .client()
                    .custom(command, vec![Value::from(key)])
                    .await?;
                Ok::<_, crate::Error>(MinuteTiming {
                    minute,
                    types: records(reply),
                })
            }
        });
        let minutes = futures::future::try_join_all(reads).await?;
        Ok(minutes
            .into_iter()
            .filter(|m| !m.types.is_empty())
            .collect())
    }

    /// The minute Redis's clock is in (minutes since the Unix epoch).
    pub async fn redis_minute(&self) -> Result<u64> {
        Ok(self.redis_now_ms().await? / 60_000)
    }
}

/// The records of a minute's `HGETALL` reply (flat array, or a RESP3 map).
fn records(reply: Value) -> BTreeMap<String, TypeTiming> {
    let pair = |k: &Value, v: &Value| {
        Some((
            k.as_string()?,
            crate::report::timing::decode(v.as_bytes()?)?,
        ))
    };
    match reply {
        Value::Array(values) => values
            .chunks(2)
            .filter_map(|kv| match kv {
                [k, v] => pair(k, v),
                _ => None,
            })
            .collect(),
        Value::Map(map) => map
            .inner()
            .into_iter()
            .filter_map(|(k, v)| {
                let record = crate::report::timing::decode(v.as_bytes()?)?;
                Some((k.as_str()?.to_string(), record))
            })
            .collect(),
        _ => BTreeMap::new(),
    }
}
