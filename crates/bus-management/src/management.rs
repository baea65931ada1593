//! [`Management`]: the handle every operation hangs off, and how queues are named.

use bus_core::Source;
use bus_redis::keys::QueueKeys;
use bus_redis::{RedisConfig, RedisTransport};
use fred::prelude::{Client, ClientLike};

use crate::{Error, Result};

/// Management of the bus's queues, topics, dead letters and sagas in one Redis (SPEC §6).
///
/// A cheap-to-clone handle over one connection; every key comes from [`bus_redis::keys`]
/// under the configuration's prefix, exactly as the transport lays them out
/// (`docs/redis-layout.md`). Queues and subscriptions are both addressed as a
/// [`Source`]; [`parse_source`] reads the `queue` / `topic/subscription` form.
///
/// ```no_run
/// use bus_management::{parse_source, Management};
/// use bus_redis::RedisConfig;
///
/// # async fn demo() -> bus_management::Result<()> {
/// let config = RedisConfig::from_url("redis://127.0.0.1:6379")?.prefix("shop");
/// let management = Management::connect(&config).await?;
/// let stats = management.stats(&parse_source("orders")?).await?;
/// println!("{} ready, {} dead", stats.ready, stats.dead);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Management {
    transport: RedisTransport,
    saga_prefix: String,
}

impl Management {
    /// Connects (failing at once on an invalid prefix, a wrong password or an unreachable
    /// server).
    pub async fn connect(config: &RedisConfig) -> Result<Self> {
        Ok(Self::from_transport(RedisTransport::connect(config).await?))
    }

    /// Management over an existing transport's connection and prefix.
    pub fn from_transport(transport: RedisTransport) -> Self {
        Management {
            transport,
            saga_prefix: String::new(),
        }
    }

    /// The key prefix of the saga store (empty by default, as `RedisSagaStore`'s): sagas
    /// live at `[<prefix>:]sagas:<partition>:<id>`.
    pub fn saga_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.saga_prefix = prefix.into();
        self
    }

    /// Closes the connection.
    pub async fn close(&self) -> Result<()> {
        Ok(self.client().quit().await?)
    }

    pub(crate) fn client(&self) -> &Client {
        self.transport.client()
    }

    /// The key prefix (namespace) of the bus's keys in use.
    pub fn key_prefix(&self) -> &str {
        self.prefix()
    }

    pub(crate) fn prefix(&self) -> &str {
        self.transport.config().key_prefix()
    }

    pub(crate) fn keys(&self, source: &Source) -> QueueKeys {
        self.transport.keys(source)
    }

    pub(crate) fn saga_key_prefix(&self) -> &str {
        &self.saga_prefix
    }
}

/// Reads a queue name, or `topic/subscription` for a subscription of a topic; both names
/// are checked as the bus checks them.
///
/// ```
/// use bus_core::Source;
///
/// let source = bus_management::parse_source("payments/mail")?;
/// assert_eq!(source, Source::subscription("payments", "mail")?);
/// assert_eq!(bus_management::source_name(&source), "payments/mail");
/// assert!(bus_management::parse_source("a/b/c").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse_source(text: &str) -> Result<Source> {
    let invalid = |reason| Error::InvalidSource {
        name: text.to_owned(),
        reason,
    };
    match text.split_once('/') {
        None => Ok(Source::queue(text)?),
        Some((_, name)) if name.contains('/') => Err(invalid(
            "use `queue` or `topic/subscription`, with one '/' at most",
        )),
        Some((topic, name)) => Ok(Source::subscription(topic, name)?),
    }
}

/// The name [`parse_source`] reads: `queue` or `topic/subscription`.
pub fn source_name(source: &Source) -> String {
    match source {
        Source::Queue(queue) => queue.clone(),
        Source::Subscription { topic, name } => format!("{topic}/{name}"),
    }
}

/// The Redis Cluster hash tag of a source's keys: the queue, or the subscription's topic.
pub(crate) fn hash_tag(source: &Source) -> &str {
    match source {
        Source::Queue(queue) => queue,
        Source::Subscription { topic, .. } => topic,
    }
}

/// The wire name of the messages a source normally holds: the queue, or the topic.
pub(crate) fn wire_name(source: &Source) -> &str {
    hash_tag(source)
}
