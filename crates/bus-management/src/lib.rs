//! Management of the bus on Redis (SPEC §6): the API under the `bus` command-line tool
//! and the dashboard.
//!
//! Every queue's counts, as `bus stats` prints them:
//!
//! ```no_run
//! use bus_management::Management;
//! use bus_redis::RedisConfig;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let management = Management::connect(&RedisConfig::from_url("redis://127.0.0.1:6379")?).await?;
//! for stats in management.stats_all().await? {
//!     println!("{stats:?}");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Operators list queues, topics and subscriptions; read each queue's counts, its next
//! messages, its scheduled messages and its dead letters with their reasons and errors;
//! requeue dead letters (all, some, or to another queue); delete a dead letter; purge a
//! queue; send a message; remove a subscription; list and delete sagas.
//!
//! Every change an operator makes, through `bus` or the dashboard, is an [`Action`] given
//! to [`Fleet::apply`], which resolves the queue's address, checks that its kind can do
//! it, makes the change and appends the audit entry once; the [`Outcome`] renders itself
//! as JSON and as text, so the tools only parse and print.
//!
//! This crate owns no key and no script: every operation on the bus's layout is
//! [`bus_redis::admin`]'s (the layout's one owner, beside the transport that writes it),
//! and sagas are read through [`bus_redis_saga::RedisSagaStore`]'s API
//! (`docs/redis-layout.md`, "Who owns which keys"). [`Management`] adds what an operator
//! needs on top: names checked and read (`queue` / `topic/subscription`), a typo reported
//! with what exists, a JSON body checked, a subscription that still holds messages kept.
//! The records shown ([`DeadLetter`], [`ErrorRecord`], [`QueueStats`],
//! [`MessageSummary`]) are bus-core's, the same for every transport; `docs/operations.md`
//! ("Management") describes the tool and the choices made.
//!
//! | Item | What it is | Module |
//! |---|---|---|
//! | [`Management`], [`parse_source`], [`source_name`] | the handle; `queue` / `topic/subscription` names | `management` |
//! | [`Fleet`], [`Address`], [`Operator`], [`Capability`] | every kind of queue (the bus's own, BabelQueue's layouts) behind bus-core's one operator surface, addressed `queue`, `topic/subscription` or `<kind>:<queue>` | `fleet` |
//! | [`Management::sagas`], [`saga`](Management::saga), [`delete_saga`](Management::delete_saga) | [`SagaEntry`], [`SagaState`] | `sagas` |
//! | [`Management::audit`], [`audit_log`](Management::audit_log) | [`AuditEntry`], [`os_user`]: the operators' changes, in a capped stream | `audit` |
//! | [`Management::health`] | [`Health`], [`HealthCheck`], [`Severity`]: Redis's configuration checked (`bus doctor`) | `health` |
//! | [`Management::hosts`] | [`HostEntry`] (with bus-core's [`HostInfo`]): the hosts' heartbeats, each running or lost | `hosts` |
//! | [`Management::schedules`] | [`ScheduleEntry`] (with bus-core's [`ScheduleRecord`]): the recurring schedules, last tick and next run | `schedules` |
//! | [`Management::search`], [`act`](Management::act), [`act_all`](Management::act_all), [`edit_and_requeue`](Management::edit_and_requeue), [`edits`](Management::edits) | [`SearchQuery`], [`SearchPage`], [`Found`], [`Place`], [`SearchAction`], [`Acted`], [`ActedPage`], [`Edited`], [`EditRecord`]: find and act on all that matches; edit and retry a dead letter | `search` |
//! | [`Action`], [`Fleet::apply`], [`Actor`], [`Outcome`], [`Done`], [`Audited`], [`OnMatches`], [`Pages`] | the operator's actions: every change `bus` and the dashboard make, applied and audited once, rendered as JSON or text | `ops` |
//! | [`Topic`], [`Purged`], [`RemovedSubscription`], [`ReadyMessage`], [`ScheduledMessage`], [`Selection`], [`Requeued`] | what the operations return (from [`bus_redis::admin`]) | |
//! | [`DeadLetter`], [`ErrorRecord`], [`QueueStats`], [`MessageSummary`] | the records (from [`bus_core`]) | |
//! | [`Error`], [`Result`] | what can go wrong | `error` |

#![warn(missing_docs)]
mod audit;
mod error;
mod fleet;
mod health;
mod hosts;
mod management;
mod ops;
mod sagas;
mod schedules;
mod search;

pub use bus_core::heartbeat::HostInfo;
pub use bus_core::operator::{Capability, Operator};
pub use bus_core::records::{DeadLetter, ErrorRecord, MessageSummary, QueueStats};
pub use bus_core::transport::ScheduleRecord;
pub use bus_redis::admin::{
    os_user, AuditEntry, Health, HealthCheck, HostEntry, Purged, ReadyMessage, RemovedSubscription,
    Requeued, ScheduleEntry, ScheduledMessage, Selection, Severity, Topic,
};
pub use bus_redis::admin::{
    Acted, ActedPage, Action as SearchAction, EditRecord, Edited, Found, Place, SearchPage,
    SearchQuery,
};
pub use error::{Error, Result};
pub use fleet::{Address, Fleet, NATIVE};
pub use management::{parse_source, source_name, Management};
pub use ops::{Action, Actor, Audited, Done, OnMatches, Outcome, Pages};
pub use sagas::{SagaEntry, SagaState};
