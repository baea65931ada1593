//! Management of the bus on Redis (SPEC §6): the API under the `bus` command-line tool.
//!
//! Operators list queues, topics and subscriptions; read each queue's counts, its next
//! messages, its scheduled messages and its dead letters with their reasons and errors;
//! requeue dead letters (all, some, or to another queue); delete a dead letter; purge a
//! queue; send a message; remove a subscription; list and delete sagas. Every key comes
//! from [`bus_redis::keys`] and every change is one Lua script (`lua/*.lua`) or one
//! command, as `docs/redis-layout.md` lays them out; `docs/operations.md` ("Management")
//! describes the tool and the choices made.
//!
//! | Item | What it is | Module |
//! |---|---|---|
//! | [`Management`], [`parse_source`], [`source_name`] | the handle; `queue` / `topic/subscription` names | `management` |
//! | [`Management::queues`], [`topics`](Management::topics), [`stats`](Management::stats), [`purge`](Management::purge), [`send`](Management::send), [`remove_subscription`](Management::remove_subscription) | [`Topic`], [`QueueStats`], [`Purged`], [`RemovedSubscription`] | `queues` |
//! | [`Management::ensure_exists`], [`other_prefixes`](Management::other_prefixes) | registry sets merged with a `SCAN` of the layout | `discovery` |
//! | [`Management::peek`], [`scheduled`](Management::scheduled) | [`ReadyMessage`], [`ScheduledMessage`], [`MessageSummary`] | `browse`, `message` |
//! | [`Management::dead_letters`], [`requeue`](Management::requeue), [`delete_dead_letter`](Management::delete_dead_letter) | [`DeadLetter`], [`ErrorRecord`], [`Selection`], [`Requeued`] | `dead_letters` |
//! | [`Management::sagas`], [`saga`](Management::saga), [`delete_saga`](Management::delete_saga) | [`SagaEntry`], [`SagaState`] | `sagas` |
//! | [`Error`], [`Result`] | what can go wrong | `error` |
//! | (scripts) | `lua/*.lua`, run by SHA with a `NOSCRIPT` fallback | `scripts` |

mod browse;
mod dead_letters;
mod discovery;
mod error;
mod management;
mod message;
mod queues;
mod sagas;
mod scripts;

pub use browse::{ReadyMessage, ScheduledMessage};
pub use dead_letters::{DeadLetter, ErrorRecord, Requeued, Selection};
pub use error::{Error, Result};
pub use management::{parse_source, source_name, Management};
pub use message::MessageSummary;
pub use queues::{Purged, QueueStats, RemovedSubscription, Topic};
pub use sagas::{SagaEntry, SagaState};
