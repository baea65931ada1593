//! Host heartbeats: a running [`Host`](crate::Host) reports what it is and does
//! every few seconds through its transport's [`HostReporter`], so operators can list the
//! hosts (`bus hosts`, the dashboard) and see one that stopped reporting as lost.
//!
//! bus-core knows no storage: a transport offers a reporter
//! ([`TransportExtras::host_reporter`](crate::transport::TransportExtras::host_reporter), none by default) and
//! the host calls it on an interval ([`HostBuilder::heartbeat_interval`](crate::HostBuilder::heartbeat_interval)).
//! With no reporter the host does nothing more per message; with one, a middleware counts
//! the handlers running (two atomic operations per message).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::BreakerState;
use crate::Result;

/// How often a host reports by default; it shows as lost after two missed reports.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);

/// What a host reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HostInfo {
    /// Unique per process: `<host name>:<pid>:<start ms>`.
    pub id: String,
    /// The machine's host name (`$HOSTNAME`, else `/etc/hostname`, else `unknown`).
    pub hostname: String,
    /// The operating-system process id.
    pub pid: u32,
    /// The bus version the host runs (bus-core's crate version).
    pub version: String,
    /// The queues and subscriptions it consumes (`queue`, `topic/subscription`).
    pub queues: Vec<String>,
    /// Handlers it may run at once: the sum of its processors' `max_concurrent_calls`.
    pub concurrency: usize,
    /// Handlers running at the time of the report.
    pub in_flight: usize,
    /// When the host started, ms since the Unix epoch (the host's clock).
    pub started_at_ms: u64,
    /// How often it reports, in ms: readers call it lost after two missed reports.
    pub interval_ms: u64,
    /// The state of each circuit breaker it runs, by queue (`queue`,
    /// `topic/subscription`); only processors with a breaker appear.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub breakers: BTreeMap<String, BreakerState>,
}

/// Where a host's heartbeats go; implemented by a transport (bus-redis writes them to
/// Redis, docs/redis-layout.md, "Operator keys").
#[async_trait]
pub trait HostReporter: Send + Sync + std::fmt::Debug + 'static {
    /// Records `info` as the host's latest state; the record expires on its own if no
    /// further report comes.
    async fn report(&self, info: &HostInfo) -> Result<()>;
    /// The host stopped gracefully: removes its record (by default, nothing: it expires).
    async fn leave(&self, id: &str) -> Result<()> {
        let _ = id;
        Ok(())
    }
}

/// The machine's host name, without a dependency: `$HOSTNAME`, then `/etc/hostname`.
pub(crate) fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}
