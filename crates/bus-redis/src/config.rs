//! Redis configuration: one connection string, parsed in one place.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use fred::prelude::{Builder, Client, ClientLike, Config, ReconnectPolicy, ServerConfig};

use crate::keys::DEFAULT_PREFIX;
use crate::{Error, Result};

/// Where and how to connect, and the key namespace.
///
/// ```
/// use bus_redis::RedisConfig;
///
/// let config = RedisConfig::from_url("redis://app:secret@127.0.0.1:6379/2")?.prefix("shop");
/// assert!(!format!("{config:?}").contains("secret"));
/// # Ok::<(), bus_redis::Error>(())
/// ```
///
/// Accepted forms (fred's): `redis://[user[:password]@]host[:port][/db]`,
/// `rediss://...` (needs the `tls` feature), `redis-cluster://host:port?node=host:port&...`,
/// `redis-sentinel://host:port?sentinelServiceName=name`.
#[derive(Clone)]
pub struct RedisConfig {
    fred: Config,
    prefix: String,
    reconnect_max_delay: Duration,
    command_timeout: Duration,
    unresponsive_timeout: Duration,
    /// How long each minute of per-type timing stays in Redis.
    timing_retention: Duration,
    /// Partitioned command queues: name → number of shards (absent: one, unpartitioned).
    partitions: BTreeMap<String, u16>,
    #[cfg(feature = "tls")]
    tls_ca: Option<crate::tls::CaSource>,
}

/// The shortest command and unresponsive timeouts: a consumer's idle wait blocks on
/// Redis for up to a second, and that wait must not count as a dead connection.
const MIN_TIMEOUT: Duration = Duration::from_secs(2);

impl RedisConfig {
    /// Parses a connection string. A password never appears in `Debug` output or logs.
    pub fn from_url(url: &str) -> Result<Self> {
        const SCHEMES: [&str; 6] = [
            "redis://",
            "rediss://",
            "redis-cluster://",
            "rediss-cluster://",
            "redis-sentinel://",
            "rediss-sentinel://",
        ];
        if !SCHEMES.iter().any(|scheme| url.starts_with(scheme)) {
            return Err(Error::Config(format!(
                "invalid Redis URL: it must start with one of {}",
                SCHEMES.join(", ")
            )));
        }
        let fred =
            Config::from_url(url).map_err(|e| Error::Config(format!("invalid Redis URL: {e}")))?;
        if url.starts_with("rediss") && !cfg!(feature = "tls") {
            // fred would silently connect in plain text.
            return Err(Error::Config(
                "rediss:// needs TLS: enable the `tls` feature of bus-redis".into(),
            ));
        }
        Ok(RedisConfig {
            fred,
            prefix: DEFAULT_PREFIX.to_owned(),
            reconnect_max_delay: Duration::from_secs(2),
            command_timeout: Duration::from_secs(5),
            unresponsive_timeout: Duration::from_secs(3),
            timing_retention: crate::report::timing::DEFAULT_TIMING_RETENTION,
            partitions: BTreeMap::new(),
            #[cfg(feature = "tls")]
            tls_ca: None,
        })
    }

    /// The key prefix (namespace), so that several applications can share one Redis.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The database id (overrides the URL's; a cluster has only database 0).
    pub fn database(mut self, database: u8) -> Self {
        self.fred.database = Some(database);
        self
    }

    /// The longest pause between reconnect attempts (2 s by default). Reconnecting never
    /// gives up.
    pub fn reconnect_max_delay(mut self, delay: Duration) -> Self {
        self.reconnect_max_delay = delay;
        self
    }

    /// How long any call waits for Redis's reply (5 s by default, at least 2 s). A call
    /// without a reply in time fails with [`bus_core::Error::OutcomeUnknown`]: Redis
    /// may still carry it out, when the connection comes back (see docs/operations.md,
    /// "Outages").
    ///
    /// Keep it above [`RedisConfig::unresponsive_timeout`] plus the watchdog's 1 s check
    /// interval and a margin (the defaults, 5 s against 3 s + 1 s, do): a call caught on a
    /// dead link is then sent again on the new connection and answered before it times
    /// out, so a half-open link costs its callers a delay, not an error. With a shorter
    /// command timeout such calls fail with `OutcomeUnknown` first; the link is replaced
    /// all the same.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout.max(MIN_TIMEOUT);
        self
    }

    /// How long a connection may leave a PING unanswered before it is taken for dead (a
    /// half-open connection: a dead NAT entry, a paused VM, a black-holing proxy), closed
    /// and replaced: 3 s by default, at least 2 s (a consumer's idle wait blocks its
    /// connection for up to 1 s). A watchdog PINGs every connection once a second, so a
    /// dead link is replaced within this timeout plus 1 s (4 s by default) however busy
    /// the connection is. Commands in flight on it are sent again on the new connection;
    /// every script is safe under that, and a send may be stored twice (at-least-once).
    pub fn unresponsive_timeout(mut self, timeout: Duration) -> Self {
        self.unresponsive_timeout = timeout.max(MIN_TIMEOUT);
        self
    }

    /// How long hosts keep each minute of their per-type timing in Redis (72 h by
    /// default, at least 1 h): the Timing page and `bus metrics` read back that far, and
    /// memory stays bounded (docs/redis-layout.md, "Per-type timing").
    pub fn timing_retention(mut self, retention: Duration) -> Self {
        self.timing_retention = retention.max(Duration::from_secs(3600));
        self
    }

    /// How long each minute of per-type timing is kept ([`RedisConfig::timing_retention`]).
    pub fn timing_kept(&self) -> Duration {
        self.timing_retention
    }

    /// Spreads command queue `queue` over `shards` shards (1 to
    /// [`MAX_PARTITIONS`](crate::MAX_PARTITIONS)), each with a hash tag of its own, so
    /// that one hot queue uses several masters of a Redis Cluster. Every producer and
    /// consumer of the queue must say the same (docs/redis-layout.md, "Partitioned
    /// queues"; docs/operations.md on changing it). One shard, the default, is the plain
    /// queue with its usual key names. Checked at connect.
    ///
    /// ```
    /// # use bus_redis::RedisConfig;
    /// let config = RedisConfig::from_url("redis-cluster://127.0.0.1:7000")?.partitions("orders", 3);
    /// assert_eq!(config.partitions_of("orders"), 3);
    /// assert_eq!(config.partitions_of("invoices"), 1);
    /// # Ok::<(), bus_redis::Error>(())
    /// ```
    pub fn partitions(mut self, queue: impl Into<String>, shards: u16) -> Self {
        self.partitions.insert(queue.into(), shards);
        self
    }

    /// How many shards `queue` has in this configuration (1: not partitioned).
    pub fn partitions_of(&self, queue: &str) -> u16 {
        self.partitions.get(queue).copied().unwrap_or(1)
    }

    /// The partitioned queues: name → shards.
    pub(crate) fn partitioned(&self) -> &BTreeMap<String, u16> {
        &self.partitions
    }

    /// Trusts the certificates of a private CA (PEM, one or more `BEGIN CERTIFICATE`
    /// sections) instead of the system roots for a `rediss://` URL. Needs the `tls`
    /// feature. The PEM is checked at connect: an invalid one, or a CA with a `redis://`
    /// URL, is an [`Error::Config`].
    ///
    /// ```no_run
    /// use bus_redis::{RedisConfig, RedisTransport};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let ca = std::fs::read("/etc/redis/tls/ca.crt")?;
    /// let config = RedisConfig::from_url("rediss://app:secret@redis.internal:6380/0")?
    ///     .tls_ca_pem(ca);
    /// let transport = RedisTransport::connect(&config).await?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_ca = Some(crate::tls::CaSource::Pem(pem.into().into()));
        self
    }

    /// Like [`RedisConfig::tls_ca_pem`], with the PEM read from a file at connect.
    ///
    /// ```no_run
    /// # use bus_redis::RedisConfig;
    /// let config = RedisConfig::from_url("rediss://app:secret@redis.internal:6380")?
    ///     .tls_ca_file("/etc/redis/tls/ca.crt");
    /// # Ok::<(), bus_redis::Error>(())
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls_ca = Some(crate::tls::CaSource::File(path.into()));
        self
    }

    /// The configured key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// Checks the prefix: the same characters as queue names, plus ':'.
    pub(crate) fn validate(&self) -> Result<()> {
        let ok = !self.prefix.is_empty()
            && self.prefix.len() <= 100
            && self
                .prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'));
        if !ok {
            return Err(Error::Config(format!(
                "invalid key prefix {:?}: use 1-100 ASCII letters, digits, '.', '_', '-' or ':'",
                self.prefix
            )));
        }
        for (queue, &shards) in &self.partitions {
            bus_core::transport::validate_name("queue", queue)
                .map_err(|e| Error::Config(format!("partitions: {e}")))?;
            if !(1..=crate::MAX_PARTITIONS).contains(&shards) {
                return Err(Error::Config(format!(
                    "partitions of queue {queue}: {shards} shards; use 1 to {}",
                    crate::MAX_PARTITIONS
                )));
            }
        }
        Ok(())
    }

    /// A new, connected client with a reconnect policy, a command timeout and a
    /// dead-link watchdog (`liveness`). Each blocking waiter gets its own.
    pub async fn connect_client(&self) -> Result<Client> {
        let max_delay = u32::try_from(self.reconnect_max_delay.as_millis()).unwrap_or(u32::MAX);
        let command_timeout = self.command_timeout;
        let client = Builder::from_config(self.fred_config()?)
            .with_connection_config(|c| c.connection_timeout = Duration::from_secs(5))
            .with_performance_config(|p| p.default_command_timeout = command_timeout)
            .set_policy(ReconnectPolicy::new_exponential(0, 50, max_delay, 2))
            .build()
            .map_err(Error::from)?;
        let connection = client.init().await.map_err(|e| self.connect_error(e))?;
        crate::liveness::watch(client.clone(), connection, self.unresponsive_timeout);
        Ok(client)
    }

    /// The error of a first connect, naming the server.
    fn connect_error(&self, error: fred::error::Error) -> Error {
        #[cfg(feature = "tls")]
        if *error.kind() == fred::error::ErrorKind::IO {
            if let Some(tls) = crate::tls::io_error(&error) {
                return tls;
            }
        }
        let server = self.server();
        match error.kind() {
            fred::error::ErrorKind::Auth => Error::Auth {
                server,
                source: error.into(),
            },
            _ => Error::Connect {
                server,
                source: error.into(),
            },
        }
    }

    /// Where this configuration connects, for messages: never a password.
    pub fn server(&self) -> String {
        match &self.fred.server {
            ServerConfig::Centralized { server } => format!("{server}"),
            ServerConfig::Clustered { hosts, .. } => {
                let hosts: Vec<String> = hosts.iter().map(ToString::to_string).collect();
                format!("cluster {}", hosts.join(", "))
            }
            ServerConfig::Sentinel { service_name, .. } => {
                format!("sentinel service {service_name}")
            }
        }
    }

    /// fred's config, with the private CA's trust roots when one was given.
    fn fred_config(&self) -> Result<Config> {
        #[cfg(feature = "tls")]
        if let Some(ca) = &self.tls_ca {
            return crate::tls::with_ca(self.fred.clone(), ca);
        }
        Ok(self.fred.clone())
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let server = self.server();
        let mut debug = f.debug_struct("RedisConfig");
        debug
            .field("server", &server)
            .field("username", &self.fred.username)
            .field(
                "password",
                &self.fred.password.as_ref().map(|_| "<redacted>"),
            )
            .field("database", &self.fred.database)
            .field("prefix", &self.prefix)
            .field("partitions", &self.partitions);
        #[cfg(feature = "tls")]
        debug.field(
            "tls",
            &match (&self.tls_ca, self.fred.tls.is_some()) {
                (Some(ca), _) => format!("{ca:?}"),
                (None, true) => "system roots".to_owned(),
                (None, false) => "off".to_owned(),
            },
        );
        debug.finish()
    }
}
