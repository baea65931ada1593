//! What the samples share: choosing where to run.

use std::sync::Arc;
use std::time::Duration;

use bus_core::{MemoryTransport, Transport};
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::RedisServer;

/// The transport a sample runs on, and what keeps it alive.
#[derive(Debug)]
pub struct Backend {
    /// The transport.
    pub transport: Arc<dyn Transport>,
    /// The Redis transport, when there is one (for cleanup).
    pub redis: Option<RedisTransport>,
    /// A private redis-server started for this run, stopped on drop.
    pub private_server: Option<RedisServer>,
    /// Where the sample runs, for the user.
    pub description: String,
}

async fn try_redis(url: &str, prefix: &str) -> Option<RedisTransport> {
    let config = RedisConfig::from_url(url).ok()?.prefix(prefix);
    tokio::time::timeout(Duration::from_secs(3), RedisTransport::connect(&config))
        .await
        .ok()?
        .ok()
}

/// `REDIS_URL` if set, else a Redis on 127.0.0.1:6379, else a private `redis-server` on a
/// free port, else the in-memory transport.
pub async fn choose_backend(prefix: &str) -> Backend {
    if let Ok(url) = std::env::var("REDIS_URL") {
        match try_redis(&url, prefix).await {
            Some(redis) => return Backend::redis(redis, None, "Redis at REDIS_URL".into()),
            None => eprintln!("REDIS_URL is set but Redis there is not reachable; trying others"),
        }
    }
    let local = std::net::TcpStream::connect_timeout(
        &([127, 0, 0, 1], 6379).into(),
        Duration::from_millis(200),
    )
    .is_ok();
    if local {
        if let Some(redis) = try_redis("redis://127.0.0.1:6379/0", prefix).await {
            return Backend::redis(redis, None, "the local Redis at 127.0.0.1:6379".into());
        }
    }
    match RedisServer::start() {
        Ok(server) => {
            if let Some(redis) = try_redis(&server.url(), prefix).await {
                let description = format!("a private redis-server on 127.0.0.1:{}", server.port());
                return Backend::redis(redis, Some(server), description);
            }
        }
        Err(e) => eprintln!("no Redis available ({e})"),
    }
    Backend {
        transport: Arc::new(MemoryTransport::new()),
        redis: None,
        private_server: None,
        description: "the in-memory transport (no Redis found)".into(),
    }
}

impl Backend {
    /// Closes the Redis connection before a private server stops, so the run ends quietly.
    pub async fn close(self) {
        if let Some(redis) = &self.redis {
            let _ = redis.close().await;
        }
    }

    fn redis(
        redis: RedisTransport,
        private_server: Option<RedisServer>,
        description: String,
    ) -> Self {
        Backend {
            transport: Arc::new(redis.clone()),
            redis: Some(redis),
            private_server,
            description,
        }
    }
}
