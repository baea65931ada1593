//! What every process the chaos tests start begins with: its settings from the
//! environment the test gives it, its logs on stderr, its transport.

use bus_redis::{RedisConfig, RedisTransport};

/// A variable the test sets for the process.
pub fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set"))
}

/// Logs to stderr, filtered by `RUST_LOG` (stdout is the test's channel).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
}

/// The transport over `REDIS_URL` under the key prefix `BUS_PREFIX`, and that prefix.
pub async fn connect() -> Result<(RedisTransport, String), Box<dyn std::error::Error>> {
    let prefix = env("BUS_PREFIX")?;
    let config = RedisConfig::from_url(&env("REDIS_URL")?)?.prefix(prefix.as_str());
    Ok((RedisTransport::connect(&config).await?, prefix))
}
