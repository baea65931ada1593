//! Per-key ordering as an operator sees it: the keys of an ordered queue with the most
//! messages waiting for them ("per-key backlogs").

use bus_core::transport::Source;
use fred::types::Value;
use serde::Serialize;

use super::Admin;
use crate::scripts;
use crate::Result;

/// How many keys [`Admin::key_backlogs`] looks at per shard, at most about twice this:
/// the keys next to start and one page of those with messages in flight.
pub const KEYS_LOOKED_AT: u64 = 1000;

/// One key of an ordered queue and what waits for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct KeyBacklog {
    /// The ordering key.
    pub key: String,
    /// Its messages waiting to start (in its list).
    pub waiting: u64,
    /// Its messages in flight, each holding a slot (a blocking dead letter holds one too).
    pub in_flight: u64,
}

/// The keys with the most waiting messages, most first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct KeyBacklogs {
    /// At most the `n` asked for.
    pub keys: Vec<KeyBacklog>,
    /// Whether every key was looked at; `false`: more than [`KEYS_LOOKED_AT`] keys (per
    /// shard) wait or run, and a bigger backlog may be among those not looked at.
    pub complete: bool,
}

impl Admin {
    /// The `n` keys of an ordered queue with the most messages waiting for them, with
    /// their messages in flight (`lua/admin_key_backlogs.lua`, read only, one script per
    /// shard). Bounded: about 4 × [`KEYS_LOOKED_AT`] keys looked at per shard. Empty for a
    /// queue that is not ordered.
    pub async fn key_backlogs(&self, source: &Source, n: u64) -> Result<KeyBacklogs> {
        let script = &scripts::ADMIN_KEY_BACKLOGS;
        let mut all = KeyBacklogs {
            keys: Vec::new(),
            complete: true,
        };
        for shard in self.shards(source).await? {
            let keys = shard.keys;
            let reply = script
                .run_array(
                    self.client(),
                    vec![keys.kheads, keys.kbusy, keys.kq, keys.kwait, keys.kready],
                    vec![Value::from(KEYS_LOOKED_AT as i64), Value::from(n as i64)],
                )
                .await?;
            let Some((complete, rows)) = reply.split_first() else {
                return Err(script.unexpected(&Value::Array(reply)));
            };
            all.complete &= script.int(complete)? == 1;
            for row in rows.chunks(3) {
                let [key, waiting, in_flight] = row else {
                    return Err(script.unexpected(&Value::Array(reply.clone())));
                };
                let key = key.as_string().ok_or_else(|| script.unexpected(key))?;
                all.keys.push(KeyBacklog {
                    key,
                    waiting: script.int(waiting)?.max(0) as u64,
                    in_flight: script.int(in_flight)?.max(0) as u64,
                });
            }
        }
        // (A key lives in one shard: merging is sorting.)
        all.keys.sort_by(|a, b| {
            (b.waiting, b.in_flight, &a.key).cmp(&(a.waiting, a.in_flight, &b.key))
        });
        all.keys.truncate(usize::try_from(n).unwrap_or(usize::MAX));
        Ok(all)
    }
}
