//! One private Redis for a benchmark run, with what its phases measure: the CPU of the
//! redis-server and of this process per message, and Redis's own account of its command
//! time (`INFO commandstats`). Each phase gets a transport in a fresh key namespace.

use std::sync::atomic::{AtomicU64, Ordering};

use bus_redis::{RedisConfig, RedisTransport};
use fred::prelude::{Client, ClientLike};
use fred::types::Value;

use crate::cpu::{clock_tick, Meter};
use crate::BenchRedis;

/// The run's Redis, a connection for measuring it, and the CPU meter.
pub struct BenchEnv {
    /// The redis-server (dropped last: it stops the server).
    pub redis: BenchRedis,
    /// CPU per message of the redis-server and of this process.
    pub meter: Meter,
    /// A connection of its own, for `INFO` and `CONFIG RESETSTAT`.
    pub admin: Client,
    runs: AtomicU64,
}

impl std::fmt::Debug for BenchEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BenchEnv")
            .field("url", &self.redis.url)
            .finish_non_exhaustive()
    }
}

impl BenchEnv {
    /// Starts (or joins, with `REDIS_URL`) the run's Redis.
    pub async fn start() -> BenchEnv {
        let redis = BenchRedis::start();
        let admin = Client::new(
            fred::prelude::Config::from_url(&redis.url).unwrap(),
            None,
            None,
            None,
        );
        admin.init().await.unwrap();
        let info: String = admin
            .info(Some(fred::types::InfoKind::Server))
            .await
            .unwrap();
        let redis_pid = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("process_id in INFO server");
        BenchEnv {
            redis,
            meter: Meter {
                redis_pid,
                tick: clock_tick(),
            },
            admin,
            runs: AtomicU64::new(0),
        }
    }

    /// A transport in a fresh namespace (`<letter><n>`).
    pub async fn transport(&self, letter: char) -> RedisTransport {
        let prefix = format!("{letter}{}", self.runs.fetch_add(1, Ordering::Relaxed));
        let config = RedisConfig::from_url(&self.redis.url)
            .unwrap()
            .prefix(prefix);
        RedisTransport::connect(&config).await.unwrap()
    }

    /// Zeroes Redis's command statistics (before a timed phase).
    pub async fn reset_stats(&self) {
        let command = fred::types::CustomCommand::new_static("CONFIG", None, false);
        let _: Value = self.admin.custom(command, vec!["RESETSTAT"]).await.unwrap();
    }

    /// Redis's time in the scripts and commands clients sent since the last reset, per
    /// message.
    pub async fn command_us(&self, messages: u64) -> f64 {
        let info: String = self
            .admin
            .info(Some(fred::types::InfoKind::CommandStats))
            .await
            .unwrap();
        let usec: f64 = info
            .lines()
            .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
            .filter(|(name, _)| {
                matches!(
                    *name,
                    "evalsha" | "eval" | "rpush" | "blmove" | "get" | "set" | "lrange" | "ltrim"
                )
            })
            .filter_map(|(_, rest)| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix("usec="))?
                    .parse::<f64>()
                    .ok()
            })
            .sum();
        usec / messages as f64
    }

    /// Closes the measuring connection; the server stops when `self` drops.
    pub async fn close(self) {
        let _: () = self.admin.quit().await.unwrap();
    }
}
