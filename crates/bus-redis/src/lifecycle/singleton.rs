//! Singleton processors' leases: one string per queue holding its holder's token,
//! taken and renewed with a ttl and given up only by its holder, each step one script
//! (`singleton_*.lua`; docs/redis-layout.md, "Singleton leases").

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::SingletonLease;
use fred::prelude::Client;
use fred::types::Value;

use crate::scripts::{self, LuaScript};

#[derive(Debug)]
pub(crate) struct RedisLease {
    client: Client,
    key: String,
    holder: String,
    ttl_ms: u64,
}

/// The lease of `queue` under `prefix` for `holder`. No I/O.
pub(crate) fn lease(
    client: &Client,
    prefix: &str,
    queue: &str,
    holder: &str,
    ttl: Duration,
) -> bus_core::Result<Arc<dyn SingletonLease>> {
    bus_core::transport::Source::queue(queue)?;
    Ok(Arc::new(RedisLease {
        client: client.clone(),
        key: crate::keys::singleton(prefix, queue),
        holder: holder.to_owned(),
        ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1),
    }))
}

impl RedisLease {
    async fn run(&self, script: &LuaScript, with_ttl: bool) -> bus_core::Result<bool> {
        let mut args = vec![Value::from(self.holder.as_str())];
        if with_ttl {
            args.push(Value::from(self.ttl_ms.to_string()));
        }
        let n = script
            .run_int(&self.client, vec![self.key.as_str()], args)
            .await?;
        Ok(n == 1)
    }
}

#[async_trait]
impl SingletonLease for RedisLease {
    async fn acquire(&self) -> bus_core::Result<bool> {
        self.run(&scripts::SINGLETON_ACQUIRE, true).await
    }
    async fn renew(&self) -> bus_core::Result<bool> {
        self.run(&scripts::SINGLETON_RENEW, true).await
    }
    async fn release(&self) -> bus_core::Result<()> {
        self.run(&scripts::SINGLETON_RELEASE, false)
            .await
            .map(|_| ())
    }
}
