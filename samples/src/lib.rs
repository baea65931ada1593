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

/// How long a sample waits for a Redis to answer before it gives up on it.
const CONNECT_WITHIN: Duration = Duration::from_secs(5);

/// Why the Redis that `REDIS_URL` names cannot be used. A sample then stops (rather
/// than run somewhere else and look as if it had worked on that Redis).
#[derive(Debug)]
pub struct RedisUrlError {
    reason: String,
}

impl std::fmt::Display for RedisUrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "REDIS_URL is set but the Redis it names cannot be used: {}",
            self.reason
        )
    }
}

impl std::error::Error for RedisUrlError {}

/// A connected transport on the Redis at `url`, or why not.
async fn connect(url: &str, prefix: &str) -> Result<RedisTransport, String> {
    let config = RedisConfig::from_url(url)
        .map_err(|e| e.to_string())?
        .prefix(prefix);
    match tokio::time::timeout(CONNECT_WITHIN, RedisTransport::connect(&config)).await {
        Ok(connected) => connected.map_err(|e| with_causes(&e)),
        Err(_) => Err(format!("no answer within {} s", CONNECT_WITHIN.as_secs())),
    }
}

/// An error and its causes, as one line (each level names only what happened there).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

async fn try_redis(url: &str, prefix: &str) -> Option<RedisTransport> {
    connect(url, prefix).await.ok()
}

/// `REDIS_URL` if set (and only it: when it cannot be used, the error says why), else a
/// Redis on 127.0.0.1:6379, else a private `redis-server` on a free port, else the
/// in-memory transport.
pub async fn choose_backend(prefix: &str) -> Result<Backend, RedisUrlError> {
    if let Some(url) = std::env::var_os("REDIS_URL") {
        let Some(url) = url.to_str() else {
            let reason = "it is not valid UTF-8".into();
            return Err(RedisUrlError { reason });
        };
        return match connect(url, prefix).await {
            Ok(redis) => Ok(Backend::redis(redis, None, "Redis at REDIS_URL".into())),
            Err(reason) => Err(RedisUrlError { reason }),
        };
    }
    let local = std::net::TcpStream::connect_timeout(
        &([127, 0, 0, 1], 6379).into(),
        Duration::from_millis(200),
    )
    .is_ok();
    if local {
        if let Some(redis) = try_redis("redis://127.0.0.1:6379/0", prefix).await {
            return Ok(Backend::redis(
                redis,
                None,
                "the local Redis at 127.0.0.1:6379".into(),
            ));
        }
    }
    match RedisServer::start() {
        Ok(server) => {
            if let Some(redis) = try_redis(&server.url(), prefix).await {
                let description = format!("a private redis-server on 127.0.0.1:{}", server.port());
                return Ok(Backend::redis(redis, Some(server), description));
            }
        }
        Err(e) => eprintln!("no Redis available ({e})"),
    }
    Ok(Backend {
        transport: Arc::new(MemoryTransport::new()),
        redis: None,
        private_server: None,
        description: "the in-memory transport (no Redis found)".into(),
    })
}

/// A rate for people: whole messages a second with thousands separators, `23,082/s`.
pub fn per_second(rate: f64) -> String {
    // `as` saturates: a NaN or negative rate shows as 0.
    format!("{}/s", indicatif::HumanCount(rate.round() as u64))
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
