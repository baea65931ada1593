//! [`RedisReporter`]: a host's heartbeat written to Redis, the transport's
//! [`HostReporter`] (docs/redis-layout.md, "Host heartbeats"). Read back by
//! [`Admin::hosts`](crate::admin::Admin::hosts).

use async_trait::async_trait;
use bus_core::heartbeat::{HostInfo, HostReporter};

use crate::{keys, scripts, Error, RedisTransport};

/// A record stays this many intervals after its host's last beat (5 min at the default
/// 5 s), so a lost host is listed a while before it goes.
pub const HOST_KEEP_INTERVALS: u64 = 60;

/// Writes heartbeats with `host_beat.lua`, removes a stopped host with `host_leave.lua`.
#[derive(Debug, Clone)]
pub struct RedisReporter {
    transport: RedisTransport,
}

impl RedisReporter {
    /// A reporter on the transport's connection and key prefix.
    pub fn new(transport: RedisTransport) -> Self {
        RedisReporter { transport }
    }

    fn keys(&self) -> Vec<String> {
        let prefix = self.transport.config().key_prefix();
        vec![keys::hosts_info(prefix), keys::hosts_seen(prefix)]
    }
}

#[async_trait]
impl HostReporter for RedisReporter {
    async fn report(&self, info: &HostInfo) -> bus_core::Result<()> {
        let json = serde_json::to_string(info).map_err(|e| Error::Protocol {
            script: "host_beat",
            detail: format!("host record not encodable: {e}"),
        })?;
        let keep = info.interval_ms.max(1).saturating_mul(HOST_KEEP_INTERVALS);
        let args: Vec<fred::types::Value> = vec![
            info.id.as_str().into(),
            json.into(),
            keep.to_string().into(),
        ];
        scripts::HOST_BEAT
            .run_int(self.transport.client(), self.keys(), args)
            .await?;
        Ok(())
    }

    async fn leave(&self, id: &str) -> bus_core::Result<()> {
        scripts::HOST_LEAVE
            .run_int(self.transport.client(), self.keys(), vec![id.into()])
            .await?;
        Ok(())
    }
}
