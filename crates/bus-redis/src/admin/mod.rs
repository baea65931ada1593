//! [`Admin`]: every operation that reads or changes the native layout outside the hot
//! path (stats, peek, scheduled, dead letters, requeue, move, delete, purge, a raw send,
//! unsubscribe, discovery by `SCAN`), beside the transport that writes it, so a change of
//! the layout changes both at once. Its scripts are `lua/admin_*.lua`, run after the
//! transport's `lua/common.lua` prelude (one `bulk()`, one stray-reference rule, one
//! "fresh envelope or storage id" test). The management API (`bus-management`), the `bus`
//! tool and the dashboard sit on top; docs/redis-layout.md ("Who owns which keys").
//!
//! | Item | What it is | Module |
//! |---|---|---|
//! | [`Admin::queues`], [`topics`](Admin::topics), [`sources`](Admin::sources), [`exists`](Admin::exists), [`other_prefixes`](Admin::other_prefixes) | registry sets merged with a `SCAN` of the layout; [`Topic`] | `discovery` |
//! | [`Admin::stats`], [`purge`](Admin::purge), [`send`](Admin::send), [`remove_subscription`](Admin::remove_subscription) | [`Purged`], [`Unsubscribe`], [`RemovedSubscription`], [`Held`] | `queues` |
//! | [`Admin::peek`], [`scheduled`](Admin::scheduled) | [`ReadyMessage`], [`ScheduledMessage`] | `browse` |
//! | [`Admin::in_flight`], [`errors`](Admin::errors), [`counters`](Admin::counters), [`redis_now_ms`](Admin::redis_now_ms) | [`InFlightMessage`], [`Counters`] (what the dashboard shows) | `inflight` |
//! | [`Admin::presence`] | [`Presence`]: where a reserved message is now, by its receipt (bus-workflows' sweeper) | `presence` |
//! | [`Admin::partitions`], [`shard_stats`](Admin::shard_stats) | a partitioned queue's shards, each one's counts; every operation above acts on all of them | `partitions` |
//! | [`Admin::dead_letters`], [`requeue`](Admin::requeue), [`delete_dead_letter`](Admin::delete_dead_letter) | [`Selection`], [`Requeued`]; the records bus-redis's scripts write, read back | `dead_letters`, `records` |
//! | [`Admin::audit`], [`audit_log`](Admin::audit_log), [`os_user`] | [`AuditEntry`]: the operators' changes, in a capped stream | `audit` |
//! | [`health`], [`Admin::health`] | [`Health`], [`HealthCheck`], [`Severity`]: what in Redis's configuration loses or stalls messages (`bus doctor`, the dashboard) | `health` |
//! | [`Admin::pause`], [`resume`](Admin::resume), [`limit_concurrency`](Admin::limit_concurrency), [`limit_rate`](Admin::limit_rate), [`flow`](Admin::flow) | flow control (the `flow` hash every reserve reads); `impl` [`bus_core::flow::FlowControl`] | `flow` |
//! | [`Admin::hosts`] | [`HostEntry`]: the hosts' heartbeats, each running or lost | `hosts` |
//! | [`Admin::schedules`] | [`ScheduleEntry`]: the recurring schedules, last tick and next run | `schedules` |
//! | [`Admin::search`], [`act`](Admin::act), [`act_all`](Admin::act_all) | [`SearchQuery`], [`SearchPage`], [`Found`], [`Action`], [`Acted`]: find ready, delayed and dead messages in bounded pages, and act on every match | `search`, `act` |
//! | [`Admin::edit_and_requeue`], [`edits`](Admin::edits) | [`Edited`], [`EditRecord`]: edit a dead letter and retry it, the original kept in the queue's edit history | `edit` |
//! | [`Admin::timing`], [`redis_minute`](Admin::redis_minute) | [`MinuteTiming`]: the hosts' per-type timing, per minute | `timing` |
//! | `impl` [`bus_core::operator::Operator`] for [`Admin`], [`parse_name`], [`KIND`] | the native layout behind the one operator surface (`bus`, dashboard, metrics) | `operator` |

mod act;
mod audit;
mod browse;
mod dead_letters;
mod discovery;
mod edit;
mod flow;
mod health;
mod hosts;
mod inflight;
mod key_backlogs;
mod operator;
mod partitions;
mod presence;
mod queues;
mod records;
mod schedules;
mod search;
mod timing;

pub(crate) use records::parse_errors;

use bus_core::transport::Source;
use fred::prelude::Client;

use crate::keys::QueueKeys;
use crate::RedisTransport;

pub use act::{Acted, ActedPage, Action};
pub use audit::{os_user, AuditEntry, AUDIT_KEEP};
pub use browse::{ReadyMessage, ScheduledMessage};
pub use dead_letters::{Requeued, Selection};
pub use discovery::Topic;
pub use edit::{EditRecord, Edited, EDITS_KEPT};
pub use health::{health, Health, HealthCheck, Severity};
pub use hosts::HostEntry;
pub use inflight::{Counters, InFlightMessage};
pub use key_backlogs::{KeyBacklog, KeyBacklogs, KEYS_LOOKED_AT};
pub use operator::{parse_name, KIND};
pub use presence::Presence;
pub use queues::{Held, Purged, RemovedSubscription, Unsubscribe};
pub use schedules::ScheduleEntry;
pub use search::{Cursor, Found, Place, SearchPage, SearchQuery, MAX_PAGE};
pub use timing::{MinuteTiming, MAX_TIMING_MINUTES};

/// The layout's administration, on a transport's connection and under its key prefix.
/// A cheap-to-clone handle.
///
/// ```no_run
/// use bus_redis::admin::Admin;
/// use bus_redis::{RedisConfig, RedisTransport};
///
/// # async fn demo() -> bus_redis::Result<()> {
/// let transport = RedisTransport::connect(&RedisConfig::from_url("redis://127.0.0.1")?).await?;
/// let admin = Admin::new(transport);
/// let stats = admin.stats(&bus_core::transport::Source::queue("orders")?).await?;
/// println!("{} ready, {} dead", stats.ready, stats.dead_letters);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Admin {
    transport: RedisTransport,
}

impl Admin {
    /// Administration over a transport's connection and prefix.
    pub fn new(transport: RedisTransport) -> Self {
        Admin { transport }
    }

    /// The transport it works through.
    pub fn transport(&self) -> &RedisTransport {
        &self.transport
    }

    /// The key prefix (namespace) in use.
    pub fn key_prefix(&self) -> &str {
        self.transport.config().key_prefix()
    }

    fn client(&self) -> &Client {
        self.transport.client()
    }

    fn keys(&self, source: &Source) -> QueueKeys {
        self.transport.keys(source)
    }
}

/// The Redis Cluster hash tag of a source's keys: the queue, or the subscription's topic.
fn hash_tag(source: &Source) -> &str {
    match source {
        Source::Queue(queue) => queue,
        Source::Subscription { topic, .. } => topic,
    }
}

/// The last index of a range of `n` elements, for `LRANGE`/`ZRANGE`.
fn last_index(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX) - 1
}
