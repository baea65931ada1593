//! [`Admin::schedules`]: the recurring schedules hosts recorded, each with its last tick
//! and next run (`bus schedules`, the dashboard's Schedules page; docs/redis-layout.md,
//! "Recurring messages (cron)").

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bus_core::transport::ScheduleRecord;
use fred::prelude::{HashesInterface, KeysInterface};
use serde::{Deserialize, Serialize};

use super::Admin;
use crate::{keys, Result};

/// A schedule as operators see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ScheduleEntry {
    /// What its hosts recorded: name, cron, zone, queue, policy for missed ticks.
    #[serde(flatten)]
    pub record: ScheduleRecord,
    /// The last tick stored, ms since the Unix epoch; `None` before the first.
    pub last_tick_ms: Option<u64>,
    /// The next tick after now (Redis's clock), ms since the Unix epoch; `None` when the
    /// expression fires no more.
    pub next_run_ms: Option<u64>,
    /// The key of its last tick, which is also its field in the registry hash: what an
    /// operator `HDEL`s to forget a schedule no host declares any more.
    pub key: String,
}

/// A registry record: the host's record and the key of its last tick.
#[derive(Deserialize)]
struct Recorded {
    #[serde(flatten)]
    record: ScheduleRecord,
    key: String,
}

impl Admin {
    /// Every recorded schedule, by queue then name. A record that does not read as one is
    /// skipped (another writer's).
    pub async fn schedules(&self) -> Result<Vec<ScheduleEntry>> {
        let registry = keys::schedule_registry(self.key_prefix());
        let records: Vec<String> = self.client().hvals(registry).await?;
        let now = self.redis_now_ms().await?;
        let now_time = UNIX_EPOCH + Duration::from_millis(now);
        let mut entries = Vec::with_capacity(records.len());
        for json in records {
            let Ok(recorded) = serde_json::from_str::<Recorded>(&json) else {
                continue;
            };
            let last: Option<String> = self.client().get(recorded.key.as_str()).await?;
            let next_run_ms = recorded.record.next_after(now_time).map(ms);
            entries.push(ScheduleEntry {
                record: recorded.record,
                last_tick_ms: last.and_then(|t| t.parse().ok()),
                next_run_ms,
                key: recorded.key,
            });
        }
        entries.sort_by(|a, b| {
            (&a.record.queue, &a.record.name).cmp(&(&b.record.queue, &b.record.name))
        });
        Ok(entries)
    }
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
