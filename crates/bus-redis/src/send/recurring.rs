//! Recurring messages: `send_tick.lua` stores a tick's message only if the tick is newer
//! than the schedule's last, in one step; the schedules hosts run are recorded for
//! operators (docs/redis-layout.md, "Recurring messages (cron)").

use bus_core::transport::{Outgoing, ScheduleRecord, Tick};
use fred::prelude::{HashesInterface, KeysInterface};
use fred::types::Value;

use crate::error::Error;
use crate::scripts;
use crate::transport::RedisTransport;
use async_trait::async_trait;
use bus_core::transport::Ticks;

/// The key of `schedule`'s last tick: in the queue's slot, or on a partitioned queue in
/// the shard the schedule's name picks.
async fn key(transport: &RedisTransport, queue: &str, schedule: &str) -> bus_core::Result<String> {
    bus_core::transport::validate_name("schedule", schedule)?;
    let keys = transport
        .writer()
        .keys_for_send(queue, Some(schedule))
        .await?;
    Ok(keys.schedule(schedule))
}

pub(crate) async fn send_tick(
    transport: &RedisTransport,
    queue: &str,
    tick: Tick<'_>,
    message: Outgoing,
) -> bus_core::Result<bool> {
    bus_core::transport::validate_name("schedule", tick.schedule)?;
    let keys = transport
        .writer()
        .keys_for_send(queue, Some(tick.schedule))
        .await?;
    let script_keys = vec![keys.schedule(tick.schedule), keys.ready];
    let args = vec![
        Value::from(tick.at_ms.to_string()),
        Value::from(if tick.catch_up { "1" } else { "" }),
        Value::Bytes(message.payload),
    ];
    transport
        .writer()
        .write(&scripts::SEND_TICK, script_keys, args)
        .await?
        .changed()
}

pub(crate) async fn last_tick(
    transport: &RedisTransport,
    queue: &str,
    schedule: &str,
) -> bus_core::Result<Option<u64>> {
    let key = key(transport, queue, schedule).await?;
    let last: Option<String> = transport.client().get(key).await.map_err(Error::from)?;
    last.map(|t| {
        t.parse().map_err(|_| {
            bus_core::Error::Transport(
                format!("schedule {schedule}: last tick {t:?} is not a number").into(),
            )
        })
    })
    .transpose()
}

pub(crate) async fn record(
    transport: &RedisTransport,
    schedule: &ScheduleRecord,
) -> bus_core::Result<()> {
    let key = key(transport, &schedule.queue, &schedule.name).await?;
    let mut json = serde_json::to_value(schedule).map_err(|e| {
        bus_core::Error::Transport(format!("schedule {}: {e}", schedule.name).into())
    })?;
    json["key"] = serde_json::Value::from(key.as_str());
    let registry = crate::keys::schedule_registry(transport.prefix());
    let () = transport
        .client()
        .hset(registry, (key, json.to_string()))
        .await
        .map_err(Error::from)?;
    Ok(())
}

#[async_trait]
impl Ticks for RedisTransport {
    async fn send_tick(
        &self,
        queue: &str,
        tick: bus_core::transport::Tick<'_>,
        message: Outgoing,
    ) -> bus_core::Result<bool> {
        send_tick(self, queue, tick, message).await
    }

    async fn last_tick(&self, queue: &str, schedule: &str) -> bus_core::Result<Option<u64>> {
        last_tick(self, queue, schedule).await
    }

    async fn record_schedule(
        &self,
        schedule: &bus_core::transport::ScheduleRecord,
    ) -> bus_core::Result<()> {
        record(self, schedule).await
    }
}
